"""OCR_PROCESS: inspect the file (format, pages), then recognise it page by page.

Only ids, page numbers and counts pass through the workflow; the text of each page is written
to the OCR store by the recognise activity, whose heartbeat carries the page checkpoint a
retry resumes from. Stored pages are kept if the task fails or is cancelled: each is a
complete, correct result for the file (keyed by its content hash) that a later run rewrites.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.ocr import (
        INSPECT_OCR_INPUT,
        OCR_METHOD,
        RECOGNIZE_PAGES,
        InspectRequest,
        OcrPayload,
        OcrResult,
        RecognizeRequest,
    )
    from knowledgeops.registry.task_types import TaskType


@workflow.defn(name="OcrProcess")
class OcrProcessWorkflow(TaskWorkflow[OcrPayload, OcrResult]):
    task_type = TaskType.OCR_PROCESS

    @workflow.run
    async def run(self, payload: OcrPayload) -> OcrResult:
        return await self.run_task(payload)

    def event_data(self, payload: OcrPayload) -> dict[str, Any]:
        data: dict[str, Any] = {"file_id": payload.file_id, "filename": payload.filename}
        if payload.document_id:
            data["document_id"] = payload.document_id
        return data

    async def steps(self, payload: OcrPayload) -> OcrResult:
        started = workflow.now()
        self.stage("inspecting")
        inspected = await self.activity(
            INSPECT_OCR_INPUT,
            InspectRequest(file_id=payload.file_id, filename=payload.filename, pages=payload.pages),
        )
        self.stage("recognising", total=len(inspected.pages), done=0)
        recognised = await self.activity(
            RECOGNIZE_PAGES,
            RecognizeRequest(
                file_id=payload.file_id,
                filename=payload.filename,
                format=inspected.format,
                pages=inspected.pages,
            ),
        )
        return OcrResult(
            file_id=payload.file_id,
            format=inspected.format,
            pages=inspected.pages,
            characters=recognised.characters,
            lines=recognised.lines,
            seconds=round((workflow.now() - started).total_seconds(), 3),
            method=OCR_METHOD,
            location=recognised.location,
            document_id=payload.document_id,
        )
