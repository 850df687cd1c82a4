"""The application database on its own: migrations, event dedupe and order, audit filters.
Runs on SQLite, and on PostgreSQL when KNOWLEDGEOPS_TEST_POSTGRES_URL is set (CI does)."""

from __future__ import annotations

import asyncio

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.events import EventType
from knowledgeops.db.audit import AuditLog
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from tests.helpers.task_events import event


async def test_events_are_stored_once_per_id_in_order(settings: Settings) -> None:
    db = await Database.open(settings)
    try:
        kinds = [EventType.TASK_ENQUEUED, EventType.TASK_STARTED, EventType.TASK_COMPLETED]

        # 20 tasks record concurrently; every batch is also re-sent (an activity retry).
        async def one(i: int) -> None:
            for k in kinds:
                batch = [event(f"t{i}", k)]
                await EventStore(db).record(batch)
                assert await EventStore(db).record(batch) == 0

        await asyncio.gather(*(one(i) for i in range(20)))
        stored = await EventStore(db).after(0, limit=1000)
        assert len(stored) == 60 == len({e.event_id for e in stored})
        # Read in pages from a cursor, as consumers do: every event once, in the same order.
        paged: list[str] = []
        cursor = 0
        while page := await EventStore(db).after(cursor, limit=7):
            paged += [e.event_id for e in page]
            cursor = page[-1].seq
        assert paged == [e.event_id for e in stored]
        for i in range(20):
            assert [e.event_type for e in stored if e.task_id == f"t{i}"] == kinds
        tail = await EventStore(db).after(stored[29].seq, limit=1000)
        assert [e.event_id for e in tail] == [e.event_id for e in stored[30:]]
        assert all(e.at.tzinfo is not None for e in stored)
    finally:
        await db.close()


async def test_migrations_are_idempotent_and_audit_filters(settings: Settings) -> None:
    db = await Database.open(settings)
    await db.close()
    db = await Database.open(settings)  # second start: already at head
    try:
        await AuditLog(db).record(
            actor="alice", action="retry", task_ids=["a"], reason="r1", outcome="ok"
        )
        await AuditLog(db).record(
            actor="bob", action="cancel", task_ids=["a", "b"], reason="r2", outcome="ok"
        )
        await AuditLog(db).record(
            actor="alice", action="cancel", task_ids=["c"], reason="r3", outcome="ok"
        )
        assert [r.reason for r in await AuditLog(db).records()] == ["r3", "r2", "r1"]
        assert [r.reason for r in await AuditLog(db).records(actor="alice")] == ["r3", "r1"]
        assert [r.reason for r in await AuditLog(db).records(task_id="a")] == ["r2", "r1"]
        assert [r.reason for r in await AuditLog(db).records(action="cancel", limit=1)] == ["r3"]
        newest = (await AuditLog(db).records())[0]
        assert [r.reason for r in await AuditLog(db).records(before_id=newest.id)] == ["r2", "r1"]
    finally:
        await db.close()
