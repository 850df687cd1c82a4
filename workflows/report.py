"""REPORT_GENERATE: collect the period's figures, then render and publish the report.

The time range is fixed here from the workflow's clock (a replay sees the same range); the
report id is the task id, so a manual retry of the task replaces its report instead of adding
a second one. Only the id, the range and headline numbers pass through the workflow.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.report import (
        COLLECT_REPORT_DATA,
        DISCARD_REPORT_WORK,
        RENDER_REPORT,
        CollectRequest,
        RenderRequest,
        ReportGeneratePayload,
        ReportResult,
    )
    from knowledgeops.registry.task_types import TaskType


@workflow.defn(name="ReportGenerate")
class ReportGenerateWorkflow(TaskWorkflow[ReportGeneratePayload, ReportResult]):
    task_type = TaskType.REPORT_GENERATE

    @workflow.run
    async def run(self, payload: ReportGeneratePayload) -> ReportResult:
        return await self.run_task(payload)

    def event_data(self, payload: ReportGeneratePayload) -> dict[str, Any]:
        return {"report_id": workflow.info().workflow_id}

    async def steps(self, payload: ReportGeneratePayload) -> ReportResult:
        report_id = workflow.info().workflow_id
        since, until = payload.time_range(workflow.now())
        self.on_failure(
            "work_discarded",
            lambda: self.activity(DISCARD_REPORT_WORK, RenderRequest(report_id=report_id)),
        )
        self.stage("collecting", total=2, done=0)
        collected = await self.activity(
            COLLECT_REPORT_DATA,
            CollectRequest(
                report_id=report_id,
                since=since,
                until=until,
                top_failures=payload.top_failures,
                title=payload.title,
            ),
        )
        self.stage("rendering", done=1)
        rendered = await self.activity(RENDER_REPORT, RenderRequest(report_id=report_id))
        return ReportResult(
            report_id=report_id,
            since=since,
            until=until,
            html_path=rendered.html_path,
            json_path=rendered.json_path,
            html_url=f"/v1/reports/{report_id}.html",
            json_url=f"/v1/reports/{report_id}.json",
            headline=collected.headline,
        )
