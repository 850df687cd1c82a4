"""Fair scheduling: how long a one-page upload takes while a bulk import runs.

    .venv/bin/python -m bench.fairness                   # 50-document bulk import, 20 tries
    .venv/bin/python -m bench.fairness --no-priority     # the same without priorities (before)

A real dev server and worker (local embedder). The bulk import (45 documents of ~100 chunks
and five 2 MB text files) is submitted at once; then, every few seconds, a one-page note is
uploaded and timed from submission to completed. Prints p50 / p95 / max over the tries and
how far the bulk import got meanwhile. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import (
    bench_settings,
    temporal_server,
    worker_process,
    write_big_text,
    write_corpus,
)
from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database
from knowledgeops.runtime.temporal import connect
from starter.services.documents import DocumentService
from starter.services.tasks import TaskQueueService


async def measure(settings: Settings, bulk: list[Path], notes: list[Path], gap: float) -> None:
    service = TaskQueueService(await connect(settings), settings)
    db = await Database.open(settings)
    documents = DocumentService(service, db, settings)
    refs = [await documents.import_file(p) for p in bulk]
    print(f"bulk import submitted: {len(refs)} documents")
    times: list[float] = []
    for note in notes:
        await asyncio.sleep(gap)
        started = time.perf_counter()
        ref = await documents.import_file(note)
        st = await service.wait(ref.task_id, timeout=600)
        took = time.perf_counter() - started
        times.append(took)
        assert st.status == "completed", st.last_error
        print(f"  one-page upload {len(times):2d}: {took:5.1f} s")
    done = 0
    for r in refs:
        done += (await service.get_status(r.task_id)).status == "completed"
    q = statistics.quantiles(times, n=20)
    print(
        f"one-page uploads: n={len(times)} p50={statistics.median(times):.1f} s "
        f"p95={q[18]:.1f} s max={max(times):.1f} s; bulk documents completed meanwhile: "
        f"{done}/{len(refs)}"
    )
    await asyncio.gather(*(service.wait(r.task_id, timeout=3600) for r in refs))
    await db.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tries", type=int, default=20)
    ap.add_argument("--gap", type=float, default=3.0, help="seconds between one-page uploads")
    ap.add_argument("--no-priority", action="store_true", help="every import at one priority")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ko-fair-") as tmp:
        work = Path(tmp)
        bulk = write_corpus(work / "bulk", 45, 200)
        bulk += [write_big_text(work / "bulk" / f"big-{i}.txt", 2, seed=i) for i in range(5)]
        notes = []
        for i in range(args.tries):
            note = work / "notes" / f"note-{i:02d}.txt"
            note.parent.mkdir(exist_ok=True)
            note.write_text(f"Note {i}: a one-page note about review interval {i * 7} days.\n")
            notes.append(note)
        with temporal_server(work) as server:
            extra = {"SMALL_DOCUMENT_BYTES": 0} if args.no_priority else {}
            settings = bench_settings(work / "data", server.address, **extra)
            with worker_process(settings, work / "worker.log"):
                asyncio.run(measure(settings, bulk, notes, args.gap))


if __name__ == "__main__":
    main()
