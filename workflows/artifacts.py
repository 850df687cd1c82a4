"""GENERATE_ARTIFACT: plan the document's chunk groups, map each group, reduce to the artifact.

The method (chat model or a local method) and the group bounds are fixed by the plan, so every
retry maps the same groups the same way. Only ids, bounds, counts and token usage pass through
the workflow; the artifact is the task's stored output.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.artifacts import (
        DISCARD_ARTIFACT_WORK,
        MAP_ARTIFACT,
        PLAN_ARTIFACT,
        REDUCE_ARTIFACT,
        ArtifactRequest,
        ArtifactStep,
        GenerateArtifactPayload,
        GenerateArtifactResult,
    )
    from knowledgeops.registry.task_types import TaskType


@workflow.defn(name="GenerateArtifact")
class GenerateArtifactWorkflow(TaskWorkflow[GenerateArtifactPayload, GenerateArtifactResult]):
    task_type = TaskType.GENERATE_ARTIFACT

    @workflow.run
    async def run(self, payload: GenerateArtifactPayload) -> GenerateArtifactResult:
        return await self.run_task(payload)

    def event_data(self, payload: GenerateArtifactPayload) -> dict[str, Any]:
        return {"document_id": payload.document_id, "kind": payload.kind}

    async def steps(self, payload: GenerateArtifactPayload) -> GenerateArtifactResult:
        task_id = workflow.info().workflow_id
        request = ArtifactRequest(
            task_id=task_id,
            document_id=payload.document_id,
            kind=payload.kind,
            method=payload.method,
            max_items=payload.max_items,
        )
        self.stage("planning")
        planned = await self.activity(PLAN_ARTIFACT, request)
        step = ArtifactStep(request=request, method=planned.method, plan=planned.plan)
        groups = len(planned.plan.starts)
        self.on_failure("work_discarded", lambda: self.activity(DISCARD_ARTIFACT_WORK, task_id))
        # Heartbeats refine `done` (groups with a stored partial result) while this runs.
        self.stage("reading", total=groups, done=0)
        await self.activity(MAP_ARTIFACT, step)
        self.stage("combining", done=groups)
        done = await self.activity(REDUCE_ARTIFACT, step)
        return GenerateArtifactResult(
            document_id=payload.document_id,
            kind=payload.kind,
            method=done.method,
            usage=done.usage,
            chunks=planned.plan.chunks,
            groups=groups,
            items=done.items,
            output_url=f"/v1/tasks/{task_id}/output",
        )
