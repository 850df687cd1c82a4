"""GENERATE_REVIEW_CARD: plan the chunk groups, draft cards group by group, then de-duplicate
and store them with their FSRS state.

The work files are named by the task id (a retried activity resumes from them; a failed or
cancelled task removes them). Cards are stored only by the last step, keyed by their content,
so running the task again never duplicates one.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.review_cards import (
        DISCARD_REVIEW_CARD_WORK,
        DRAFT_REVIEW_CARDS,
        PLAN_REVIEW_CARDS,
        STORE_REVIEW_CARDS,
        DraftCardsRequest,
        GenerateReviewCardPayload,
        PlanCardsRequest,
        ReviewCardResult,
        StoreCardsRequest,
        WorkRequest,
    )
    from knowledgeops.registry.task_types import TaskType


@workflow.defn(name="GenerateReviewCards")
class GenerateReviewCardsWorkflow(TaskWorkflow[GenerateReviewCardPayload, ReviewCardResult]):
    task_type = TaskType.GENERATE_REVIEW_CARD

    @workflow.run
    async def run(self, payload: GenerateReviewCardPayload) -> ReviewCardResult:
        return await self.run_task(payload)

    def event_data(self, payload: GenerateReviewCardPayload) -> dict[str, Any]:
        return {"document_id": payload.document_id}

    async def steps(self, payload: GenerateReviewCardPayload) -> ReviewCardResult:
        work_id = workflow.info().workflow_id
        self.stage("planning")
        plan = await self.activity(
            PLAN_REVIEW_CARDS,
            PlanCardsRequest(
                document_id=payload.document_id,
                start_index=payload.start_index,
                end_index=payload.end_index,
                max_cards=payload.max_cards,
                kinds=payload.kinds,
            ),
        )
        self.on_failure(
            "work_discarded",
            lambda: self.activity(DISCARD_REVIEW_CARD_WORK, WorkRequest(work_id=work_id)),
        )
        groups = len(plan.groups.starts)
        self.stage("drafting", total=groups, done=0)
        drafted = await self.activity(
            DRAFT_REVIEW_CARDS,
            DraftCardsRequest(
                work_id=work_id,
                document_id=payload.document_id,
                groups=plan.groups,
                cards_per_group=plan.cards_per_group,
                kinds=payload.kinds,
                method=plan.method,
            ),
        )
        self.stage("storing", done=groups)
        stored = await self.activity(
            STORE_REVIEW_CARDS,
            StoreCardsRequest(
                work_id=work_id,
                document_id=payload.document_id,
                groups=groups,
                max_cards=payload.max_cards,
                dedup_threshold=payload.dedup_threshold,
                method=plan.method,
            ),
        )
        return ReviewCardResult(
            document_id=payload.document_id,
            start_index=plan.start_index,
            end_index=plan.end_index,
            groups=groups,
            method=plan.method,
            cards_made=stored.made,
            already_stored=stored.already_stored,
            duplicates_removed=stored.duplicates_removed,
            over_limit=stored.over_limit,
            rejected=drafted.rejected,
            usage=drafted.usage,
            output_id=stored.output_id,
            cards_url=f"/v1/documents/{payload.document_id}/cards",
        )
