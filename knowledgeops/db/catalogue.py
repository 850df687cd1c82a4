"""The document catalogue: DOCUMENT_IMPORT's projection of its domain events.

The first event of an import run lists (or re-lists) the document; later events of that run
move its status (importing / ready / failed / cancelled). Only a started workflow can list a
document, so the catalogue never shows one with no import behind it, and an upload answers
without a database write.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import JSON, DateTime, Integer, String, Table, Text, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from knowledgeops.contracts.document_delete import DELETING
from knowledgeops.contracts.events import EventType, TaskEvent
from knowledgeops.db.audit import AuditRow
from knowledgeops.db.sql import Base, now

if TYPE_CHECKING:
    from knowledgeops.db.database import Database


class DocumentRow(Base):
    __tablename__ = "documents"
    document_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    title: Mapped[str | None] = mapped_column(String(500), nullable=True)
    filename: Mapped[str] = mapped_column(String(500), default="")
    file_id: Mapped[str] = mapped_column(String(100))
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # Projection of the last import's domain events: importing / ready / failed / cancelled.
    status: Mapped[str] = mapped_column(String(20), default="importing")
    indexed_chunks: Mapped[int] = mapped_column(Integer, default=0)
    last_task_id: Mapped[str] = mapped_column(String(300))
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


_LISTING_EVENTS = (EventType.TASK_ENQUEUED, EventType.TASK_RETRIED)
_DOC_STATUS = {
    EventType.TASK_ENQUEUED: "importing",
    EventType.TASK_RETRIED: "importing",
    EventType.TASK_STARTED: "importing",
    EventType.TASK_COMPLETED: "ready",
    EventType.TASK_FAILED: "failed",
    EventType.TASK_CANCELLED: "cancelled",
    # No cleanup ran for these: whatever the import had written stays until a re-import.
    EventType.TASK_TERMINATED: "failed",
    EventType.TASK_TIMED_OUT: "failed",
}


_LABELS_SQL = (
    f"SELECT document_id, title, filename FROM {DocumentRow.__tablename__} "
    "WHERE document_id IN ({marks})"
)


class DocumentCatalogue:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def project(self, s: AsyncSession, ev: TaskEvent) -> None:
        if "document_id" not in ev.data:
            return
        if ev.event_type in _LISTING_EVENTS and "file_id" in ev.data:
            await self._list(s, ev)
            return
        # One UPDATE, only of the row this run listed (a later import of the document owns
        # it otherwise); not an ORM load and flush, which cost ~4 % of the worker's CPU at 20
        # small imports/s (profiled).
        table = cast(Table, DocumentRow.__table__)
        values: dict[str, Any] = {"status": _DOC_STATUS[ev.event_type], "updated_at": now()}
        if ev.event_type == EventType.TASK_COMPLETED:
            values["indexed_chunks"] = int(ev.data.get("total_chunks", 0))
            values["error"] = None
            values["title"] = func.coalesce(table.c.title, ev.data.get("title"))
        elif ev.event_type != EventType.TASK_STARTED:
            # A failed or cancelled import discarded only its own version: the previous one
            # (if any) is still searchable, so indexed_chunks keeps counting it.
            values["error"] = ev.error
        await s.execute(
            update(table)
            .where(
                table.c.document_id == ev.data["document_id"],
                table.c.last_task_id == ev.task_id,
                # Its delete task was started: the import it cancels must not relist it.
                table.c.status != DELETING,
            )
            .values(values)
        )

    async def _list(self, s: AsyncSession, ev: TaskEvent) -> None:
        d = ev.data
        at = now()
        values = {
            "title": d.get("title"),
            "filename": d.get("filename", ""),
            "file_id": d["file_id"],
            "tags": list(d.get("tags") or []),
            "owner": d.get("owner"),
            "status": _DOC_STATUS[ev.event_type],
            "last_task_id": ev.task_id,
            "error": None,
            "updated_at": at,
        }
        stmt = self.db.insert(DocumentRow.__table__).values(
            document_id=d["document_id"], created_at=at, indexed_chunks=0, **values
        )
        if values["title"] is None:
            del values["title"]  # keep a known title unless a new one is given
        table = cast(Table, DocumentRow.__table__)
        await s.execute(
            stmt.on_conflict_do_update(
                index_elements=["document_id"], set_=values, where=table.c.status != DELETING
            )
        )

    async def get(self, document_id: str) -> DocumentRow | None:
        async with self.db.sessions() as s:
            return await s.get(DocumentRow, document_id)

    async def by_id(self, ids: set[str]) -> dict[str, DocumentRow]:
        q = select(DocumentRow).where(DocumentRow.document_id.in_(sorted(ids)))
        async with self.db.sessions() as s:
            return {r.document_id: r for r in (await s.execute(q)).scalars()}

    async def labels(self, ids: set[str]) -> dict[str, tuple[str | None, str]]:
        """Document id -> (title, file name), what a search hit shows: two columns on a bare
        connection, not rows loaded into a session (a quarter less time, measured); with
        SQLite on the reader's own connection (`Database.sqlite_rows`)."""
        if self.db.sqlite:
            marks = ", ".join("?" * len(ids))
            rows = await self.db.sqlite_rows(_LABELS_SQL.format(marks=marks), sorted(ids))
            return {doc: (title, filename) for doc, title, filename in rows}
        q = select(DocumentRow.document_id, DocumentRow.title, DocumentRow.filename).where(
            DocumentRow.document_id.in_(sorted(ids))
        )
        async with self.db.engine.connect() as c:
            return {doc: (title, filename) for doc, title, filename in await c.execute(q)}

    async def matching_ids(
        self,
        *,
        owner: str | None = None,
        tags: Sequence[str] = (),
        document_ids: Sequence[str] = (),
    ) -> list[str]:
        """Ids of the documents of `owner` carrying every tag in `tags`, among `document_ids`
        when given. Tags are a JSON list, matched here rather than in dialect-specific SQL."""
        q = select(DocumentRow.document_id, DocumentRow.tags)
        if owner:
            q = q.where(DocumentRow.owner == owner)
        if document_ids:
            q = q.where(DocumentRow.document_id.in_(sorted(set(document_ids))))
        wanted = set(tags)
        async with self.db.sessions() as s:
            rows = (await s.execute(q)).all()
        return [doc for doc, have in rows if wanted <= set(have or [])]

    async def fields_after(
        self, after: str = "", limit: int = 500
    ) -> list[tuple[str, str | None, list[str]]]:
        """(document id, owner, tags) in id order after `after`: what index points carry."""
        q = (
            select(DocumentRow.document_id, DocumentRow.owner, DocumentRow.tags)
            .where(DocumentRow.document_id > after)
            .order_by(DocumentRow.document_id)
            .limit(limit)
        )
        async with self.db.sessions() as s:
            return [(d, o, list(t or [])) for d, o, t in (await s.execute(q)).all()]

    async def indexed_ids(self, after: str = "", limit: int = 500) -> tuple[list[str], int]:
        """Ids of documents with a published version (indexed chunks), in id order after
        `after`, and how many such documents there are in all."""
        has = DocumentRow.indexed_chunks > 0
        q = (
            select(DocumentRow.document_id)
            .where(has, DocumentRow.document_id > after)
            .order_by(DocumentRow.document_id)
            .limit(limit)
        )
        async with self.db.sessions() as s:
            ids = list((await s.execute(q)).scalars())
            total = int((await s.execute(select(func.count()).where(has))).scalar_one())
        return ids, total

    async def changed_since(self, since: datetime, after: str, limit: int) -> list[str]:
        """Ids of documents with a published version whose row changed at or after `since`
        (an import of theirs began, completed or failed), in id order after `after`."""
        q = (
            select(DocumentRow.document_id)
            .where(
                DocumentRow.indexed_chunks > 0,
                DocumentRow.updated_at >= since,
                DocumentRow.document_id > after,
            )
            .order_by(DocumentRow.document_id)
            .limit(limit)
        )
        async with self.db.sessions() as s:
            return list((await s.execute(q)).scalars())

    async def set_indexed_chunks(self, document_id: str, chunks: int) -> None:
        """A re-index split the document again: its live version has `chunks` chunks."""
        async with self.db.write() as s:
            row = await s.get(DocumentRow, document_id)
            if row is not None:
                row.indexed_chunks = chunks

    async def list(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        owner: str | None = None,
        tags: Sequence[str] = (),
        document_ids: Sequence[str] = (),
    ) -> tuple[list[DocumentRow], int]:
        q = select(DocumentRow)
        count_q = select(func.count()).select_from(DocumentRow)
        if tags:
            document_ids = await self.matching_ids(
                owner=owner, tags=tags, document_ids=document_ids
            )
            if not document_ids:
                return [], 0
        if owner:
            q = q.where(DocumentRow.owner == owner)
            count_q = count_q.where(DocumentRow.owner == owner)
        if document_ids:
            ids = DocumentRow.document_id.in_(sorted(set(document_ids)))
            q, count_q = q.where(ids), count_q.where(ids)
        q = q.order_by(DocumentRow.updated_at.desc()).limit(limit).offset(offset)
        async with self.db.sessions() as s:
            rows = list((await s.execute(q)).scalars())
            total = int((await s.execute(count_q)).scalar_one())
        return rows, total

    async def delete(self, document_id: str) -> bool:
        async with self.db.write() as s:
            row = await s.get(DocumentRow, document_id)
            if row is None:
                return False
            await s.delete(row)
            return True

    async def delete_audited(self, document_id: str, record: AuditRow) -> bool:
        """Delete the document's row and write its audit record in one transaction: either
        both happen or neither does. No row, no record: a retry after both happened."""
        async with self.db.write() as s:
            row = await s.get(DocumentRow, document_id)
            if row is None:
                return False
            await s.delete(row)
            s.add(record)
            return True

    async def mark_deleting(
        self, document_id: str, *, file_id: str, task_id: str, owner: str | None, filename: str
    ) -> None:
        """The document's delete task has been started: its row says so (listed with its
        import's details if its import had not begun yet, so an import of it meanwhile is
        refused either way); the task removes the row."""
        at = now()
        stmt = self.db.insert(DocumentRow.__table__).values(
            document_id=document_id,
            file_id=file_id,
            last_task_id=task_id,
            owner=owner,
            filename=filename,
            tags=[],
            status=DELETING,
            indexed_chunks=0,
            created_at=at,
            updated_at=at,
        )
        async with self.db.write() as s:
            await s.execute(
                stmt.on_conflict_do_update(
                    index_elements=["document_id"], set_={"status": DELETING, "updated_at": at}
                )
            )

    async def file_in_use(self, file_id: str) -> bool:
        q = select(func.count()).select_from(DocumentRow).where(DocumentRow.file_id == file_id)
        async with self.db.sessions() as s:
            return int((await s.execute(q)).scalar_one()) > 0
