"""A consistent copy of the application database and its restore: SQLite through the online
backup API (a consistent snapshot while the workers keep writing), PostgreSQL through
`pg_dump` / `pg_restore` (custom format), which the worker and the restoring host need."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import make_url

from knowledgeops.config.settings import Settings

DatabaseKind = Literal["sqlite", "postgresql"]
FILE_NAMES: dict[DatabaseKind, str] = {"sqlite": "app.db", "postgresql": "app.pgdump"}


class DumpToolMissingError(RuntimeError):
    """pg_dump / pg_restore is not installed: no retry can help."""


class DumpFailedError(RuntimeError):
    pass


def database_kind(settings: Settings) -> DatabaseKind:
    backend = make_url(settings.resolved_database_url).get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ValueError(f"DATABASE_URL backend {backend!r} cannot be backed up")
    return "sqlite" if backend == "sqlite" else "postgresql"


def sqlite_path(settings: Settings) -> Path:
    return Path(make_url(settings.resolved_database_url).database or "")


def _sqlite_copy(source: Path, target: Path) -> None:
    """Copy a whole SQLite database through the backup API (consistent even while other
    connections write, WAL included), into `target` (replaced in place)."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    try:
        dst = sqlite3.connect(target, timeout=30)
        try:
            src.backup(dst)  # one step: a consistent snapshot even under writes (WAL)
            # A copy in rollback-journal mode is one self-contained file: reading it later
            # creates no -wal / -shm files next to it.
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()
    finally:
        src.close()


def _pg_env(settings: Settings) -> dict[str, str]:
    """libpq environment for the configured database (the password never goes on a command
    line, where `ps` would show it)."""
    url = make_url(settings.resolved_database_url)
    env = dict(os.environ)
    for var, value in (
        ("PGHOST", url.host),
        ("PGPORT", url.port),
        ("PGUSER", url.username),
        ("PGPASSWORD", url.password),
        ("PGDATABASE", url.database),
    ):
        if value is not None:
            env[var] = str(value)
    return env


async def _pg_tool(tool: str, *args: str, settings: Settings) -> None:
    exe = shutil.which(tool)
    if exe is None:
        raise DumpToolMissingError(
            f"{tool} is not installed (or not on PATH) here: install the PostgreSQL client "
            "tools matching the server's major version (Debian: apt install postgresql-client)"
        )
    proc = await asyncio.create_subprocess_exec(
        exe,
        *args,
        env=_pg_env(settings),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await proc.communicate()
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise DumpFailedError(f"{tool} exited {proc.returncode}: {err.decode()[-2000:].strip()}")


def _publish(tmp: Path, target: Path) -> None:
    with tmp.open("rb+") as f:
        os.fsync(f.fileno())  # durable before the manifest can claim it
    os.replace(tmp, target)


async def dump(settings: Settings, target_dir: Path) -> tuple[DatabaseKind, Path]:
    """Write a consistent copy of the database into `target_dir` (atomically)."""
    kind = database_kind(settings)
    target = target_dir / FILE_NAMES[kind]
    tmp = target.with_name(f".tmp-{target.name}")
    await asyncio.to_thread(target_dir.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(tmp.unlink, missing_ok=True)  # a dead attempt's
    try:
        if kind == "sqlite":
            source = sqlite_path(settings)
            if not await asyncio.to_thread(source.is_file):
                raise DumpFailedError(f"the SQLite database {source} does not exist")
            await asyncio.to_thread(_sqlite_copy, source, tmp)
        else:
            await _pg_tool(
                "pg_dump", "--format=custom", "--no-owner", f"--file={tmp}", settings=settings
            )
        await asyncio.to_thread(_publish, tmp, target)
    finally:
        await asyncio.to_thread(tmp.unlink, missing_ok=True)
    return kind, target


async def restore(settings: Settings, kind: DatabaseKind, source: Path) -> None:
    """Replace the configured database's content with the copy at `source`."""
    if kind != database_kind(settings):
        raise ValueError(
            f"the archive holds a {kind} database but DATABASE_URL points to "
            f"{database_kind(settings)}; restore with a {kind} DATABASE_URL"
        )
    if kind == "sqlite":
        target = sqlite_path(settings)
        target.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(_sqlite_copy, source, target)
        return
    await _pg_tool(
        "pg_restore",
        "--clean",
        "--if-exists",
        "--no-owner",
        "--no-privileges",
        "--single-transaction",
        "--exit-on-error",
        f"--dbname={make_url(settings.resolved_database_url).database}",
        str(source),
        settings=settings,
    )
