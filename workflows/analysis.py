"""AI_ANALYSIS: plan, then diagnose the document or check the learner's answer against it.

The plan fixes the method and the chunk groups; a diagnosis that fails or is cancelled has its
stored partial results removed. Only ids, counts, the verdict and token usage pass through the
workflow; the analysis is the task's stored output.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.analysis import (
        CHECK_ANSWER,
        DIAGNOSE_DOCUMENT,
        DISCARD_ANALYSIS_WORK,
        PLAN_ANALYSIS,
        AiAnalysisPayload,
        AiAnalysisResult,
        AnalysisRequest,
        AnalysisStep,
    )
    from knowledgeops.registry.task_types import TaskType


@workflow.defn(name="AiAnalysis")
class AiAnalysisWorkflow(TaskWorkflow[AiAnalysisPayload, AiAnalysisResult]):
    task_type = TaskType.AI_ANALYSIS

    @workflow.run
    async def run(self, payload: AiAnalysisPayload) -> AiAnalysisResult:
        return await self.run_task(payload)

    def event_data(self, payload: AiAnalysisPayload) -> dict[str, Any]:
        return {"document_id": payload.document_id, "mode": payload.mode}

    async def steps(self, payload: AiAnalysisPayload) -> AiAnalysisResult:
        task_id = workflow.info().workflow_id
        request = AnalysisRequest(
            task_id=task_id,
            document_id=payload.document_id,
            mode=payload.mode,
            method=payload.method,
            question=payload.question,
            answer=payload.answer,
        )
        self.stage("planning")
        planned = await self.activity(PLAN_ANALYSIS, request)
        step = AnalysisStep(request=request, method=planned.method, plan=planned.plan)
        groups = len(planned.plan.starts)
        if payload.mode == "answer":
            self.stage("checking", total=1, done=0)
            done = await self.activity(CHECK_ANSWER, step)
        else:
            self.on_failure("work_discarded", lambda: self.activity(DISCARD_ANALYSIS_WORK, task_id))
            # Heartbeats refine `done` (groups diagnosed) while this runs.
            self.stage("diagnosing", total=groups, done=0)
            done = await self.activity(DIAGNOSE_DOCUMENT, step)
        return AiAnalysisResult(
            document_id=payload.document_id,
            mode=payload.mode,
            method=done.method,
            usage=done.usage,
            chunks=planned.plan.chunks,
            groups=groups,
            verdict=done.verdict,
            difficulty=done.difficulty,
            concepts=done.concepts,
            gaps=done.gaps,
            citations=done.citations,
            output_url=f"/v1/tasks/{task_id}/output",
        )
