"""Per webhook URL, the last event `seq` delivered: delivery resumes there after a restart."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from knowledgeops.stores.sql import Base

if TYPE_CHECKING:
    from knowledgeops.stores.database import Database


class WebhookCursorRow(Base):
    __tablename__ = "webhook_cursors"
    url: Mapped[str] = mapped_column(String(1000), primary_key=True)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)


class WebhookCursors:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, url: str) -> int:
        async with self.db.sessions() as s:
            row = await s.get(WebhookCursorRow, url)
            return row.last_seq if row else 0

    async def set(self, url: str, seq: int) -> None:
        async with self.db.write() as s:
            row = await s.get(WebhookCursorRow, url)
            if row is None:
                s.add(WebhookCursorRow(url=url, last_seq=seq))
            else:
                row.last_seq = seq
