"""Which chunk version of each document is live: the pointer a publish moves.

It lives in the app database, not in a file beside the chunk files: one row written in one
transaction is atomic for every process on every machine that shares the database (PostgreSQL
in production), where a file's rename is atomic only within one file system. The chunk files
themselves are immutable once written (chunk_store.py), so a reader that found the pointer
reads whole files. Installations from before kept a `<document>.live` file: read while the
document has no row, and removed by its next publish or delete.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import DateTime, String, delete, select
from sqlalchemy.orm import Mapped, mapped_column

from knowledgeops.db.sql import Base, now
from knowledgeops.files import chunk_store

if TYPE_CHECKING:
    from knowledgeops.db.database import Database


class LiveVersionRow(Base):
    __tablename__ = "live_chunk_versions"
    document_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[str] = mapped_column(String(100))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class LiveVersions:
    def __init__(self, db: Database, chunks_dir: Path) -> None:
        self.db = db
        self.chunks_dir = chunks_dir

    async def get(self, document_id: str) -> str | None:
        """The published version, or None (never published, or stored before versions)."""
        async with self.db.sessions() as s:
            row = await s.get(LiveVersionRow, document_id)
        if row is not None:
            return row.version
        # Inline, not in a thread: one small file's read (or a failed open) takes microseconds,
        # a hop to a thread more, on every first import's steps.
        return chunk_store.legacy_live_version(self.chunks_dir, document_id)

    async def put(self, document_id: str, version: str) -> None:
        """Make `version` the live one (one row write), then drop an earlier `.live` file."""
        values = {"document_id": document_id, "version": version, "updated_at": now()}
        async with self.db.write() as s:
            await s.execute(
                self.db.insert(LiveVersionRow)
                .values(**values)
                .on_conflict_do_update(index_elements=["document_id"], set_=values)
            )
        chunk_store.remove_legacy_pointer(self.chunks_dir, document_id)

    async def delete(self, document_id: str) -> None:
        async with self.db.write() as s:
            await s.execute(delete(LiveVersionRow).where(LiveVersionRow.document_id == document_id))
        chunk_store.remove_legacy_pointer(self.chunks_dir, document_id)

    async def documents(self) -> set[str]:
        """Every document with a row."""
        async with self.db.sessions() as s:
            return set((await s.execute(select(LiveVersionRow.document_id))).scalars())
