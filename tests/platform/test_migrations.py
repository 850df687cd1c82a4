"""Who migrates the application database: `knowledgeops db upgrade` / `db current` as an operator
runs them; the embedded SQLite database migrated by a process's start; a database server's only
checked by it (the API and the workers refuse to start, one line on stderr, until `db upgrade`
has run). The PostgreSQL cases need KNOWLEDGEOPS_TEST_POSTGRES_URL (CI's PostgreSQL pass)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config

from knowledgeops.config.settings import Settings
from knowledgeops.db.audit import AuditLog
from knowledgeops.db.database import MIGRATIONS_DIR, Database, prepare_schema
from knowledgeops.db.migrations import SchemaNotAtHeadError, read_revision
from tests.helpers.environment import PG_URL, ROOT, HermeticSettings, fresh_database, settings_env

UPGRADE = "`knowledgeops db upgrade`"


def run(args: list[str], settings: Settings) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, env=settings_env(settings), capture_output=True, text=True, timeout=120
    )


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "starter.cli.main", *args], settings)


def sqlite_settings(tmp_path: Path) -> Settings:
    return HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path / "data")


async def test_db_upgrade_then_current_on_sqlite(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path)
    head = (await read_revision(settings.resolved_database_url)).head

    empty = cli(settings, "db", "current")
    assert empty.returncode == 1, empty.stderr
    assert f"current:  none (an empty database; the head is {head})" in empty.stdout
    assert not (tmp_path / "data").exists()  # reading the revision creates nothing

    up = cli(settings, "db", "upgrade")
    assert up.returncode == 0, up.stderr
    assert "before:   none (an empty database" in up.stdout
    assert f"after:    {head} (head)" in up.stdout
    current = cli(settings, "db", "current")
    assert current.returncode == 0, current.stderr
    assert f"current:  {head} (head)" in current.stdout

    # A database of the previous release: behind, and `db upgrade` brings it to head.
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", settings.resolved_database_url)
    await asyncio.to_thread(command.downgrade, cfg, "-1")
    previous = (await read_revision(settings.resolved_database_url)).current
    assert previous is not None and previous != head
    behind = cli(settings, "db", "current")
    assert behind.returncode == 1, behind.stderr
    assert f"current:  {previous} (behind the head, {head})" in behind.stdout
    assert UPGRADE in behind.stdout
    up = cli(settings, "db", "upgrade")
    assert up.returncode == 0, up.stderr
    assert f"before:   {previous} (behind" in up.stdout and f"after:    {head} (head)" in up.stdout


async def test_a_process_start_migrates_the_embedded_database_itself(tmp_path: Path) -> None:
    # `knowledgeops dev` stays one command: its worker's start migrates the SQLite file.
    settings = sqlite_settings(tmp_path)
    await prepare_schema(settings)
    assert (await read_revision(settings.resolved_database_url)).at_head


@pytest.mark.skipif(
    not PG_URL,
    reason="KNOWLEDGEOPS_TEST_POSTGRES_URL is not set (CI's PostgreSQL pass sets it): a "
    "PostgreSQL database is checked, not migrated, by the processes",
)
async def test_a_server_database_is_checked_not_migrated_until_db_upgrade(
    tmp_path: Path,
) -> None:
    async with fresh_database("ko_migrations") as url:
        settings = HermeticSettings(DATABASE_URL=url, KNOWLEDGEOPS_DATA_DIR=tmp_path / "data")

        with pytest.raises(SchemaNotAtHeadError) as refused:
            await prepare_schema(settings)  # what the worker and the API run first
        assert UPGRADE in str(refused.value) and "\n" not in str(refused.value)
        # The processes themselves: exit 1, one line on stderr, before Temporal is reached
        # (none runs at TEMPORAL_ADDRESS here).
        for process in (
            [sys.executable, "worker.py", "--no-api"],
            [sys.executable, "-m", "starter.cli.main", "api"],
        ):
            r = run(process, settings)
            assert r.returncode == 1, (process, r.stdout, r.stderr)
            assert r.stderr.strip().splitlines() == [f"error: {refused.value}"], r.stderr
        assert (await read_revision(url)).current is None  # nobody migrated it
        assert cli(settings, "db", "current").returncode == 1

        up = cli(settings, "db", "upgrade")
        assert up.returncode == 0, up.stderr
        current = cli(settings, "db", "current")
        assert current.returncode == 0 and "(head)" in current.stdout, current.stdout
        await prepare_schema(settings)
        db = await Database.open(settings, migrate=False)  # as the processes open it then
        try:
            assert await AuditLog(db).records() == []
        finally:
            await db.close()
