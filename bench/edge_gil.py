"""How long each call of the embedded engine (qdrant-edge-py) keeps the rest of the process
waiting: the engine's own time beside the longest pause of a Python thread that only sleeps
1 ms at a time.

    .venv/bin/python -m bench.edge_gil                  # 50,000 points, unindexed
    .venv/bin/python -m bench.edge_gil --points 200000

A call that releases the interpreter lock pauses that thread ~1 ms whatever it takes; one that
holds it pauses it for the whole call. In the worker the event loop is such a thread: what it
waits for here, every task, heartbeat and HTTP request of the process waits for too. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from qdrant_edge import CountRequest, EdgeShard, Point, Query, QueryRequest, UpdateOperation

from knowledgeops.index.edge_mapping import BuildSettings, Kind, new_shard, shard_config

DIMENSION = 512
BATCH = 256  # the upsert step's batch


class Ticker:
    """A thread that sleeps 1 ms at a time and records the longest gap between its wakes."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> Ticker:
        self._thread.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def measure(self, label: str, call: Callable[[], object]) -> None:
        time.sleep(0.05)
        self.longest = 0.0
        started = time.perf_counter()
        call()
        took = time.perf_counter() - started
        time.sleep(0.05)  # the ticker's wake after the call
        print(
            f"{label:<44} {took * 1000:8.1f} ms; a sleeping thread waited up to "
            f"{self.longest * 1000:8.1f} ms",
            flush=True,
        )


def _points(start: int, n: int, rng: random.Random) -> list[Point]:
    text = " ".join(
        rng.choice(["spaced", "review", "memory", "chapter", "note"]) for _ in range(400)
    )
    return [
        Point(
            start + i,
            {"": [rng.random() for _ in range(DIMENSION)]},
            {"document_id": f"doc{(start + i) // 1000}", "text": text},
        )
        for i in range(n)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--points", type=int, default=50_000)
    args = ap.parse_args()
    rng = random.Random(3)
    with tempfile.TemporaryDirectory(prefix="ko-edge-gil-") as tmp:
        config = shard_config(Kind.CHUNKS, DIMENSION, BuildSettings())
        folder = Path(tmp) / "shard"
        shard = new_shard(folder, Kind.CHUNKS, config)
        t = time.perf_counter()
        for start in range(0, args.points, BATCH):
            shard.update(UpdateOperation.upsert_points(_points(start, BATCH, rng)))
        print(f"{args.points:,} points written in {time.perf_counter() - t:.1f} s", flush=True)
        vector = [rng.random() for _ in range(DIMENSION)]
        nearest = QueryRequest(query=Query.Nearest(vector, using=""), limit=10)
        more = _points(10**8, BATCH, rng)
        with Ticker() as ticker:
            ticker.measure("a sleep (the ticker's own gap)", lambda: time.sleep(0.2))
            ticker.measure(
                "upsert of one batch (256 points)",
                lambda: shard.update(UpdateOperation.upsert_points(more)),
            )
            ticker.measure("dense search, points unindexed", lambda: shard.query(nearest))
            ticker.measure("exact count", lambda: shard.count(CountRequest(exact=True)))
            ticker.measure("flush", shard.flush)
            ticker.measure("build (optimize)", shard.optimize)
            ticker.measure("dense search, indexed", lambda: shard.query(nearest))
            # What a build's swap does in the worker: the old shard closed, the built one loaded.
            ticker.measure("close", shard.close)
            loaded: list[EdgeShard] = []
            ticker.measure("load", lambda: loaded.append(EdgeShard.load(str(folder))))
        loaded[0].close()


if __name__ == "__main__":
    main()
