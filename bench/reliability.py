"""Reliability report: import a corpus while everything goes wrong, then count.

In one run: the embedding server answers 20 % of requests 429 (Retry-After) and 10 % 500; the
worker is killed with SIGKILL several times (at 20 %, 40 %, 60 % of the corpus embedded) and
restarted; the Temporal dev server is killed with SIGKILL once (at 80 %) and restarted on its
SQLite file. Then it prints: imports completed / started, index points vs. expected chunks
per document, embeddings billed / unique inputs, and the time to recover after each fault
(from the kill until embedding requests succeed again).

    .venv/bin/python -m bench.reliability [--docs 24] [--paragraphs 60] [--worker-kills 3]

Not a test: it prints figures (docs/reliability.md quotes them). Free ports, a temporary
directory; every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT, bench_settings, env_for
from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database
from knowledgeops.index.opening import open_index
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.runtime.temporal import connect
from starter.dev_server import TemporalDevServer, free_port
from starter.services.documents import DocumentService
from starter.services.tasks import TaskQueueService
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.fake_openai import FakeOpenAI


@dataclass
class Run:
    fake: FakeOpenAI
    server: TemporalDevServer
    settings: Settings
    log: Path
    worker: subprocess.Popen[bytes] | None = None
    recoveries: list[tuple[str, float]] = field(default_factory=list)

    def start_worker(self) -> None:
        with self.log.open("ab") as out:
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "worker", "--no-api"],
                cwd=ROOT,
                env=env_for(self.settings),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill_worker(self) -> None:
        assert self.worker is not None
        self.worker.send_signal(signal.SIGKILL)
        self.worker.wait()

    def stop_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.terminate()
            try:
                self.worker.wait(30)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait()

    async def recovered(self, fault: str, killed_at: float) -> None:
        """Wait until embedding requests succeed again after a kill; record how long."""
        before = self.fake.embedded_count()
        await until(lambda: self.fake.embedded_count() > before)
        self.recoveries.append((fault, time.monotonic() - killed_at))


async def until(condition: Callable[[], bool]) -> None:
    # The counter belongs to the fake server's threads: polling is the simple, honest wait.
    while not condition():  # noqa: ASYNC110
        await asyncio.sleep(0.05)


def write_corpus(folder: Path, docs: int, paragraphs: int) -> list[Path]:
    folder.mkdir(parents=True)
    files = []
    for d in range(docs):
        path = folder / f"doc-{d:03d}.txt"
        # Unique per document, so billed / unique counts every duplicate embedding exactly.
        path.write_text(numbered_paragraphs(paragraphs).replace("Paragraph", f"Doc {d} part"))
        files.append(path)
    return files


async def drive(run: Run, files: list[Path], expected: int, worker_kills: int) -> list[str]:
    settings = run.settings
    db = await Database.open(settings)
    service = TaskQueueService(await connect(settings), settings, db)
    documents = DocumentService(service, db, settings)
    task_ids = [(await documents.import_file(p)).task_id for p in files]
    # Faults at fractions of the corpus embedded: workers first, then Temporal itself.
    marks = [(i + 1) / (worker_kills + 2) for i in range(worker_kills)]
    for mark in [*marks, (worker_kills + 1) / (worker_kills + 2)]:
        target = mark * expected
        await until(lambda: run.fake.embedded_count() >= target)  # noqa: B023 (awaited here)
        killed_at = time.monotonic()
        if mark in marks:
            run.kill_worker()
            run.start_worker()
            await run.recovered(f"worker SIGKILL at {mark:.0%}", killed_at)
        else:
            assert run.server.pid is not None
            os.kill(run.server.pid, signal.SIGKILL)
            run.server.stop()
            run.server.start()
            await run.server.wait_ready()
            await run.recovered(f"Temporal SIGKILL at {mark:.0%}", killed_at)
    finished = [await service.wait(t, timeout=600) for t in task_ids]
    await db.close()
    return [f"{s.task_id}: {s.status} {s.last_error or ''}" for s in finished]


async def count_points(settings: Settings, results: dict[str, int]) -> tuple[int, int]:
    """(documents whose point count equals their chunk count, total points)."""
    store = open_index(settings)
    try:
        collection = VectorIndex.collection_name("openai:fake-embed")
        exact, total = 0, 0
        for document_id, chunks in results.items():
            n = await store.count(collection, document_id)
            exact += n == chunks
            total += n
        return exact, total
    finally:
        store.close()


async def import_results(settings: Settings, task_ids: list[str]) -> dict[str, int]:
    service = TaskQueueService(await connect(settings), settings)
    out = {}
    for t in task_ids:
        st = await service.get_status(t)
        if st.result:
            out[st.result["document_id"]] = int(st.result["total_chunks"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=24)
    ap.add_argument("--paragraphs", type=int, default=60)
    ap.add_argument("--worker-kills", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ko-reliability-") as tmp:
        work = Path(tmp)
        fake = FakeOpenAI(latency=0.05, fault_rates={429: 0.2, 500: 0.1}, seed=args.seed)
        fake.start()
        server = TemporalDevServer(
            host="127.0.0.1",
            port=free_port(),
            db_file=work / "temporal.db",
            log_file=work / "temporal.log",
            headless=True,
        )
        server.start()
        run: Run | None = None
        try:
            asyncio.run(server.wait_ready())
            settings = bench_settings(
                work / "data",
                server.address,
                EMBEDDING_PROVIDER="openai",
                EMBEDDING_MODEL="fake-embed",
                OPENAI_BASE_URL=fake.base_url,
                OPENAI_API_KEY=fake.api_key,
                OPENAI_TIMEOUT_SECONDS=5,
                EMBEDDING_BATCH_SIZE=16,
                CHUNK_TOKENS=64,
                CHUNK_OVERLAP=8,
                BACKUP_SCHEDULE="",
                CLEANUP_SCHEDULE="",
                REPORT_SCHEDULE="",
            )
            files = write_corpus(work / "corpus", args.docs, args.paragraphs)
            run = Run(fake, server, settings, work / "worker.log")
            run.start_worker()
            started = time.monotonic()
            expected = args.docs * args.paragraphs  # ~one 64-token chunk per paragraph
            lines = asyncio.run(drive(run, files, expected, args.worker_kills))
            elapsed = time.monotonic() - started
            run.stop_worker()
            task_ids = [line.split(":", 1)[0] for line in lines]
            results = asyncio.run(import_results(settings, task_ids))
            exact, points = asyncio.run(count_points(settings, results))
        finally:
            if run is not None:
                run.stop_worker()
            server.stop()
            fake.stop()
        completed = sum(" completed " in f"{line} " for line in lines)
        billed, unique = fake.embedded_count(), len(set(fake.inputs))
        print(f"corpus: {args.docs} documents, {sum(results.values())} chunks; {elapsed:.0f} s")
        print(f"faults: embedding server 20% 429 + 10% 500 ({fake.requests} requests); ", end="")
        print(f"{args.worker_kills} worker SIGKILLs; 1 Temporal SIGKILL")
        print(f"imports completed / started: {completed} / {len(lines)}")
        print(f"documents whose index points == chunks: {exact} / {len(results)}")
        print(f"index points: {points}; expected chunks: {sum(results.values())}")
        print(f"embeddings billed / unique: {billed} / {unique} = {billed / max(unique, 1):.3f}")
        for fault, seconds in run.recoveries if run else []:
            print(f"recovery after {fault}: {seconds:.1f} s")
        for line in lines:
            if " completed" not in line:
                print("NOT COMPLETED:", line)


if __name__ == "__main__":
    main()
