"""Stored outputs of tasks: what a task produced that is too large for Temporal.

A workflow's result stays small (counts, ids, token usage); an activity writes the full output
(a summary, a quiz, review cards, an agent transcript) here, keyed by the task id, and the
result names it. `GET /v1/tasks/{task_id}/output` serves it. One JSON object per task, key
`outputs/<task id>.json` in the store (with STORAGE_URL empty: that file of the data folder),
written whole, so a reader sees the previous complete output or the new one, never half of
one. Task ids are checked against a pattern with no path separator before they name a key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from knowledgeops.storage.local import LocalStore
from knowledgeops.storage.store import Store, StoredObjectMissing, check_prefix

_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
PREFIX = "outputs"


class OutputNotFoundError(LookupError):
    pass


def check_task_id(task_id: str) -> str:
    if not _TASK_ID.fullmatch(task_id):
        raise OutputNotFoundError(f"{task_id!r} is not a task id (letters, digits and _.:- only)")
    return task_id


class OutputStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def key(self, task_id: str) -> str:
        return f"{PREFIX}/{check_task_id(task_id)}.json"

    async def save(self, task_id: str, output: BaseModel) -> str:
        """Write (or overwrite: a retry produces the same output) and return the output id."""
        key = self.key(task_id)
        # Serialised in a thread: an agent transcript can be megabytes, and heartbeats wait.
        data = await asyncio.to_thread(output.model_dump_json)
        await self.store.put(key, data.encode())
        return task_id

    async def load(self, task_id: str) -> dict[str, Any]:
        key = self.key(task_id)
        try:
            raw = await self.store.get(key)
        except StoredObjectMissing:
            raise OutputNotFoundError(
                f"task {task_id} has no stored output (yet): it may still be running, may "
                f"have failed, or its type stores none (looked for {key} in "
                f"{self.store.describe()})"
            ) from None
        data: dict[str, Any] = await asyncio.to_thread(json.loads, raw)
        return data

    async def delete(self, task_id: str) -> bool:
        key = self.key(task_id)
        existed = await self.store.exists(key)
        await self.store.delete(key)
        return existed


# Where earlier versions kept a task's working files, in the data folder: a name starting with
# "." is no store key, so they moved to a `work/` folder.
LEGACY_WORK = ".work"


class WorkFiles:
    """A task's working files (map-reduce partial results, a report's data and charts), under
    `prefix` in the store, while the task runs; and, for a task begun before an upgrade, its
    earlier files in `legacy` (a data-folder path), read while it finishes, removed with it."""

    def __init__(self, store: Store, prefix: str, legacy: Path | None) -> None:
        self.store = store
        self.prefix = prefix
        self.legacy = legacy

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    async def save(self, name: str, data: bytes) -> None:
        await self.store.put(self.key(name), data)

    async def load(self, name: str) -> bytes | None:
        """The file from the store, else from where an earlier version kept it; None if it is
        in neither."""
        try:
            return await self.store.get(self.key(name))
        except StoredObjectMissing:
            if self.legacy is None:
                return None
        return await asyncio.to_thread(_read_local, self.legacy / name)

    async def discard(self) -> int:
        """Remove every working file; returns how many there were."""
        removed = await self.store.delete_prefix(self.prefix)
        if isinstance(self.store, LocalStore):
            # LocalStore leaves emptied folders (a concurrent put may be creating one); nothing
            # writes into a discarded task's folder any more, so it goes too, as it did before
            # the store: the data folder does not fill up with one empty folder per task. Not
            # empty (a late write of a zombie attempt) or already gone: nothing to tidy.
            folder = self.store.root.joinpath(*check_prefix(self.prefix).split("/"))
            with contextlib.suppress(OSError):
                await asyncio.to_thread(folder.rmdir)
        if self.legacy is not None:
            removed += await asyncio.to_thread(_remove_local_folder, self.legacy)
        return removed


def _read_local(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _remove_local_folder(folder: Path) -> int:
    """Remove the folder; returns how many files it held."""
    if not folder.is_dir():
        return 0
    removed = sum(1 for p in folder.iterdir() if p.is_file())
    with contextlib.suppress(FileNotFoundError):  # removed meanwhile (a second discard)
        shutil.rmtree(folder)
    return removed
