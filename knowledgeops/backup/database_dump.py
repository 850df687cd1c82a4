"""A consistent copy of the application database and its restore: SQLite through the online
backup API (a consistent snapshot while the workers keep writing), PostgreSQL through
`pg_dump` / `pg_restore` (custom format), which the worker and the restoring host need."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Literal

from sqlalchemy import text
from sqlalchemy.engine import make_url

from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database

DatabaseKind = Literal["sqlite", "postgresql"]
FILE_NAMES: dict[DatabaseKind, str] = {"sqlite": "app.db", "postgresql": "app.pgdump"}


class DumpToolMissingError(RuntimeError):
    """pg_dump / pg_restore is not installed, or older than the server: no retry can help."""


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


async def check_dump_tools(settings: Settings) -> None:
    """On PostgreSQL, DumpToolMissingError (one line) unless pg_dump and pg_restore are on PATH
    with a major version at least the server's: pg_dump refuses a newer server, so the
    maintenance pool's backups would fail every night. SQLite needs neither."""
    if make_url(settings.resolved_database_url).get_backend_name() != "postgresql":
        return
    db = await Database.open(settings, migrate=False)
    try:
        async with db.sessions() as s:
            server = _major(int((await s.execute(text("SHOW server_version_num"))).scalar_one()))
    finally:
        await db.close()
    need = _label(server)
    missing, old = [], []
    for tool in ("pg_dump", "pg_restore"):
        exe = shutil.which(tool)
        if exe is None:
            missing.append(tool)
        elif (major := await _tool_major(exe, settings)) < server:
            old.append(f"{tool} {_label(major)}")
    problems = []
    if missing:
        problems.append(f"{' and '.join(missing)} {_is(missing)} not installed (not on PATH)")
    if old:
        problems.append(f"{' and '.join(old)} {_is(old)} older than the PostgreSQL server ({need})")
    if problems:
        raise DumpToolMissingError(
            f"{' and '.join(problems)}: install postgresql-client-{need} or newer (Debian, "
            f"Ubuntu), or put a pg_dump and pg_restore of major {need} or newer first on PATH; "
            "the maintenance pool's backups run them"
        )


def _is(names: list[str]) -> str:
    return "is" if len(names) == 1 else "are"


# A major version: (16,) from 10 on, (9, 6) before (when the major had two parts).
Major = tuple[int, ...]


def _major(version_num: int) -> Major:
    """From server_version_num's form: 160006 -> (16,), 90624 -> (9, 6)."""
    return (version_num // 10000,) if version_num >= 100000 else divmod(version_num // 100, 100)


def _label(major: Major) -> str:
    return ".".join(map(str, major))


async def _tool_major(exe: str, settings: Settings) -> Major:
    """`exe --version`'s major ("pg_dump (PostgreSQL) 17.2 (Debian 17.2-1)" -> (17,)), run as
    a dump runs it: Debian's wrapper picks the version by the environment."""
    proc = await asyncio.create_subprocess_exec(
        exe,
        "--version",
        env=_pg_env(settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out = (await proc.communicate())[0].decode(errors="replace").strip()
    found = re.search(r"\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?", out)
    if proc.returncode != 0 or found is None:
        raise DumpToolMissingError(
            f"{exe} --version did not report a PostgreSQL version (exit {proc.returncode}: "
            f"{out[-200:]!r}); install the PostgreSQL client tools (postgresql-client)"
        )
    first = int(found[1])
    return (first,) if first >= 10 else (first, int(found[2] or 0))


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
