"""Stored outputs of tasks: what a task produced that is too large for Temporal.

A workflow's result stays small (counts, ids, token usage); an activity writes the full output
(a summary, a quiz, review cards, an agent transcript) here, keyed by the task id, and the
result names it. `GET /v1/tasks/{task_id}/output` serves it. One JSON file per task, written
atomically, so a reader sees the previous complete output or the new one, never half of one.
Task ids are checked against a pattern with no path separator before they touch the disk.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from knowledgeops.stores.file_store import write_atomically

_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")


class OutputNotFoundError(LookupError):
    pass


class OutputStore:
    def __init__(self, outputs_dir: Path) -> None:
        self.root = outputs_dir

    def path(self, task_id: str) -> Path:
        if not _TASK_ID.fullmatch(task_id):
            raise OutputNotFoundError(
                f"{task_id!r} is not a task id (letters, digits and _.:- only)"
            )
        return self.root / f"{task_id}.json"

    def save(self, task_id: str, output: BaseModel) -> str:
        """Write (or overwrite: a retry produces the same output) and return the output id."""
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path(task_id), output.model_dump_json().encode())
        return task_id

    def load(self, task_id: str) -> dict[str, Any]:
        path = self.path(task_id)
        try:
            data: dict[str, Any] = json.loads(path.read_bytes())
        except FileNotFoundError:
            raise OutputNotFoundError(
                f"task {task_id} has no stored output (yet): it may still be running, may "
                "have failed, or its type stores none"
            ) from None
        return data

    def delete(self, task_id: str) -> bool:
        path = self.path(task_id)
        existed = path.exists()
        path.unlink(missing_ok=True)
        return existed
