"""Upload latency under load: 50 clients POST 1 MB files to /v1/documents of a `knowledgeops
dev` process while its worker imports (a large background document, plus every upload's own
import); first, the enqueue rate of small tasks through TaskQueueService.

    .venv/bin/python -m bench.api_upload [--clients 50] [--uploads 200] [--rates 10,20,30]

Closed loop (capacity) and open loop at fixed rates (latency at a given load), see
bench/http_load.py. Prints p50 / p90 / p99 / max latency of the `202` and uploads/s.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import bench_settings, paragraph, running_process, write_big_text
from bench.http_load import multipart_request, run_load
from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database
from knowledgeops.runtime.temporal import connect
from starter.dev_server import free_port, port_in_use
from starter.services.documents import DocumentService
from starter.services.tasks import TaskQueueService


def one_mb_file(i: int) -> bytes:
    rng = random.Random(i)
    parts, size = [f"Upload {i}.\n\n"], 0
    while size < 1024 * 1024:
        parts.append(paragraph(rng) + "\n\n")
        size += len(parts[-1])
    return "".join(parts)[: 1024 * 1024].encode()


async def enqueue_rate(settings: Settings, n: int, concurrency: int = 20) -> float:
    """Start n small imports on a queue nobody polls: measures the enqueue path only."""
    quiet = settings.model_copy(update={"prefix": "bench-enqueue-"})
    db = await Database.open(quiet)
    documents = DocumentService(TaskQueueService(await connect(quiet), quiet), db, quiet)
    file_id = "0" * 64 + ".txt"
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await documents.import_stored(file_id, filename="x.txt", document_id=f"enq-{i}")

    t = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    rate = n / (time.perf_counter() - t)
    await db.close()
    return rate


def _task_line(base: str, task_id: str) -> str:
    task = httpx.get(f"{base}/v1/tasks/{task_id}", timeout=30).json()
    progress = task["progress"]
    return f"{task['status']}, stage {progress['stage']}, {progress['done']}/{progress['total']}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--uploads", type=int, default=200, help="closed-loop uploads")
    ap.add_argument("--rates", default="5,10,15", help="open-loop rates, uploads/s")
    ap.add_argument("--seconds", type=float, default=20, help="duration of each open-loop run")
    ap.add_argument("--background-mb", type=int, default=8, help="import running throughout")
    ap.add_argument("--enqueue", type=int, default=500)
    ap.add_argument("--keep-log", type=Path, help="copy the dev process's log here")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]
    with tempfile.TemporaryDirectory(prefix="ko-bench-api-") as tmp:
        port = free_port()
        while port + 1000 > 65535 or port_in_use("127.0.0.1", port + 1000):
            port = free_port()  # the dev server's Web UI takes port + 1000
        settings = bench_settings(Path(tmp) / "data", f"127.0.0.1:{port}")
        api_port = settings.api_port
        host = f"127.0.0.1:{api_port}"
        # Built before the system starts: the client must cost as little CPU as possible.
        seed = iter(range(1, 10**6))
        closed = [
            multipart_request(host, "/v1/documents", f"c{i}.txt", one_mb_file(next(seed)))
            for i in range(args.uploads)
        ]
        opened = [
            [
                multipart_request(host, "/v1/documents", f"o{i}.txt", one_mb_file(next(seed)))
                for i in range(int(rate * args.seconds))
            ]
            for rate in rates
        ]
        big = write_big_text(Path(tmp) / "background.txt", args.background_mb)
        log = Path(tmp) / "dev.log"
        dev = [sys.executable, "-m", "starter.cli.main", "dev"]
        try:
            with running_process(dev, settings, log, "knowledgeops is running", timeout=90):
                base = f"http://{host}"
                rate = asyncio.run(enqueue_rate(settings, args.enqueue))
                print(f"TaskQueueService enqueue: {rate:.0f} tasks/s ({args.enqueue} small tasks)")
                with big.open("rb") as f:
                    r = httpx.post(
                        f"{base}/v1/documents", files={"file": (big.name, f)}, timeout=120
                    )
                background = r.json()["task_id"]
                time.sleep(5)  # let its import get going: the uploads below compete with it
                print(
                    f"background import ({args.background_mb} MB): {_task_line(base, background)}"
                )
                print(f"{args.clients} clients, 1 MB uploads; every upload starts an import too")
                # Open loop first, lowest rate first: each run starts from the steady state of
                # the one before; the closed loop (saturation) last, as it leaves a backlog.
                for rate, requests in zip(rates, opened, strict=True):
                    res = asyncio.run(run_load("127.0.0.1", api_port, requests, args.clients, rate))
                    print(f"  open loop {rate:.0f}/s, {len(requests)} uploads: {res.summary()}")
                res = asyncio.run(run_load("127.0.0.1", api_port, closed, args.clients))
                print(f"  closed loop, {len(closed)} uploads: {res.summary()}", flush=True)
                print(f"background import now: {_task_line(base, background)}")
        finally:
            if args.keep_log:
                shutil.copy(log, args.keep_log)


if __name__ == "__main__":
    main()
