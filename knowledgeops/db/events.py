"""Domain events: stored once per event id, read in `seq` order, projected into read models.

Which projection a task type's events feed is declared in the registry (`projection`), so a
new type adds its read model without editing this module. Every type's events also feed the
admin task list (knowledgeops/db/task_list.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import JSON, DateTime, Integer, String, Text, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from knowledgeops.contracts.events import EventType, StoredEvent, TaskEvent
from knowledgeops.db.sql import Base, aware, lock_event_writers
from knowledgeops.db.task_list import TaskList
from knowledgeops.registry.task_types import REGISTRY, load

if TYPE_CHECKING:
    from knowledgeops.db.database import Database


class EventRow(Base):
    __tablename__ = "task_events"
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(400), unique=True)
    event_type: Mapped[str] = mapped_column(String(40))
    task_id: Mapped[str] = mapped_column(String(300), index=True)
    run_id: Mapped[str] = mapped_column(String(100))
    task_type: Mapped[str] = mapped_column(String(60))
    attempt: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class Projection(Protocol):
    """A read model fed by one task type's events, inside the transaction that stores them."""

    async def project(self, s: AsyncSession, ev: TaskEvent) -> None: ...


class EventStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._task_list = TaskList(db)
        self._projections: dict[str, Projection] = {
            spec.task_type.value: load(spec.projection)(db)
            for spec in REGISTRY.values()
            if spec.projection
        }

    async def record(
        self, events: Sequence[TaskEvent], on_new: Callable[[TaskEvent], None] | None = None
    ) -> int:
        """Store events once per event id (a retried activity re-sends them); returns how
        many were new. Each new event is projected in the same transaction (its type's
        projection, and the task list), and handed to `on_new` once it is committed."""
        new: list[TaskEvent] = []
        async with self.db.write() as s:
            # Serialise writers so seq order equals commit order: a reader that has seen seq N
            # can never later find an event with a smaller seq appear.
            await lock_event_writers(s)
            for ev in events:
                # On the table, not the ORM class: SQLAlchemy's ORM insert path was ~4 % of the
                # worker's CPU at 20 small imports/s (profiled), for nothing an ORM adds here.
                stmt = (
                    self.db.insert(EventRow.__table__)
                    .values(
                        event_id=ev.event_id,
                        event_type=ev.event_type.value,
                        task_id=ev.task_id,
                        run_id=ev.run_id,
                        task_type=ev.task_type,
                        attempt=ev.attempt,
                        at=ev.at,
                        error=ev.error,
                        data=ev.data,
                    )
                    .on_conflict_do_nothing(index_elements=["event_id"])
                )
                result: Any = await s.execute(stmt)
                if result.rowcount:
                    new.append(ev)
                    projection = self._projections.get(ev.task_type)
                    if projection is not None:
                        await projection.project(s, ev)
            await self._task_list.project(s, new)
        if on_new is not None:
            for ev in new:
                on_new(ev)
        return len(new)

    async def began_here(self, runs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Of (task id, run id) pairs, the runs that recorded their own first event as a new
        task or one of our retries: so they are no operator's reset (a reset run records
        TaskRetried via "reset", or replays its base run's first events)."""
        firsts = {
            f"{task}/{run}/{kind.value}": (task, run)
            for task, run in runs
            for kind in (EventType.TASK_ENQUEUED, EventType.TASK_RETRIED)
        }
        found: set[tuple[str, str]] = set()
        ids = sorted(firsts)
        async with self.db.sessions() as s:
            for start in range(0, len(ids), 500):  # bounded IN lists
                q = select(EventRow.event_id, EventRow.data).where(
                    EventRow.event_id.in_(ids[start : start + 500])
                )
                for event_id, data in (await s.execute(q)).all():
                    if (data or {}).get("via") != "reset":
                        found.add(firsts[event_id])
        return found

    async def after(
        self, after: int = 0, limit: int = 100, task_id: str | None = None
    ) -> list[StoredEvent]:
        q = select(EventRow).where(EventRow.seq > after).order_by(EventRow.seq).limit(limit)
        if task_id:
            q = q.where(EventRow.task_id == task_id)
        async with self.db.sessions() as s:
            rows = (await s.execute(q)).scalars().all()
        return [
            StoredEvent(
                seq=r.seq,
                event_id=r.event_id,
                event_type=EventType(r.event_type),
                task_id=r.task_id,
                run_id=r.run_id,
                task_type=r.task_type,
                attempt=r.attempt,
                at=aware(r.at),
                error=r.error,
                data=r.data or {},
            )
            for r in rows
        ]

    async def older_than(self, before: datetime) -> tuple[int, int | None]:
        """How many events are dated before `before`, and the highest seq among them."""
        return await self.db.rows_before(EventRow.at, EventRow.seq, before)

    async def delete_older_than(self, before: datetime, up_to_seq: int, limit: int = 5000) -> int:
        """Delete up to `limit` events dated before `before` with seq <= `up_to_seq`."""
        return await self.db.delete_rows_before(EventRow.at, EventRow.seq, before, up_to_seq, limit)
