"""Upload latency under load: 50 clients POST 1 MB files to /v1/documents while the worker of
the same `knowledgeops dev` process imports in the background; then the enqueue rate of small
tasks through TaskQueueService.

    .venv/bin/python -m bench.api_upload [--clients 50] [--uploads 200]

Prints p50 / p99 / max latency of the 202 and uploads/s. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import ROOT, paragraph
from knowledgeops.settings import Settings
from knowledgeops.temporal import connect
from starter.dev_server import free_port, port_in_use
from starter.service import TaskQueueService


def one_mb_file(i: int) -> bytes:
    rng = random.Random(i)
    text = f"Upload {i}.\n\n"
    while len(text) < 1024 * 1024:
        text += paragraph(rng) + "\n\n"
    return text[: 1024 * 1024].encode()


async def upload_load(base: str, clients: int, uploads: int) -> list[float]:
    bodies = [one_mb_file(i) for i in range(uploads)]
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(uploads):
        queue.put_nowait(i)

    async def client() -> None:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                t = time.perf_counter()
                r = await http.post("/v1/documents", files={"file": (f"u{i}.txt", bodies[i])})
                latencies.append(time.perf_counter() - t)
                if r.status_code != 202:
                    raise RuntimeError(f"upload {i}: {r.status_code} {r.text}")

    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies


async def enqueue_rate(settings: Settings, n: int, concurrency: int = 20) -> float:
    """Start n small imports on a queue nobody polls: measures the enqueue path only."""
    quiet = settings.model_copy(update={"prefix": "bench-enqueue-"})
    service = TaskQueueService(await connect(quiet), quiet)
    file_id = "0" * 64 + ".txt"
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await service.import_stored(file_id, filename="x.txt", document_id=f"enq-{i}")

    t = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--uploads", type=int, default=200)
    ap.add_argument("--enqueue", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ko-bench-api-") as tmp:
        port = free_port()
        while port + 1000 > 65535 or port_in_use("127.0.0.1", port + 1000):
            port = free_port()
        api_port = free_port()
        env = dict(os.environ)
        env.update(
            KNOWLEDGEOPS_DATA_DIR=str(Path(tmp) / "data"),
            TEMPORAL_ADDRESS=f"127.0.0.1:{port}",
            API_PORT=str(api_port),
            PYTHONUNBUFFERED="1",
        )
        log = Path(tmp) / "dev.log"
        with log.open("w") as out:
            dev = subprocess.Popen(
                [sys.executable, "-m", "starter.cli", "dev"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 90
            while "knowledgeops is running" not in log.read_text():
                if dev.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(log.read_text()[-3000:])
                time.sleep(0.2)
            base = f"http://127.0.0.1:{api_port}"
            settings = Settings(
                KNOWLEDGEOPS_DATA_DIR=Path(tmp) / "data", TEMPORAL_ADDRESS=f"127.0.0.1:{port}"
            )
            rate = asyncio.run(enqueue_rate(settings, args.enqueue))
            print(f"TaskQueueService enqueue: {rate:.0f} tasks/s ({args.enqueue} small tasks)")
            t = time.perf_counter()
            lat = asyncio.run(upload_load(base, args.clients, args.uploads))
            elapsed = time.perf_counter() - t
            lat_ms = sorted(x * 1000 for x in lat)
            p = statistics.quantiles(lat_ms, n=100)
            print(f"uploads: {len(lat)} x 1 MB, {args.clients} clients, worker importing meanwhile")
            print(f"202 latency p50 {p[49]:.0f} ms, p99 {p[98]:.0f} ms, max {lat_ms[-1]:.0f} ms")
            print(f"throughput: {len(lat) / elapsed:.1f} uploads/s ({len(lat) / elapsed:.1f} MB/s)")
        finally:
            dev.terminate()
            dev.wait(60)


if __name__ == "__main__":
    main()
