"""DOCUMENT_IMPORT: parse -> chunk (into storage) -> embed + upsert into Qdrant.

Only ids and counts pass through the workflow; text and vectors stay in storage. The embed
activity's heartbeat carries the chunk-level checkpoint a retry resumes from.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.document_import import (
        DELETE_DOCUMENT_POINTS,
        EMBED_AND_UPSERT,
        PARSE_DOCUMENT,
        DeleteDocumentRequest,
        DocumentImportPayload,
        DocumentImportResult,
        EmbedRequest,
        ParseRequest,
    )
    from knowledgeops.task_types import TaskType


@workflow.defn(name="DocumentImport")
class DocumentImportWorkflow(TaskWorkflow[DocumentImportPayload, DocumentImportResult]):
    task_type = TaskType.DOCUMENT_IMPORT

    @workflow.run
    async def run(self, payload: DocumentImportPayload) -> DocumentImportResult:
        return await self.run_task(payload)

    def event_data(self, payload: DocumentImportPayload) -> dict[str, Any]:
        return {"document_id": payload.document_id, "filename": payload.filename}

    def first_event_data(self, payload: DocumentImportPayload) -> dict[str, Any]:
        # What the document catalogue lists (its projection of this event).
        return self.event_data(payload) | {
            "file_id": payload.file_id,
            **payload.metadata.model_dump(),
        }

    async def steps(self, payload: DocumentImportPayload) -> DocumentImportResult:
        self.stage("parsing")
        parsed = await self.activity(
            PARSE_DOCUMENT,
            ParseRequest(
                file_id=payload.file_id,
                document_id=payload.document_id,
                filename=payload.filename,
                chunking=payload.chunking,
            ),
        )
        # Nothing was written to the index yet: a bad file leaves an existing document intact.
        # From here on, never leave half a document searchable: remove what this import wrote.
        self.on_failure(
            "index_cleared",
            lambda: self.activity(
                DELETE_DOCUMENT_POINTS, DeleteDocumentRequest(document_id=payload.document_id)
            ),
        )
        self.stage("embedding", total=parsed.total_chunks)
        embedded = await self.activity(
            EMBED_AND_UPSERT,
            EmbedRequest(
                document_id=payload.document_id,
                total_chunks=parsed.total_chunks,
                batch_size=payload.embed_batch_size,
            ),
        )
        return DocumentImportResult(
            document_id=payload.document_id,
            format=parsed.format,
            total_chunks=parsed.total_chunks,
            embedded=embedded.embedded,
            reused=embedded.reused,
            stale_removed=embedded.stale_removed,
            pages=parsed.pages,
            title=payload.metadata.title or parsed.title,
        )
