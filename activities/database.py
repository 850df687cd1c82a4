"""The application database: domain events, audit log, document catalogue.

SQLAlchemy 2 (async). SQLite file under the data directory by default, PostgreSQL through
DATABASE_URL. The schema is owned by Alembic migrations (migrations/), applied at start-up.
Task state is *not* kept here: Temporal is its source of truth.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Integer,
    String,
    Text,
    event,
    func,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from knowledgeops.events import EventType, StoredEvent, TaskEvent
from knowledgeops.settings import Settings


class Base(DeclarativeBase):
    pass


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
    last_job_id: Mapped[str] = mapped_column(String(300))
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class WebhookCursorRow(Base):
    __tablename__ = "webhook_cursors"
    url: Mapped[str] = mapped_column(String(1000), primary_key=True)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(dt: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything we store is UTC.
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


_LISTING_EVENTS = (EventType.TASK_ENQUEUED, EventType.TASK_RETRIED)
_DOC_STATUS = {
    EventType.TASK_ENQUEUED: "importing",
    EventType.TASK_RETRIED: "importing",
    EventType.TASK_STARTED: "importing",
    EventType.TASK_COMPLETED: "ready",
    EventType.TASK_FAILED: "failed",
    EventType.TASK_CANCELLED: "cancelled",
}


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL: readers never block the writer, and a commit is one append instead of a journal
    # rewrite (several times the commit rate). NORMAL sync is crash-safe in WAL mode.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class Database:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessions = async_sessionmaker(engine, expire_on_commit=False)
        # SQLite has one writer at a time, and a writer that finds the file locked backs off
        # in sleeps of up to 100 ms, far longer than our writes take. Writers of this process
        # (many imports recording events at once, audit records) take turns here instead;
        # writers in other processes still meet the back-off.
        self._write_lock = asyncio.Lock() if engine.dialect.name == "sqlite" else None

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncSession]:
        """A write transaction (committed on exit)."""
        async with contextlib.AsyncExitStack() as stack:
            if self._write_lock is not None:
                await stack.enter_async_context(self._write_lock)
            yield await stack.enter_async_context(self.sessions.begin())

    @classmethod
    async def open(cls, settings: Settings, *, migrate: bool = True) -> Database:
        url = settings.resolved_database_url
        if url.startswith("sqlite"):
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            # Several processes (API, workers) share the file: wait for locks, don't fail.
            engine = create_async_engine(url, connect_args={"timeout": 30})
            event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        else:
            engine = create_async_engine(url, pool_pre_ping=True)
        if migrate:
            await migrate_to_head(url)
        return cls(engine)

    async def close(self) -> None:
        await self.engine.dispose()

    @property
    def _insert(self) -> Any:
        return postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert

    # -- domain events -------------------------------------------------------------------

    async def record_events(self, events: Sequence[TaskEvent]) -> int:
        """Store events once per event id (a retried activity re-sends them); returns how
        many were new. Also projects DOCUMENT_IMPORT events onto the document catalogue."""
        new = 0
        async with self._write() as s:
            if self.engine.dialect.name == "postgresql":
                # Serialise writers so seq order equals commit order: a reader that has seen
                # seq N can never later find an event with a smaller seq appear.
                await s.execute(text("SELECT pg_advisory_xact_lock(727001)"))
            for ev in events:
                stmt = (
                    self._insert(EventRow)
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
                    new += 1
                    if ev.task_type == "DOCUMENT_IMPORT" and "document_id" in ev.data:
                        await self._project_document(s, ev)
        return new

    async def _project_document(self, s: Any, ev: TaskEvent) -> None:
        if ev.event_type in _LISTING_EVENTS and "file_id" in ev.data:
            await self._list_document(s, ev)
            return
        row = await s.get(DocumentRow, ev.data["document_id"])
        if row is None or row.last_job_id != ev.task_id:
            return
        row.status = _DOC_STATUS[ev.event_type]
        row.updated_at = _now()
        if ev.event_type == EventType.TASK_COMPLETED:
            row.indexed_chunks = int(ev.data.get("total_chunks", 0))
            row.error = None
            row.title = row.title or ev.data.get("title")
        elif ev.event_type in (EventType.TASK_FAILED, EventType.TASK_CANCELLED):
            row.error = ev.error
            if ev.data.get("index_cleared"):
                row.indexed_chunks = 0

    async def events_after(
        self, after: int = 0, limit: int = 100, task_id: str | None = None
    ) -> list[StoredEvent]:
        q = select(EventRow).where(EventRow.seq > after).order_by(EventRow.seq).limit(limit)
        if task_id:
            q = q.where(EventRow.task_id == task_id)
        async with self.sessions() as s:
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
                at=_aware(r.at),
                error=r.error,
                data=r.data or {},
            )
            for r in rows
        ]

    # -- audit log -----------------------------------------------------------------------

    async def audit(
        self,
        *,
        actor: str,
        action: str,
        task_ids: Sequence[str],
        reason: str,
        outcome: str,
        details: dict[str, Any] | None = None,
    ) -> AuditRow:
        row = AuditRow(
            at=_now(),
            actor=actor,
            action=action,
            task_ids=list(task_ids),
            reason=reason,
            outcome=outcome,
            details=details or {},
        )
        async with self._write() as s:
            s.add(row)
        return row

    async def audit_records(
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
        async with self.sessions() as s:
            rows = list((await s.execute(q.limit(limit if not task_id else 10_000))).scalars())
        if task_id:  # JSON containment differs per dialect; audit volumes are small
            rows = [r for r in rows if task_id in (r.task_ids or [])][:limit]
        for r in rows:
            r.at = _aware(r.at)
        return rows

    async def _list_document(self, s: Any, ev: TaskEvent) -> None:
        """The first event of an import run lists (or re-lists) its document. Only a started
        workflow can do this, so the catalogue never shows a document with no import behind it,
        and an upload answers without a database write."""
        d = ev.data
        now = _now()
        values = {
            "title": d.get("title"),
            "filename": d.get("filename", ""),
            "file_id": d["file_id"],
            "tags": list(d.get("tags") or []),
            "owner": d.get("owner"),
            "status": _DOC_STATUS[ev.event_type],
            "last_job_id": ev.task_id,
            "error": None,
            "updated_at": now,
        }
        stmt = self._insert(DocumentRow).values(
            document_id=d["document_id"], created_at=now, indexed_chunks=0, **values
        )
        if values["title"] is None:
            del values["title"]  # keep a known title unless a new one is given
        await s.execute(stmt.on_conflict_do_update(index_elements=["document_id"], set_=values))

    # -- document catalogue --------------------------------------------------------------

    async def get_document(self, document_id: str) -> DocumentRow | None:
        async with self.sessions() as s:
            return await s.get(DocumentRow, document_id)

    async def documents_by_id(self, ids: set[str]) -> dict[str, DocumentRow]:
        q = select(DocumentRow).where(DocumentRow.document_id.in_(sorted(ids)))
        async with self.sessions() as s:
            return {r.document_id: r for r in (await s.execute(q)).scalars()}

    async def list_documents(
        self, *, limit: int = 50, offset: int = 0, owner: str | None = None
    ) -> tuple[list[DocumentRow], int]:
        q = select(DocumentRow)
        count_q = select(func.count()).select_from(DocumentRow)
        if owner:
            q = q.where(DocumentRow.owner == owner)
            count_q = count_q.where(DocumentRow.owner == owner)
        q = q.order_by(DocumentRow.updated_at.desc()).limit(limit).offset(offset)
        async with self.sessions() as s:
            rows = list((await s.execute(q)).scalars())
            total = int((await s.execute(count_q)).scalar_one())
        return rows, total

    async def delete_document(self, document_id: str) -> bool:
        async with self._write() as s:
            row = await s.get(DocumentRow, document_id)
            if row is None:
                return False
            await s.delete(row)
            return True

    async def file_in_use(self, file_id: str) -> bool:
        q = select(func.count()).select_from(DocumentRow).where(DocumentRow.file_id == file_id)
        async with self.sessions() as s:
            return int((await s.execute(q)).scalar_one()) > 0

    # -- webhooks ------------------------------------------------------------------------

    async def webhook_cursor(self, url: str) -> int:
        async with self.sessions() as s:
            row = await s.get(WebhookCursorRow, url)
            return row.last_seq if row else 0

    async def set_webhook_cursor(self, url: str, seq: int) -> None:
        async with self._write() as s:
            row = await s.get(WebhookCursorRow, url)
            if row is None:
                s.add(WebhookCursorRow(url=url, last_seq=seq))
            else:
                row.last_seq = seq


_MIGRATION_LOCK = asyncio.Lock()
MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


async def migrate_to_head(url: str) -> None:
    """Apply Alembic migrations (in a thread: Alembic's env runs its own event loop)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url)
    async with _MIGRATION_LOCK:
        for attempt in range(3):
            try:
                await asyncio.to_thread(command.upgrade, cfg, "head")
                return
            except Exception:
                # Another process may be migrating the same database right now.
                if attempt == 2:
                    raise
                await asyncio.sleep(1.0)
