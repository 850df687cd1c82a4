"""How fast the admin task list (GET /v1/admin/tasks) pages at 100,000 tasks, served from the
projection of the domain events (knowledgeops/db/task_list.py).

    .venv/bin/python -m bench.admin_tasks [--tasks 100000] [--repeat 200]
        [--database-url postgresql+asyncpg://user@host:port/empty_db] [--plans]

A temporary SQLite app database (and, with --database-url, that PostgreSQL database too: give
an empty, disposable one) is migrated to head and filled the way workers fill it: synthetic
domain events (TaskEnqueued, TaskStarted, a closing; some tasks retried, some still running)
recorded through EventStore.record in batches, which stores them and feeds the projection in
the same transaction; a few tasks only listed as pending, as the service does at enqueue.

Then, page size 50, each query `--repeat` times, p50 / p95 in ms: the first page, a deep page
(by cursor), filtered pages (type, status, both, a time range), and a walk of every page with
the cursors (which must meet every task once). Each timing is what the API does for a page
without HTTP: the indexed query, rows to `TaskSummary`, the page to JSON. A pending / running
filter also asks Temporal about open tasks; only its database part is timed here. For
comparison, the deep page once more by OFFSET instead of the keyset cursor.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import select, text

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.events import EventType, TaskEvent
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from knowledgeops.db.task_list import TABLE, ListKey, TaskList, key_of
from knowledgeops.registry.task_types import TaskType
from starter.services.task_listing import summary_of
from starter.services.task_queries import TaskPage

PAGE = 50
BATCH = 600  # events per EventStore.record call
START = datetime(2026, 1, 1, tzinfo=UTC)
SPAN = timedelta(days=30)
# Most tasks are imports; the rarest type is ~1 % of them.
TYPES = [
    (TaskType.DOCUMENT_IMPORT, 70),
    (TaskType.EMBEDDING_GENERATE, 8),
    (TaskType.AI_ANALYSIS, 8),
    (TaskType.GENERATE_ARTIFACT, 5),
    (TaskType.GENERATE_REVIEW_CARD, 5),
    (TaskType.OCR_PROCESS, 3),
    (TaskType.REPORT_GENERATE, 1),
]
CLOSINGS = [
    (EventType.TASK_COMPLETED, 78),
    (EventType.TASK_FAILED, 10),
    (EventType.TASK_CANCELLED, 4),
    (None, 8),  # still running
]
PENDING_SHARE = 0.02  # listed by the service, no event yet
RETRIED_SHARE = 0.05  # failed once, then a manual retry


def _event(
    task: str, run: str, kind: EventType, task_type: TaskType, at: datetime, **data: Any
) -> TaskEvent:
    return TaskEvent(
        event_type=kind,
        task_id=task,
        run_id=run,
        task_type=task_type.value,
        at=at,
        data=data,
    )


def task_events(rng: random.Random, i: int, n: int) -> list[TaskEvent]:
    """One task's events, its start spread evenly over SPAN (with jitter)."""
    task_type = rng.choices([t for t, _ in TYPES], [w for _, w in TYPES])[0]
    task = task_type.task_name(f"{rng.getrandbits(64):016x}")
    start = START + SPAN * (i / n) + timedelta(milliseconds=rng.randrange(1000))
    data = {"document_id": f"doc-{i:07d}", "owner": f"owner-{i % 40}"}
    events = [
        _event(task, "r1", EventType.TASK_ENQUEUED, task_type, start, **data),
        _event(task, "r1", EventType.TASK_STARTED, task_type, start + timedelta(seconds=1)),
    ]
    run, at = "r1", start + timedelta(seconds=1)
    if rng.random() < RETRIED_SHARE:
        events.append(
            _event(task, run, EventType.TASK_FAILED, task_type, at + timedelta(seconds=3))
        )
        run, at = "r2", at + timedelta(seconds=30)
        events.append(_event(task, run, EventType.TASK_RETRIED, task_type, at, retry_of="r1"))
        events.append(_event(task, run, EventType.TASK_STARTED, task_type, at))
    closing = rng.choices([c for c, _ in CLOSINGS], [w for _, w in CLOSINGS])[0]
    if closing is not None:
        seconds = rng.expovariate(1 / 20)
        events.append(_event(task, run, closing, task_type, at + timedelta(seconds=seconds)))
    return events


