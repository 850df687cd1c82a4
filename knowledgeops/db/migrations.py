"""The schema's migrations (Alembic, migrations/): bringing a database to head, reading its
revision, and who migrates.

The embedded SQLite database is migrated by whichever process starts: it lives on one machine,
and `knowledgeops dev` must stay one command. A database server is shared by processes that
start at once (the API, a worker per pool), which would race to migrate it, and a process of an
older image would run on a newer schema: there one job migrates (`knowledgeops db upgrade`,
the compose stack's `migrate` service) and every other process only checks that the schema is
this version's head (SchemaNotAtHeadError otherwise).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import Connection, make_url

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
UPGRADE_COMMAND = "knowledgeops db upgrade"

# One migration at a time in a process; other processes are met by migrate_to_head's retries.
_MIGRATION_LOCK = asyncio.Lock()


class SchemaNotAtHeadError(RuntimeError):
    """The database server's schema is not this version's head: the process does not start."""


@dataclass(frozen=True)
class Revision:
    """A database's schema revision, against this version's migrations."""

    current: str | None  # None: no schema yet (an empty database)
    head: str
    known: bool  # False: a revision these migrations do not have (a newer version's)

    @property
    def at_head(self) -> bool:
        return self.current == self.head

    def describe(self) -> str:
        """One line: the revision and where it stands."""
        if self.current is None:
            return f"none (an empty database; the head is {self.head})"
        if self.at_head:
            return f"{self.current} (head)"
        if not self.known:
            return (
                f"{self.current} (not a revision of this version, whose head is {self.head}; "
                "a newer version's?)"
            )
        return f"{self.current} (behind the head, {self.head})"


def migrates_itself(url: str) -> bool:
    """Whether a process migrates this database when it starts (the embedded SQLite one)."""
    return make_url(url).get_backend_name() == "sqlite"


def _config(url: str = "") -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        cfg.set_main_option("sqlalchemy.url", url)
    return cfg


def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config())


def _current_of(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def _absent_sqlite_file(url: str) -> bool:
    database = make_url(url).database
    return migrates_itself(url) and bool(database) and not Path(database or "").exists()


async def read_revision(url: str) -> Revision:
    """The database's revision. Only reads: a SQLite file that is not there is reported empty,
    not created."""
    from sqlalchemy.ext.asyncio import create_async_engine

    current = None
    if not _absent_sqlite_file(url):
        engine = create_async_engine(url)
        try:
            async with engine.connect() as connection:
                current = await connection.run_sync(_current_of)
        finally:
            await engine.dispose()
    script = _script()
    head = script.get_current_head()
    assert head is not None, f"no migrations in {MIGRATIONS_DIR}"
    known = current is None or current in {s.revision for s in script.walk_revisions()}
    return Revision(current, head, known)


def require_head(revision: Revision) -> None:
    """SchemaNotAtHeadError (one line, naming what to do) unless the schema is at head."""
    if revision.at_head:
        return
    if revision.current is None:
        found = f"the database has no schema yet (this version's is {revision.head})"
    elif not revision.known:
        # Upgrading cannot help: this version does not know the revision.
        raise SchemaNotAtHeadError(
            f"the database schema is at {revision.current}, a revision this version does not "
            f"know (its head is {revision.head}): run the version that migrated it"
        )
    else:
        found = (
            f"the database schema is at {revision.current}, behind this version's head "
            f"{revision.head}"
        )
    raise SchemaNotAtHeadError(f"{found}: run `{UPGRADE_COMMAND}` first")


async def migrate_to_head(url: str) -> None:
    """Apply Alembic migrations (in a thread: Alembic's env runs its own event loop)."""
    from alembic import command

    cfg = _config(url)
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
