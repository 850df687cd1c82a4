"""VISION_ANALYZE: one activity reads the image (or renders the PDF page) from storage,
analyses it and stores the analysis under the task id; only the result's few fields return."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.vision import (
        ANALYZE_IMAGE,
        AnalyzeRequest,
        VisionAnalyzePayload,
        VisionResult,
    )
    from knowledgeops.registry.task_types import TaskType


@workflow.defn(name="VisionAnalyze")
class VisionAnalyzeWorkflow(TaskWorkflow[VisionAnalyzePayload, VisionResult]):
    task_type = TaskType.VISION_ANALYZE

    @workflow.run
    async def run(self, payload: VisionAnalyzePayload) -> VisionResult:
        return await self.run_task(payload)

    def event_data(self, payload: VisionAnalyzePayload) -> dict[str, Any]:
        about = {"file_id": payload.file_id, "document_id": payload.document_id}
        return {k: v for k, v in about.items() if v is not None} | {"page": payload.page}

    async def steps(self, payload: VisionAnalyzePayload) -> VisionResult:
        self.stage("analysing", total=1, done=0)
        return await self.activity(
            ANALYZE_IMAGE,
            AnalyzeRequest(
                output_id=workflow.info().workflow_id,
                file_id=payload.file_id,
                document_id=payload.document_id,
                page=payload.page,
                instruction=payload.instruction,
            ),
        )