async def fill(db: Database, n: int, seed: int) -> None:
    rng = random.Random(seed)
    batch: list[TaskEvent] = []
    recorded = 0
    started = time.perf_counter()
    for i in range(n):
        if rng.random() < PENDING_SHARE:
            task_type = rng.choice([t for t, _ in TYPES])
            await TaskList(db).seed(
                task_id=task_type.task_name(f"{rng.getrandbits(64):016x}"),
                run_id="r1",
                task_type=task_type.value,
                owner="owner-0",
            )
            continue
        batch += task_events(rng, i, n)
        if len(batch) >= BATCH:
            recorded += await EventStore(db).record(batch)
            batch = []
    recorded += await EventStore(db).record(batch)
    elapsed = time.perf_counter() - started
    print(
        f"  filled: {n:,} tasks, {recorded:,} events through EventStore.record in "
        f"{elapsed:.0f} s ({recorded / elapsed:,.0f} events/s, batches of {BATCH})",
        flush=True,
    )


async def page_json(db: Database, after: ListKey | None = None, **query: Any) -> int:
    """What the API does for one page, without HTTP; returns the rows listed."""
    rows, more = await TaskList(db).page(after=after, limit=PAGE, **query)
    page = TaskPage(
        items=[summary_of(r) for r in rows],
        next_cursor=key_of(rows[-1]).encode() if more else None,
    )
    page.model_dump_json()
    return len(rows)


async def timed(label: str, call: Callable[[], Awaitable[int]], repeat: int) -> None:
    ms: list[float] = []
    listed = 0
    for _ in range(repeat):
        t = time.perf_counter()
        listed = await call()
        ms.append((time.perf_counter() - t) * 1000)
    q = statistics.quantiles(ms, n=100)
    print(f"  {label:<48} p50 {q[49]:7.2f} ms   p95 {q[94]:7.2f} ms   ({listed} rows)", flush=True)


async def walk(db: Database, expected: int) -> None:
    """Every page with the cursors: each task exactly once, in list order."""
    ms: list[float] = []
    seen: set[str] = set()
    last: tuple[datetime, str] | None = None
    after: ListKey | None = None
    while True:
        t = time.perf_counter()
        rows, more = await TaskList(db).page(after=after, limit=PAGE)
        TaskPage(items=[summary_of(r) for r in rows], next_cursor=None).model_dump_json()
        ms.append((time.perf_counter() - t) * 1000)
        for r in rows:
            key = (r.started_at, r.task_id)
            assert last is None or key < last, "out of order"
            assert r.task_id not in seen, f"{r.task_id} listed twice"
            seen.add(r.task_id)
            last = key
        if not more:
            break
        after = key_of(rows[-1])
    assert len(seen) == expected, f"walked {len(seen)} of {expected} tasks"
    q = statistics.quantiles(ms, n=100)
    print(
        f"  {'walk: every page by cursor (' + format(len(ms), ',') + ' pages)':<48} "
        f"p50 {q[49]:7.2f} ms   p95 {q[94]:7.2f} ms   (each of {expected:,} tasks once)",
        flush=True,
    )


async def key_at(db: Database, position: int) -> ListKey:
    """The cursor that starts the page at `position` (newest first)."""
    c = TABLE.c
    q = (
        select(c.started_at, c.task_id)
        .order_by(c.started_at.desc(), c.task_id.desc())
        .offset(position - 1)
        .limit(1)
    )
    async with db.sessions() as s:
        at, task_id = (await s.execute(q)).one()
    return ListKey(at, task_id)


async def offset_page(db: Database, position: int) -> int:
    c = TABLE.c
    q = (
        select(*[col for col in TABLE.columns if col.name != "runs"])
        .order_by(c.started_at.desc(), c.task_id.desc())
        .offset(position)
        .limit(PAGE + 1)
    )
    async with db.sessions() as s:
        return len((await s.execute(q)).all()[:PAGE])


