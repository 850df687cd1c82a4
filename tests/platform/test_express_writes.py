"""Express tasks' writes go first (knowledgeops/runtime/express.py): every activity of a task
started at EXPRESS_PRIORITY, local or not, runs marked express, and a marked writer takes the
database's next turn ahead of writers already waiting."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.common import Priority
from temporalio.worker import Worker

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.events import EventType
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from knowledgeops.db.write_turns import EXPRESS
from knowledgeops.registry.spec import EXPRESS_PRIORITY
from knowledgeops.runtime.express import ExpressInterceptor
from knowledgeops.runtime.temporal import connect
from tests.helpers.express_probe import ReportsExpress, marked_express
from tests.helpers.task_events import event


async def test_an_express_tasks_local_and_queued_activities_run_express(
    settings: Settings,
) -> None:
    client = await connect(settings)
    queue = f"{settings.prefix}express-test"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[ReportsExpress],
        activities=[marked_express],
        interceptors=[ExpressInterceptor()],
    ):

        async def run(priority: Priority) -> list[bool]:
            return await client.execute_workflow(
                ReportsExpress.run,
                id=f"{settings.prefix}express-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
                priority=priority,
            )

        assert await run(Priority(priority_key=EXPRESS_PRIORITY)) == [True, True]
        assert await run(Priority(priority_key=EXPRESS_PRIORITY + 1)) == [False, False]
        assert await run(Priority.default) == [False, False]


async def test_an_express_writer_takes_the_next_turn(settings: Settings) -> None:
    db = await Database.open(settings)
    try:
        if not db.sqlite:
            pytest.skip("PostgreSQL orders its writers itself; the turns are SQLite's")
        store = EventStore(db)
        release = asyncio.Event()

        async def holder() -> None:
            async with db.write():
                await release.wait()

        async def record(task: str, express: bool) -> None:
            EXPRESS.set(express)  # this task's own context, as an activity's
            await store.record([event(task, EventType.TASK_STARTED)])

        holding = asyncio.create_task(holder())
        await asyncio.sleep(0.05)
        # Three bulk writers wait in line, then a one-page note's writer arrives.
        waiting = [asyncio.create_task(record(f"bulk{i}", False)) for i in range(3)]
        await asyncio.sleep(0.05)
        waiting.append(asyncio.create_task(record("note", True)))
        # A writer that gives up while waiting leaves the line without holding it up.
        gave_up = asyncio.create_task(record("gave-up", False))
        await asyncio.sleep(0.05)
        gave_up.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gave_up
        release.set()
        await asyncio.gather(holding, *waiting)
        order = [e.task_id for e in await store.after(0, limit=10)]
        assert order == ["note", "bulk0", "bulk1", "bulk2"], order
    finally:
        await db.close()
