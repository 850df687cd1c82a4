"""The audit log: one append-only record per manual action (cancel, retry, bulk action,
document delete), whoever did it and through whichever door (admin API, public API, CLI)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, DateTime, Integer, String, Text, select
from sqlalchemy.orm import Mapped, mapped_column

from knowledgeops.db.sql import Base, aware, now

if TYPE_CHECKING:
    from knowledgeops.db.database import Database


class AuditRow(Base):
    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    actor: Mapped[str] = mapped_column(String(200), index=True)
    action: Mapped[str] = mapped_column(String(60), index=True)
    task_ids: Mapped[list[str]] = mapped_column(JSON, default=list)
    reason: Mapped[str] = mapped_column(Text, default="")
    outcome: Mapped[str] = mapped_column(String(40))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Set for actions found in Temporal's history (done in its Web UI or CLI): one record per
    # action however often the history is read.
    source_key: Mapped[str | None] = mapped_column(String(300), unique=True, nullable=True)


def audit_row(
    actor: str,
    action: str,
    task_ids: Sequence[str],
    reason: str,
    outcome: str,
    details: dict[str, Any] | None = None,
) -> AuditRow:
    # Actors come from configured names (validated to fit); the clip is the column's guard.
    return AuditRow(
        at=now(),
        actor=actor[:200],
        action=action,
        task_ids=list(task_ids),
        reason=reason,
        outcome=outcome,
        details=details or {},
    )


class AuditLog:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def record(
        self,
        actor: str,
        action: str,
        task_ids: Sequence[str],
        reason: str,
        outcome: str,
        details: dict[str, Any] | None = None,
    ) -> AuditRow:
        """The one call that writes an audit record on its own (a change and its record in
        one transaction: add `audit_row(...)` to the change's session)."""
        row = audit_row(actor, action, task_ids, reason, outcome, details)
        async with self.db.write() as s:
            s.add(row)
        return row

    async def record_once(self, source_key: str, row: AuditRow) -> bool:
        """Write `row` unless a record with this source key exists; True if written."""
        values = {
            c.name: getattr(row, c.name) for c in AuditRow.__table__.columns if c.name != "id"
        }
        stmt = self.db.insert(AuditRow).values(**values | {"source_key": source_key})
        async with self.db.write() as s:
            result: Any = await s.execute(
                stmt.on_conflict_do_nothing(index_elements=["source_key"])
            )
        return bool(result.rowcount)

    async def records(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        task_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[AuditRow]:
        q = select(AuditRow).order_by(AuditRow.id.desc())
        if actor:
            q = q.where(AuditRow.actor == actor)
        if action:
            q = q.where(AuditRow.action == action)
        if since:
            q = q.where(AuditRow.at >= since)
        if until:
            q = q.where(AuditRow.at < until)
        if before_id:
            q = q.where(AuditRow.id < before_id)
        async with self.db.sessions() as s:
            rows = list((await s.execute(q.limit(limit if not task_id else 10_000))).scalars())
        if task_id:  # JSON containment differs per dialect; audit volumes are small
            rows = [r for r in rows if task_id in (r.task_ids or [])][:limit]
        for r in rows:
            r.at = aware(r.at)
        return rows

    async def older_than(self, before: datetime) -> tuple[int, int | None]:
        """How many records are dated before `before`, and the highest id among them."""
        return await self.db.rows_before(AuditRow.at, AuditRow.id, before)

    async def delete_older_than(self, before: datetime, up_to_id: int, limit: int = 5000) -> int:
        """Retention (AUDIT_RETENTION_DAYS): delete up to `limit` records dated before `before`
        with id <= `up_to_id`; returns how many. Nothing else ever deletes audit records."""
        return await self.db.delete_rows_before(AuditRow.at, AuditRow.id, before, up_to_id, limit)