async def plans(db: Database, queries: dict[str, dict[str, Any]], after: ListKey) -> None:
    """The database's plan for each query: an index in list order, no sort."""
    explain = "EXPLAIN QUERY PLAN " if db.engine.dialect.name == "sqlite" else "EXPLAIN "
    async with db.sessions() as s:
        for label, query in queries.items():
            q = (
                TaskList(db)
                .page_query(
                    query.get("task_type"),
                    (query.get("statuses") or [None])[0],
                    query.get("since"),
                    query.get("until"),
                    "",
                    after,
                )
                .limit(PAGE + 1)
            )
            # Compiled with named parameters, which text() binds in either dialect.
            compiled = q.compile()
            stmt = text(explain + str(compiled)).bindparams(**compiled.params)
            rows = (await s.execute(stmt)).all()
            print(f"    {label}: " + " | ".join(str(r[-1]) for r in rows))


async def run(url: str, data_dir: Path, tasks: int, repeat: int, show_plans: bool) -> None:
    settings = Settings(KNOWLEDGEOPS_DATA_DIR=data_dir, DATABASE_URL=url)
    db = await Database.open(settings)
    try:
        print(f"{db.engine.dialect.name}:", flush=True)
        await fill(db, tasks, seed=7)
        async with db.sessions() as s:
            total = (await s.execute(text("SELECT count(*) FROM task_list"))).scalar_one()
        deep = int(total * 0.9)
        deep_key = await key_at(db, deep)
        mid = START + SPAN / 2
        window = {"since": mid, "until": mid + timedelta(days=1)}
        rare = TaskType.REPORT_GENERATE.value
        queries: dict[str, dict[str, Any]] = {
            "no filter": {},
            "type (1 % of tasks)": {"task_type": rare},
            "status failed": {"statuses": ("failed",)},
            "type + status": {"task_type": TaskType.AI_ANALYSIS.value, "statuses": ("completed",)},
            "one day (since / until)": window,
            "open (pending + running; DB part)": {"statuses": ("pending", "running")},
        }
        print(f"  pages of {PAGE}, {repeat} times each; {total:,} tasks listed", flush=True)
        for label, query in queries.items():
            await timed(f"first page, {label}", partial(page_json, db, **query), repeat)
        await timed(
            f"deep page (task {deep:,}), no filter",
            lambda: page_json(db, after=deep_key),
            repeat,
        )
        rare_rows, _ = await TaskList(db).page(task_type=rare, limit=10**6)
        rare_key = key_of(rare_rows[int(len(rare_rows) * 0.9)])
        await timed(
            f"deep page ({int(len(rare_rows) * 0.9):,} of {len(rare_rows):,}), type (1 %)",
            lambda: page_json(db, after=rare_key, task_type=rare),
            repeat,
        )
        window_key = ListKey(mid + timedelta(hours=12), "")
        await timed(
            "one day, from its middle (cursor)",
            lambda: page_json(db, after=window_key, **window),
            repeat,
        )
        await walk(db, total)
        await timed(
            f"for comparison: deep page (task {deep:,}) by OFFSET",
            lambda: offset_page(db, deep),
            max(repeat // 10, 5),
        )
        if show_plans:
            print("  plans (deep cursor):")
            await plans(db, queries, deep_key)
    finally:
        await db.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument(
        "--database-url",
        default="",
        help="also a PostgreSQL database (empty and disposable: it is filled with tasks)",
    )
    ap.add_argument("--plans", action="store_true", help="print each query's plan")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ko-bench-admin-tasks-") as tmp:
        asyncio.run(run("", Path(tmp) / "sqlite", args.tasks, args.repeat, args.plans))
        if args.database_url:
            asyncio.run(
                run(args.database_url, Path(tmp) / "pg", args.tasks, args.repeat, args.plans)
            )


if __name__ == "__main__":
    main()
