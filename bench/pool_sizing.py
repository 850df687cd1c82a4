"""How many workers of each pool a given import rate needs, measured: the parse pool and the
ingest pool run as two worker processes (as the compose stack runs them), documents are
imported through Temporal, and each workflow's history says when each pool was at work.

    .venv/bin/python -m bench.pool_sizing                 # instant embedding server
    .venv/bin/python -m bench.pool_sizing --local         # the local embedding model
    .venv/bin/python -m bench.pool_sizing --docs 16 --paragraphs 1500

A pool's capacity is the chunks it handled per second of wall time during which it had at
least one activity running (its busy time), so a pool that waited for the other is not
charged for the wait. Both processes share this machine's cores, so each figure is a lower
bound for a worker with a host of its own. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.common import ROOT, bench_settings, running_process, temporal_server, write_corpus
from bench.ingest import import_and_wait
from knowledgeops.config.settings import Settings
from knowledgeops.registry.task_types import POOLS
from knowledgeops.runtime.temporal import connect

RATES = (100, 500, 1000, 2000)  # chunks/s a deployment might need


@dataclass
class PoolWork:
    intervals: list[tuple[float, float]]
    activities: int = 0

    def busy(self) -> float:
        """Seconds during which at least one of the intervals was running."""
        total, end = 0.0, -math.inf
        for a, b in sorted(self.intervals):
            if b > end:
                total += b - max(a, end)
                end = b
        return total


async def pool_work(client: Client, task_ids: list[str]) -> dict[str, PoolWork]:
    """Per pool, the started→completed interval of every queued activity of the imports."""
    queue_pool = {q.value: pool.value for pool, spec in POOLS.items() for q in spec.queues}
    work: dict[str, PoolWork] = defaultdict(lambda: PoolWork([]))
    for task_id in task_ids:
        history = await client.get_workflow_handle(task_id).fetch_history()
        queue_of: dict[int, str] = {}
        started: dict[int, float] = {}
        for ev in history.events:
            at = ev.event_time.ToDatetime().timestamp()
            if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                queue = ev.activity_task_scheduled_event_attributes.task_queue.name
                queue_of[ev.event_id] = queue_pool.get(queue, queue)
            elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started[ev.activity_task_started_event_attributes.scheduled_event_id] = at
            elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                sched = ev.activity_task_completed_event_attributes.scheduled_event_id
                pool = work[queue_of[sched]]
                pool.intervals.append((started[sched], at))
                pool.activities += 1
    return work


@contextmanager
def pool_workers(settings: Settings, work: Path) -> Iterator[None]:
    """One worker process per import pool, as the compose stack runs them (no API)."""
    with ExitStack() as stack:
        for pool in ("ingest", "parse"):
            argv = [str(ROOT / ".venv/bin/python"), str(ROOT / "worker.py"), "--no-api"]
            stack.enter_context(
                running_process(
                    [*argv, "--pool", pool], settings, work / f"{pool}.log", "worker ready"
                )
            )
        yield


async def measure(settings: Settings, files: list[Path]) -> None:
    elapsed, statuses = await import_and_wait(settings, files)
    failed = [f"{s.task_id}: {s.last_error}" for s in statuses if s.status != "completed"]
    if failed:
        raise SystemExit(f"imports failed: {failed}")
    chunks = sum((s.result or {}).get("total_chunks", 0) for s in statuses)
    work = await pool_work(await connect(settings), [s.task_id for s in statuses])
    print(
        f"{len(files)} documents, {chunks} chunks through Temporal: {elapsed:.1f} s, "
        f"{chunks / elapsed:.0f} chunks/s end to end"
    )
    print("\n| pool | activities | busy s | chunks/s while busy (one worker) | "
          + " | ".join(f"workers for {r}/s" for r in RATES) + " |")  # fmt: skip
    print("|---|---|---|---|" + "---|" * len(RATES))
    for name, pw in sorted(work.items()):
        rate = chunks / pw.busy() if pw.busy() else math.inf
        need = " | ".join(str(math.ceil(r / rate)) for r in RATES)
        print(f"| {name} | {pw.activities} | {pw.busy():.1f} | {rate:.0f} | {need} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--docs", type=int, default=16)
    ap.add_argument("--paragraphs", type=int, default=1500, help="per document (~750 chunks)")
    ap.add_argument("--local", action="store_true", help="the local embedding model")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ko-sizing-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        files = write_corpus(work / "corpus", args.docs, args.paragraphs)
        extra: dict[str, Any] = {}
        if not args.local:
            from tests.helpers.fake_openai import FakeOpenAI

            fake = FakeOpenAI(dim=512).start()
            stack.callback(fake.stop)
            extra = fake.embedding_settings()
        server = stack.enter_context(temporal_server(work))
        settings = bench_settings(work / "data", server.address, **extra)
        print("embedder:", "local model" if args.local else "instant OpenAI-compatible server")
        with pool_workers(settings, work):
            asyncio.run(measure(settings, files))


if __name__ == "__main__":
    main()
