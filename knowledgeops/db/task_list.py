"""The admin task list: one row per task id, projected from the domain events of every task
type (in the transaction that stores them), read newest first with keyset pages.

Temporal stays the source of truth for a task's detail. The list is here because Temporal's SQL
visibility store has no ORDER BY: a page meant scanning and sorting up to 5,000 executions.
How events make a row: knowledgeops/db/task_list_rules.py.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, DateTime, Index, Integer, String, Table, or_, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from knowledgeops.contracts.events import TaskEvent
from knowledgeops.db.sql import Base, lock_event_writers, now
from knowledgeops.db.task_list_rules import (
    DOCUMENT_ID_CHARS,
    OPEN_STATUSES,
    OWNER_CHARS,
    RunState,
    TaskListEntry,
    TaskState,
    apply_event,
    apply_seed,
    utc,
)

if TYPE_CHECKING:
    from knowledgeops.db.database import Database

__all__ = ["OPEN_STATUSES", "ListKey", "TaskList", "TaskListEntry", "key_of"]

_IN_LIST = 500  # bounded IN lists


class TaskListRow(Base):
    __tablename__ = "task_list"
    task_id: Mapped[str] = mapped_column(String(300), primary_key=True)
    task_type: Mapped[str] = mapped_column(String(60))
    run_id: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20))
    # The run's start in Temporal (when it was enqueued): the list's order.
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # When a worker took the run up (its TaskStarted event).
    picked_up_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    document_id: Mapped[str | None] = mapped_column(String(DOCUMENT_ID_CHARS), nullable=True)
    owner: Mapped[str | None] = mapped_column(String(OWNER_CHARS), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer)
    # The summaries of the runs the row is made from (task_list_rules.RunState), never listed.
    runs: Mapped[list[dict[str, Any]]] = mapped_column(JSON)

    # Each filter the admin list offers reads one index in list order: no sort, no scan.
    __table_args__ = (
        Index("ix_task_list_newest", "started_at", "task_id"),
        Index("ix_task_list_type", "task_type", "started_at", "task_id"),
        Index("ix_task_list_status", "status", "started_at", "task_id"),
        Index("ix_task_list_type_status", "task_type", "status", "started_at", "task_id"),
    )


TABLE: Table = TaskListRow.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class ListKey:
    """A position in the list: a row's `started_at` and task id (newest first)."""

    at: datetime
    task_id: str

    def encode(self) -> str:
        raw = json.dumps([utc(self.at).isoformat(), self.task_id], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, cursor: str) -> ListKey:
        """The key `encode` made, or ValueError (a cursor from elsewhere, or an old one)."""
        try:
            raw = base64.urlsafe_b64decode(cursor.encode("ascii") + b"=" * (-len(cursor) % 4))
            at, task_id = json.loads(raw)
            if not isinstance(at, str) or not isinstance(task_id, str):
                raise TypeError("not a (time, task id) pair")
            return cls(utc(datetime.fromisoformat(at)), task_id)
        except (ValueError, TypeError, OverflowError) as e:
            raise ValueError(f"not a cursor of the task list ({e})") from None


_LISTED = [c for c in TABLE.columns if c.name != "runs"]


def key_of(entry: TaskListEntry) -> ListKey:
    return ListKey(entry.started_at, entry.task_id)


def entry_of(row: Mapping[Any, Any]) -> TaskListEntry:
    def dt(key: str) -> datetime | None:
        return utc(row[key]) if row[key] else None

    return TaskListEntry(
        task_id=row["task_id"],
        task_type=row["task_type"],
        run_id=row["run_id"],
        status=row["status"],
        started_at=utc(row["started_at"]),
        picked_up_at=dt("picked_up_at"),
        closed_at=dt("closed_at"),
        document_id=row["document_id"],
        owner=row["owner"],
        attempts=row["attempts"],
    )


def state_of(row: Mapping[Any, Any]) -> TaskState:
    return TaskState(entry_of(row), tuple(RunState.from_json(r) for r in row["runs"] or []))


def row_of(state: TaskState) -> dict[str, Any]:
    # vars(), not asdict(): the entry holds no nested dataclasses to copy, and asdict's deep
    # copy was a third of this projection's own CPU (profiled).
    return vars(state.entry) | {"runs": [r.to_json() for r in state.runs]}


def upsert(insert: Any) -> Any:
    """INSERT of whole rows (`row_of`) that replaces a row of the same task id; `insert` is
    the dialect's (Database.insert)."""
    stmt = insert(TABLE)
    return stmt.on_conflict_do_update(
        index_elements=["task_id"],
        set_={c.name: stmt.excluded[c.name] for c in TABLE.columns if c.name != "task_id"},
    )


