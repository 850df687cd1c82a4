"""CLEANUP_EXECUTE: find what nothing needs any more, then (unless a dry run) remove it.

Finding and removing are separate activities: the list is written to storage by the first
(it can be long) and the second removes exactly that list, heartbeating its position in it, so
a crashed removal resumes where it stopped.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.cleanup import (
        FIND_ORPHANS,
        REMOVE_ORPHANS,
        CleanupExecutePayload,
        CleanupResult,
        FindOrphansRequest,
        KindTotals,
        RemoveOrphansRequest,
    )
    from knowledgeops.registry.task_types import TaskType


@workflow.defn(name="CleanupExecute")
class CleanupWorkflow(TaskWorkflow[CleanupExecutePayload, CleanupResult]):
    task_type = TaskType.CLEANUP_EXECUTE

    @workflow.run
    async def run(self, payload: CleanupExecutePayload) -> CleanupResult:
        return await self.run_task(payload)

    def event_data(self, payload: CleanupExecutePayload) -> dict[str, Any]:
        return {"dry_run": payload.dry_run}

    async def steps(self, payload: CleanupExecutePayload) -> CleanupResult:
        self.stage("finding")
        found = await self.activity(
            FIND_ORPHANS,
            FindOrphansRequest(
                task_id=workflow.info().workflow_id,
                dry_run=payload.dry_run,
                grace_minutes=payload.grace_minutes,
                kinds=payload.kinds,
            ),
        )
        removed: dict[str, KindTotals] = {}
        skipped: dict[str, KindTotals] = {}
        if not payload.dry_run and found.items:
            self.stage("removing", total=found.items, done=0)
            out = await self.activity(
                REMOVE_ORPHANS, RemoveOrphansRequest(plan_path=found.plan_path, items=found.items)
            )
            removed, skipped = out.removed, out.skipped
        else:
            self.stage("listed", total=found.items, done=found.items)
        return CleanupResult(
            dry_run=payload.dry_run,
            plan_path=found.plan_path,
            found=found.found,
            removed=removed,
            skipped=skipped,
            found_items=found.items,
            found_bytes=sum(t.bytes for t in found.found.values()),
            removed_items=sum(t.items for t in removed.values()),
            removed_bytes=sum(t.bytes for t in removed.values()),
        )
