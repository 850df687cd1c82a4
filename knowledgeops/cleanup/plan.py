"""The plan file between listing and removal: where it lives, writing it, and reading it back
only if it is this data directory's and still lists as many items as the removal was told."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.cleanup import CleanupPlan
from knowledgeops.errors import bad_input
from knowledgeops.files.file_store import write_atomically


def plan_path(settings: Settings, task_id: str) -> Path:
    return settings.data_dir / "cleanup" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', task_id)}.json"


async def write_plan(settings: Settings, plan: CleanupPlan) -> Path:
    path = plan_path(settings, plan.task_id)
    await asyncio.to_thread(write_atomically, path, plan.model_dump_json(indent=1).encode())
    return path


async def read_plan(settings: Settings, plan_file: str, items: int) -> CleanupPlan:
    path = Path(plan_file)
    if path.parent != plan_path(settings, "x").parent:
        raise bad_input("InvalidPlan", f"{path} is not a cleanup plan of this data directory")
    try:
        plan = CleanupPlan.model_validate_json(await asyncio.to_thread(path.read_text))
    except FileNotFoundError:
        raise bad_input(
            "PlanMissing", f"no cleanup plan at {path}; run the cleanup again"
        ) from None
    if len(plan.items) != items:
        raise bad_input(
            "PlanChanged",
            f"{path} lists {len(plan.items)} items, not {items}; run the cleanup again",
        )
    return plan
