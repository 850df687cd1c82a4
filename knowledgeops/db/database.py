"""The application database: engine, sessions and migrations.

SQLAlchemy 2 (async). SQLite file under the data directory by default, PostgreSQL through
DATABASE_URL. The schema is owned by Alembic migrations (migrations/; who applies them:
knowledgeops/db/migrations.py). A process migrates SQLite when it starts and only checks
PostgreSQL's schema (prepare_schema), which one job migrates (`knowledgeops db upgrade`).
Temporal is the source of truth for task state: what is kept here are domain events and read
models projected from them (the admin task list, for listing only). Each concern has its
module: events (with the per-type projections the registry names, and the task list every
type's events feed), audit, webhook cursors, the document catalogue; each is built on
`Database` by whoever uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from sqlalchemy import delete, event, func, select
from sqlalchemy import exc as exc_sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from knowledgeops.config.settings import Settings
from knowledgeops.db.migrations import (
    MIGRATIONS_DIR,
    migrate_to_head,
    migrates_itself,
    read_revision,
    require_head,
)
from knowledgeops.db.sql import Base
from knowledgeops.db.write_turns import write_turn
from knowledgeops.turns import SmallestFirst

__all__ = [
    "MIGRATIONS_DIR",
    "Base",
    "Database",
    "migrate_to_head",
    "open_prepared",
    "prepare_schema",
]


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
        # (many imports recording events at once, audit records) take turns here instead,
        # express tasks' first; writers in other processes still meet the back-off.
        self.sqlite = engine.dialect.name == "sqlite"
        self._turns = SmallestFirst() if self.sqlite else None
        # SQLite's short reads on the query path (a search's labels) run on a plain connection
        # of their own thread: see `sqlite_rows`.
        self._reader: sqlite3.Connection | None = None
        self._reader_thread = ThreadPoolExecutor(1, "sqlite-reader") if self.sqlite else None

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A write transaction (committed on exit)."""
        async with contextlib.AsyncExitStack() as stack:
            if self._turns is not None:
                await stack.enter_async_context(write_turn(self._turns))
            yield await stack.enter_async_context(self.sessions.begin())

    @classmethod
    async def open(cls, settings: Settings, *, migrate: bool = True) -> Database:
        """`migrate`: to head first (tests, tools, restore); a process's start passes False
        after prepare_schema, so a database server's schema is never migrated by it."""
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
        if self._reader_thread is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._reader_thread, self._close_reader)
            self._reader_thread.shutdown()
        await self.engine.dispose()

    async def sqlite_rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows of one short read of the SQLite file, in one trip to the reader's thread.
        Through aiosqlite each DBAPI call (cursor, execute, fetch, close, the pool's rollback)
        is a trip of its own: a search's labels took 2.2 ms in a busy worker that way."""
        if self._reader_thread is None:
            raise RuntimeError(f"sqlite_rows reads SQLite; this database is {self.engine.url}")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader_thread, self._read, sql, params)

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        if self._reader is None:
            # Used by its one thread only. Autocommit: each read sees the latest commit (WAL).
            self._reader = sqlite3.connect(
                str(self.engine.url.database),
                timeout=30,
                check_same_thread=False,
                isolation_level=None,
            )
        return self._reader.execute(sql, params).fetchall()

    def _close_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    async def rows_before(self, at: Any, key: Any, before: datetime) -> tuple[int, int | None]:
        """How many rows of `at`'s table are dated before `before`, and their highest `key`."""
        q = select(func.count(), func.max(key)).where(at < before)
        async with self.sessions() as s:
            count, last = (await s.execute(q)).one()
        return int(count), last

    async def delete_rows_before(
        self, at: Any, key: Any, before: datetime, up_to: int, limit: int = 5000
    ) -> int:
        """Retention: delete up to `limit` rows dated before `before` with `key` <= `up_to` (in
        bounded transactions, so SQLite's single writer is never held long); returns how many.
        `up_to` pins the set listed earlier: rows dated in the past can still arrive later."""
        batch = select(key).where(at < before, key <= up_to).order_by(key).limit(limit)
        async with self.write() as s:
            result: Any = await s.execute(delete(key.class_).where(key.in_(batch)))
        return int(result.rowcount or 0)

    @property
    def insert(self) -> Any:
        """The dialect's INSERT (both have ON CONFLICT)."""
        return postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert


async def prepare_schema(settings: Settings) -> None:
    """What a process (worker, API) does with the schema when it starts, before it opens
    anything: the embedded SQLite database is migrated to head; a server's is only checked,
    SchemaNotAtHeadError unless at head (knowledgeops/db/migrations.py says why). It then
    opens the database with `migrate=False`."""
    url = settings.resolved_database_url
    if migrates_itself(url):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        await migrate_to_head(url)
    else:
        require_head(await read_revision(url))


async def open_prepared(settings: Settings) -> Database:
    """The database as a command (the CLI) opens it: its schema prepared as a process's is
    (`prepare_schema`: SQLite migrated, a server's only checked), then opened."""
    await prepare_schema(settings)
    return await Database.open(settings, migrate=False)


# Libraries whose frames in a traceback mean the error came from reaching the database: a
# refused connection surfaces as a bare ConnectionRefusedError raised inside asyncpg.
_DRIVERS = ("asyncpg", "sqlalchemy", "aiosqlite")
DATABASE_ERRORS: tuple[type[Exception], ...] = (exc_sa.SQLAlchemyError,)


def database_unreachable(exc: BaseException) -> bool:
    """Whether the application database did not answer (down, restarting, connection lost,
    SQLite locked past its timeout): an outage to wait out, not a bad statement."""
    if isinstance(exc, exc_sa.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, exc_sa.OperationalError | exc_sa.InterfaceError):
        if exc.orig is not None and type(exc.orig).__module__.startswith("sqlite3"):
            return "database is locked" in str(exc.orig)  # other SQLite errors are ours
        return True
    if isinstance(exc, exc_sa.TimeoutError | exc_sa.DisconnectionError):
        return True  # no pooled connection freed in time / a dropped one
    if isinstance(exc, ConnectionError | TimeoutError) or _postgres_unavailable(exc):
        return _raised_in(exc, _DRIVERS)
    return False


def _postgres_unavailable(exc: BaseException) -> bool:
    # "the database system is starting up / shutting down", a connection killed by a restart.
    name = type(exc).__name__
    return type(exc).__module__.startswith("asyncpg") and name in {
        "CannotConnectNowError",
        "ConnectionDoesNotExistError",
        "AdminShutdownError",
        "ConnectionFailureError",
        "ConnectionRejectionError",
        "InternalClientError",
    }


def _raised_in(exc: BaseException, prefixes: tuple[str, ...]) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module.startswith(prefixes):
            return True
        tb = tb.tb_next
    return False
