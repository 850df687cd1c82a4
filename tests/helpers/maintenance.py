"""What the maintenance tests share: starting a backup or a cleanup and waiting for it, an
imported document and its stored file's id, the `knowledgeops` CLI as a process, an empty
database to restore into."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.cleanup import CleanupPlan
from knowledgeops.files import file_store
from knowledgeops.registry.task_types import TaskType
from starter.services.task_models import TaskStatus
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


async def imported(env: Env, path: Path, document_id: str) -> TaskStatus:
    ref = await env.documents.import_file(path, document_id=document_id)
    st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "completed", st.last_error
    return st


def file_id_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() + file_store.safe_extension(path.name)


async def cleanup(env: Env, **payload: object) -> tuple[TaskStatus, CleanupPlan]:
    ref = await env.service.enqueue(TaskType.CLEANUP_EXECUTE, {"grace_minutes": 0, **payload})
    st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "completed", st.last_error
    assert st.result is not None
    text = await asyncio.to_thread(Path(st.result["plan_path"]).read_text)
    return st, CleanupPlan.model_validate_json(text)
