"""DOCUMENT_DELETE: stop the import, then points, chunks, the catalogue row and the file.

The document was hidden from search when the delete was asked for (see the contract); this
workflow makes the removal complete, retrying each step until it is done.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.document_delete import (
        DELETE_DOCUMENT_CHUNKS,
        DELETE_DOCUMENT_POINTS,
        REMOVE_DOCUMENT,
        STOP_IMPORT,
        DocumentDeletePayload,
        DocumentDeleteResult,
        DocumentRef,
        RemoveDocumentRequest,
        StopImportRequest,
    )
    from knowledgeops.registry.task_types import TaskType


@workflow.defn(name="DocumentDelete")
class DocumentDeleteWorkflow(TaskWorkflow[DocumentDeletePayload, DocumentDeleteResult]):
    task_type = TaskType.DOCUMENT_DELETE

    @workflow.run
    async def run(self, payload: DocumentDeletePayload) -> DocumentDeleteResult:
        return await self.run_task(payload)

    def event_data(self, payload: DocumentDeletePayload) -> dict[str, Any]:
        return {"document_id": payload.document_id, "owner": payload.owner}

    async def steps(self, payload: DocumentDeletePayload) -> DocumentDeleteResult:
        doc = DocumentRef(document_id=payload.document_id)
        self.stage("stopping its import", total=4, done=0)
        # Before anything is deleted: a running import would write points and chunks again.
        stopped = await self.activity(
            STOP_IMPORT,
            StopImportRequest(
                import_task_id=payload.import_task_id, document_id=payload.document_id
            ),
        )
        cancelled = payload.import_running and stopped.status == "cancelled"
        self.stage("deleting points", done=1)
        points = await self.activity(DELETE_DOCUMENT_POINTS, doc)
        self.stage("deleting chunks", done=2)
        await self.activity(DELETE_DOCUMENT_CHUNKS, doc)
        self.stage("removing the document", done=3)
        removed = await self.activity(
            REMOVE_DOCUMENT,
            RemoveDocumentRequest(
                document_id=payload.document_id,
                file_id=payload.file_id,
                task_id=workflow.info().workflow_id,
                import_task_id=payload.import_task_id,
                actor=payload.actor,
                reason=payload.reason,
                points_removed=points,
            ),
        )
        self.stage("removing the document", done=4)
        return DocumentDeleteResult(
            document_id=payload.document_id,
            import_cancelled=cancelled,
            points_removed=points,
            file_removed=removed.file_removed,
        )