class TaskList:
    def __init__(self, db: Database) -> None:
        self.db = db
        # Built once: building the upsert took ~0.4 ms a call, more than running it (profiled).
        self._upsert = upsert(db.insert)

    async def project(self, s: AsyncSession, events: Sequence[TaskEvent]) -> None:
        """Apply newly stored events, inside the transaction that stored them (EventStore,
        which holds the writers' lock)."""
        if not events:
            return
        before = await self._load(s, {ev.task_id for ev in events})
        after = dict(before)
        for ev in events:
            after[ev.task_id] = apply_event(
                after.get(ev.task_id),
                task_id=ev.task_id,
                run_id=ev.run_id,
                task_type=ev.task_type,
                kind=ev.event_type,
                at=ev.at,
                data=ev.data,
            )
        changed = [row_of(st) for k, st in after.items() if before.get(k) != st]
        if changed:
            await s.execute(self._upsert, changed)

    async def seed(
        self,
        *,
        task_id: str,
        run_id: str,
        task_type: str,
        document_id: str | None = None,
        owner: str | None = None,
    ) -> None:
        """List a run the service just started, as pending (`apply_seed`)."""
        fields: dict[str, Any] = {
            "task_id": task_id,
            "run_id": run_id,
            "task_type": task_type,
            "document_id": document_id,
            "owner": owner,
            "at": now(),
        }
        fresh = apply_seed(None, **fields)
        async with self.db.write() as s:
            await lock_event_writers(s)
            # A write first: on SQLite it takes the write lock before the read below, so no
            # other process (a worker recording this task's events) writes in between.
            stmt = self.db.insert(TABLE).values(row_of(fresh))
            result: Any = await s.execute(stmt.on_conflict_do_nothing(index_elements=["task_id"]))
            if result.rowcount:
                return
            state = (await self._load(s, {task_id})).get(task_id)
            seeded = apply_seed(state, **fields)
            if seeded != state:
                await s.execute(self._upsert, [row_of(seeded)])

    async def _load(self, s: AsyncSession, task_ids: set[str]) -> dict[str, TaskState]:
        ids = sorted(task_ids)
        out: dict[str, TaskState] = {}
        for start in range(0, len(ids), _IN_LIST):
            chunk = ids[start : start + _IN_LIST]
            # One task (a workflow's own recording) is the common case: no IN list to expand.
            match = TABLE.c.task_id == chunk[0] if len(chunk) == 1 else TABLE.c.task_id.in_(chunk)
            for row in (await s.execute(select(TABLE).where(match))).mappings():
                out[row["task_id"]] = state_of(row)
        return out

    async def get(self, task_id: str) -> TaskListEntry | None:
        async with self.db.sessions() as s:
            state = (await self._load(s, {task_id})).get(task_id)
        return state.entry if state else None

    async def page(
        self,
        *,
        task_type: str | None = None,
        statuses: Sequence[str] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        prefix: str = "",
        after: ListKey | None = None,
        limit: int = 50,
    ) -> tuple[list[TaskListEntry], bool]:
        """Up to `limit` rows after `after`, newest first (`started_at`, then task id, both
        descending), in any of `statuses` (all when empty), started in [since, until); and
        whether more follow."""
        queries = [
            self.page_query(task_type, status, since, until, prefix, after).limit(limit + 1)
            for status in statuses or (None,)
        ]
        q = queries[0]
        if len(queries) > 1:
            # One indexed query per status, their few rows merged: an IN over the status would
            # make the database sort every matching row. Merged by the database, whose order
            # (collation) the cursor's comparison follows.
            merged = union_all(*(select(part.subquery()) for part in queries)).subquery()
            c = merged.c
            q = select(merged).order_by(c.started_at.desc(), c.task_id.desc()).limit(limit + 1)
        async with self.db.sessions() as s:
            rows = [entry_of(r) for r in (await s.execute(q)).mappings()]
        return rows[:limit], len(rows) > limit

    @staticmethod
    def page_query(
        task_type: str | None,
        status: str | None,
        since: datetime | None,
        until: datetime | None,
        prefix: str,
        after: ListKey | None,
    ) -> Any:
        """One status's SELECT of a page, in list order, without its LIMIT."""
        c = TABLE.c
        q = select(*_LISTED)
        if task_type:
            q = q.where(c.task_type == task_type)
        if status:
            q = q.where(c.status == status)
        if since is not None:
            q = q.where(c.started_at >= utc(since))
        if until is not None:
            q = q.where(c.started_at < utc(until))
        if prefix:
            q = q.where(c.task_id.startswith(prefix, autoescape=True))
        if after is not None:
            # Written out rather than as a row value, so SQLite, too, reads it as an index
            # range (started_at <= t) with the tie-breaker checked on the range's edge.
            at = utc(after.at)
            q = q.where(c.started_at <= at, or_(c.started_at < at, c.task_id < after.task_id))
        return q.order_by(c.started_at.desc(), c.task_id.desc())
