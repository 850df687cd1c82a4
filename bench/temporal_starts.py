"""How many workflow starts per second the Temporal dev server takes, and at what latency, with
nothing else running: the ceiling under every enqueue and upload figure.

    .venv/bin/python -m bench.temporal_starts [--starts 600] [--in-memory]

Starts go to a task queue nobody polls, so only the start itself is measured. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.client import Client

from starter.dev_server import local_dev_server


async def starts(address: str, n: int, in_flight: int) -> str:
    client = await Client.connect(address)
    gate = asyncio.Semaphore(in_flight)
    latencies: list[float] = []

    async def one() -> None:
        async with gate:
            t = time.perf_counter()
            await client.start_workflow(
                "Unpolled", id=f"start-{uuid.uuid4().hex}", task_queue="nobody-polls"
            )
            latencies.append((time.perf_counter() - t) * 1000)

    t = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    rate = n / (time.perf_counter() - t)
    q = statistics.quantiles(latencies, n=100)
    return f"{in_flight:>3} in flight: {rate:5.0f} starts/s, p50 {q[49]:.0f} ms, p99 {q[98]:.0f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=600)
    ap.add_argument("--in-memory", action="store_true", help="no SQLite file (not what dev runs)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ko-bench-starts-") as tmp:
        db = None if args.in_memory else Path(tmp) / "temporal.db"
        with local_dev_server(Path(tmp), db_file=db) as server:
            for in_flight in (1, 10, 50, 100):
                print(asyncio.run(starts(server.address, args.starts, in_flight)), flush=True)


if __name__ == "__main__":
    main()
