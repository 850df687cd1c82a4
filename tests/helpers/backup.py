"""What the backup tests share: starting a backup and waiting for it, the `knowledgeops` CLI
as a process, an empty database to restore into."""

from __future__ import annotations

import subprocess
import sys
from contextlib import AbstractAsyncContextManager
from typing import Any

from knowledgeops.config.settings import Settings
from tests.helpers.environment import ROOT, Env, fresh_database, settings_env

WAIT = 90.0


def cli(args: list[str], settings: Settings) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starter.cli.main", *args],
        cwd=ROOT,
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )


async def backup(env: Env, **payload: Any) -> dict[str, Any]:
    ref = await env.service.enqueue("BACKUP_EXECUTE", payload)
    st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "completed", st.last_error
    assert st.result is not None
    return st.result


def empty_database(settings: Settings) -> AbstractAsyncContextManager[str]:
    """A database URL with nothing in it: SQLite under a new data dir, or a new PostgreSQL db."""
    return fresh_database("ko_restore")
