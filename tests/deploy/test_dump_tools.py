"""A maintenance worker on PostgreSQL checks at start that its backups can run: pg_dump and
pg_restore on PATH, of a major at least the server's (pg_dump refuses a newer server). If not,
`knowledgeops worker --pool maintenance` stops before anything starts: exit 1, one line on
stderr saying what to install. On SQLite nothing is checked. The PostgreSQL cases need
KNOWLEDGEOPS_TEST_POSTGRES_URL (CI's PostgreSQL pass)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text

from knowledgeops.backup.database_dump import check_dump_tools
from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database, migrate_to_head
from starter.dev_server import free_port
from tests.helpers.environment import PG_URL, ROOT, HermeticSettings, fresh_database, settings_env

needs_postgres = pytest.mark.skipif(
    not PG_URL,
    reason="KNOWLEDGEOPS_TEST_POSTGRES_URL is not set (CI's PostgreSQL pass sets it): the "
    "client tools are checked against a PostgreSQL server",
)


@pytest.fixture
async def pg_settings(tmp_path: Path) -> AsyncIterator[Settings]:
    """A migrated database of the test's own; Temporal on a closed port: the check comes
    before the worker reaches it."""
    async with fresh_database("ko_dump_tools") as url:
        await migrate_to_head(url)
        yield HermeticSettings(
            DATABASE_URL=url,
            KNOWLEDGEOPS_DATA_DIR=tmp_path / "data",
            TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}",
        )


async def server_major(settings: Settings) -> int:
    db = await Database.open(settings, migrate=False)
    try:
        async with db.sessions() as s:
            return int((await s.execute(text("SHOW server_version_num"))).scalar_one()) // 10000
    finally:
        await db.close()


def maintenance_worker(settings: Settings, path: str) -> subprocess.CompletedProcess[str]:
    """`knowledgeops worker --no-api --pool maintenance` with this PATH."""
    return subprocess.run(
        [sys.executable, "-m", "starter.cli.main", "worker", "--no-api", "--pool", "maintenance"],
        cwd=ROOT,
        env=settings_env(settings) | {"PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


def bin_dir(tmp_path: Path, **versions: str) -> Path:
    """A folder of executables that print `pg_dump (PostgreSQL) VERSION`, as the real ones do."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for tool, version in versions.items():
        exe = folder / tool
        exe.write_text(f"#!/bin/sh\necho '{tool} (PostgreSQL) {version}'\n")
        exe.chmod(0o755)
    return folder


@needs_postgres
async def test_without_pg_dump_the_worker_stops_saying_what_to_install(
    pg_settings: Settings, tmp_path: Path
) -> None:
    major = await server_major(pg_settings)
    done = maintenance_worker(pg_settings, str(bin_dir(tmp_path)))  # neither tool on PATH
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines() == [
        f"error: pg_dump and pg_restore are not installed (not on PATH): install "
        f"postgresql-client-{major} or newer (Debian, Ubuntu), or put a pg_dump and pg_restore "
        f"of major {major} or newer first on PATH; the maintenance pool's backups run them"
    ], done.stderr


@needs_postgres
async def test_an_older_pg_dump_stops_the_worker_naming_both_versions(
    pg_settings: Settings, tmp_path: Path
) -> None:
    major = await server_major(pg_settings)
    # First on PATH, before the machine's own tools (its pg_restore is found there).
    path = f"{bin_dir(tmp_path, pg_dump='9.6.24')}{os.pathsep}{os.environ['PATH']}"
    done = maintenance_worker(pg_settings, path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"pg_dump 9.6 is older than the PostgreSQL server ({major})" in lines[0]
    assert f"install postgresql-client-{major} or newer" in lines[0]


@needs_postgres
async def test_tools_as_new_as_the_server_pass(
    pg_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The machine's own tools (CI installs the server's Debian package, which brings its client).
    await check_dump_tools(pg_settings)
    major = await server_major(pg_settings)
    newer = bin_dir(tmp_path, pg_dump=f"{major + 1}.0", pg_restore=f"{major}.2 (Debian)")
    monkeypatch.setenv("PATH", str(newer))
    await check_dump_tools(pg_settings)


async def test_on_sqlite_nothing_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(bin_dir(tmp_path)))  # neither tool
    await check_dump_tools(HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path / "data"))
