"""Small-document throughput: N one-chunk notes uploaded through the HTTP API of a
`knowledgeops dev` process, with an embedding server that answers at once.

    .venv/bin/python -m bench.small_docs [--docs 2000] [--clients 8] [--s3]

The fake OpenAI-compatible server of the tests (tests/helpers/fake_openai.py) is the embedder, so
the figure is the pipeline's own cost: upload, Temporal, parse and chunk (parser processes),
embed, upsert, publish, events. Prints uploads/s accepted, documents/s end to end (first
upload sent to last import completed, as Temporal records it), the completion rate between
10 % and 90 % of the documents, and failures. With --s3, the files are kept in S3-compatible
storage (STORAGE_URL: `rclone serve s3` on loopback, as in the tests). Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx

from bench.common import bench_settings, running_process
from knowledgeops.config.settings import Settings
from knowledgeops.runtime.temporal import connect
from starter.dev_server import free_port, port_in_use
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.s3_server import rclone_s3

# How often the bench asks Temporal how many imports have ended (a cheap count query).
POLL_SECONDS = 1.0
# A note this short is one chunk at any CHUNK_TOKENS the settings allow.
_NOTE = "Note {i}: review the card about interval {i} days; recall beats rereading for memory.\n"
_QUERY = 'TaskType = "DOCUMENT_IMPORT"'


async def upload_all(base: str, docs: int, clients: int) -> tuple[list[str], Counter[str], float]:
    """POST every note; returns (task ids, failures by kind, upload seconds)."""
    pending = iter(range(docs))
    task_ids: list[str] = []
    failures: Counter[str] = Counter()
    headers = {"X-Requested-With": "bench-small-docs"}
    limits = httpx.Limits(max_connections=clients)

    async def client(http: httpx.AsyncClient) -> None:
        for i in pending:
            files = {"file": (f"note-{i:05d}.txt", _NOTE.format(i=i).encode())}
            for _ in range(20):
                r = await http.post("/v1/documents", files=files, headers=headers)
                if r.status_code not in (429, 503):
                    break
                # Backpressure: wait as asked, then send it again.
                await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
            if r.status_code == 202:
                task_ids.append(str(r.json()["task_id"]))
            else:
                failures[f"upload HTTP {r.status_code}"] += 1

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return task_ids, failures, time.perf_counter() - started


async def measure(settings: Settings, docs: int, clients: int) -> None:
    temporal = await connect(settings)
    base = settings.resolved_api_url
    first_sent = datetime.now().astimezone()
    task_ids, failures, upload_s = await upload_all(base, docs, clients)
    accepted = len(task_ids)
    print(f"uploads: {accepted}/{docs} accepted in {upload_s:.1f} s = {accepted / upload_s:.1f}/s")
    # Wait until every accepted import has ended (any way), counting as Temporal sees them.
    ended, last_report = 0, time.monotonic()
    while ended < accepted:
        await asyncio.sleep(POLL_SECONDS)
        ended = (await temporal.count_workflows(f'{_QUERY} AND ExecutionStatus != "Running"')).count
        if time.monotonic() - last_report > 15:
            print(f"  {ended}/{accepted} imports ended", flush=True)
            last_report = time.monotonic()
    closes: list[datetime] = []
    statuses: Counter[str] = Counter()
    async for wf in temporal.list_workflows(_QUERY):
        statuses[wf.status.name if wf.status else "UNKNOWN"] += 1
        if wf.close_time is not None:
            closes.append(wf.close_time)
    closes.sort()
    for status, n in statuses.items():
        if status != "COMPLETED":
            failures[f"import {status.lower()}"] += n
    total_s = (closes[-1] - first_sent).total_seconds()
    done = statuses["COMPLETED"]
    rate = done / total_s
    print(f"documents: {done} completed; {rate:.1f} documents/s end to end ({total_s:.1f} s)")
    lo, hi = closes[len(closes) // 10], closes[len(closes) * 9 // 10]
    if hi > lo:
        steady = (len(closes) * 9 // 10 - len(closes) // 10) / (hi - lo).total_seconds()
        print(f"  steady state (10 %..90 % of completions): {steady:.1f} documents/s")
    print(f"failures: {sum(failures.values())} {dict(failures) if failures else ''}".rstrip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=8, help="concurrent uploads")
    ap.add_argument("--keep-log", type=Path, help="copy the dev process's log here")
    ap.add_argument("--s3", action="store_true", help="STORAGE_URL on rclone serve s3")
    args = ap.parse_args()
    fake = FakeOpenAI().start()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="ko-bench-small-") as tmp,
            contextlib.ExitStack() as stack,
        ):
            storage: dict[str, object] = {}
            if args.s3:
                s3 = stack.enter_context(rclone_s3(Path(tmp) / "s3"))
                storage = {"STORAGE_URL": s3.url, **s3.env()}
            port = free_port()
            while port + 1000 > 65535 or port_in_use("127.0.0.1", port + 1000):
                port = free_port()  # the dev server's Web UI takes port + 1000
            settings = bench_settings(
                Path(tmp) / "data",
                f"127.0.0.1:{port}",
                **fake.embedding_settings(),
                **storage,
            )
            log = Path(tmp) / "dev.log"
            dev = [sys.executable, "-m", "starter.cli.main", "dev"]
            try:
                with running_process(dev, settings, log, "knowledgeops is running", timeout=90):
                    asyncio.run(measure(settings, args.docs, args.clients))
                print(f"embedding: {len(fake.inputs)} inputs in {fake.requests} requests")
            finally:
                if args.keep_log:
                    shutil.copy(log, args.keep_log)
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
