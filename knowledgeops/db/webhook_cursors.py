"""Per webhook URL, the last event `seq` delivered or given up (delivery resumes after it
after a restart), and the dead deliveries: events given up for a URL, with their last error.
Writes may be fenced by a lease (`fenced_by`): they happen only while it is held."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import DateTime, Integer, String, Text, UniqueConstraint, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from knowledgeops.contracts.events import StoredEvent
from knowledgeops.db.leases import Lease, fence
from knowledgeops.db.sql import Base, now

if TYPE_CHECKING:
    from knowledgeops.db.database import Database


class WebhookCursorRow(Base):
    __tablename__ = "webhook_cursors"
    url: Mapped[str] = mapped_column(String(1000), primary_key=True)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)


class WebhookDeadRow(Base):
    __tablename__ = "webhook_dead_deliveries"
    __table_args__ = (UniqueConstraint("url", "event_id", name="uq_webhook_dead_url_event"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    url: Mapped[str] = mapped_column(String(1000), index=True)
    event_seq: Mapped[int] = mapped_column(Integer)
    event_id: Mapped[str] = mapped_column(String(400))
    event_type: Mapped[str] = mapped_column(String(40))
    task_id: Mapped[str] = mapped_column(String(300))
    attempts: Mapped[int] = mapped_column(Integer)
    # HTTP status of the last attempt; None when no response came (network, invalid URL).
    last_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str] = mapped_column(Text)
    first_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    dead_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class WebhookCursors:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, url: str) -> int:
        async with self.db.sessions() as s:
            row = await s.get(WebhookCursorRow, url)
            return row.last_seq if row else 0

    async def set(self, url: str, seq: int, *, fenced_by: Lease | None = None) -> None:
        """LeaseLost, and nothing written, if `fenced_by` is no longer held."""
        async with self.db.write() as s:
            if fenced_by is not None:
                await fence(s, fenced_by)
            await self._set(s, url, seq)

    async def give_up(
        self,
        url: str,
        ev: StoredEvent,
        *,
        attempts: int,
        last_status: int | None,
        last_error: str,
        first_attempt_at: datetime,
        fenced_by: Lease | None = None,
    ) -> None:
        """Record `ev` as dead for `url` and move the cursor past it, in one transaction (a
        crash in between can neither lose the record nor retry a recorded event); recording
        the same event again changes nothing. LeaseLost, and nothing written, if `fenced_by`
        is no longer held."""
        async with self.db.write() as s:
            if fenced_by is not None:
                await fence(s, fenced_by)
            await s.execute(
                self.db.insert(WebhookDeadRow)
                .values(
                    url=url,
                    event_seq=ev.seq,
                    event_id=ev.event_id,
                    event_type=ev.event_type.value,
                    task_id=ev.task_id,
                    attempts=attempts,
                    last_status=last_status,
                    last_error=last_error,
                    first_attempt_at=first_attempt_at,
                    dead_at=now(),
                )
                .on_conflict_do_nothing(index_elements=["url", "event_id"])
            )
            await self._set(s, url, ev.seq)

    async def dead(
        self, url: str | None = None, limit: int = 100, before_id: int | None = None
    ) -> list[WebhookDeadRow]:
        """Dead deliveries, newest first; page with `before_id` = the last id seen."""
        q = select(WebhookDeadRow).order_by(WebhookDeadRow.id.desc()).limit(limit)
        if url is not None:
            q = q.where(WebhookDeadRow.url == url)
        if before_id is not None:
            q = q.where(WebhookDeadRow.id < before_id)
        async with self.db.sessions() as s:
            return list((await s.execute(q)).scalars().all())

    @staticmethod
    async def _set(s: AsyncSession, url: str, seq: int) -> None:
        row = await s.get(WebhookCursorRow, url)
        if row is None:
            s.add(WebhookCursorRow(url=url, last_seq=seq))
        else:
            row.last_seq = seq
