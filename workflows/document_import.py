"""DOCUMENT_IMPORT: parse -> chunk (into storage) -> embed + upsert into Qdrant.

Only ids and counts pass through the workflow; text and vectors stay in storage. Progress is
kept in the memo (readable with no worker running) and served by the `progress` query; the
embed activity's heartbeat carries the chunk-level checkpoint.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from workflows.task_events import emit, emit_started

with workflow.unsafe.imports_passed_through():
    from knowledgeops.errors import failure_text
    from knowledgeops.events import EventType
    from knowledgeops.models import (
        DeleteDocumentRequest,
        DocumentImportPayload,
        DocumentImportResult,
        EmbedRequest,
        EmbedResult,
        ImportProgress,
        ParseRequest,
        ParseResult,
    )
    from knowledgeops.task_types import TaskType, activity_spec


def _options(name: str, **extra: Any) -> dict[str, Any]:
    spec = activity_spec(TaskType.DOCUMENT_IMPORT, name)
    return {
        "start_to_close_timeout": spec.start_to_close,
        "heartbeat_timeout": spec.heartbeat_timeout,
        "retry_policy": spec.retry_policy,
        **extra,
    }


@workflow.defn(name="DocumentImport")
class DocumentImportWorkflow:
    def __init__(self) -> None:
        self._progress = ImportProgress(stage="pending")
        self._cleared: dict[str, bool] = {}

    def _stage(self, stage: str, total: int | None = None) -> None:
        self._progress.stage = stage
        if total is not None:
            self._progress.total_chunks = total
        workflow.upsert_memo({"stage": stage, "total_chunks": self._progress.total_chunks})

    @workflow.query
    def progress(self) -> ImportProgress:
        return self._progress

    @workflow.run
    async def run(self, payload: DocumentImportPayload) -> DocumentImportResult:
        about = {"document_id": payload.document_id, "filename": payload.filename}
        # The first event carries what the document catalogue lists (see the database).
        listing = about | {"file_id": payload.file_id, **payload.metadata.model_dump()}
        await emit_started(TaskType.DOCUMENT_IMPORT, about, listing)
        try:
            result = await self._import(payload)
        except (asyncio.CancelledError, ActivityError) as e:
            if is_cancelled_exception(e):
                await emit(
                    TaskType.DOCUMENT_IMPORT, EventType.TASK_CANCELLED, about | self._cleared
                )
                raise
            await emit(
                TaskType.DOCUMENT_IMPORT,
                EventType.TASK_FAILED,
                about | self._cleared,
                error=failure_text(e),
            )
            raise
        await emit(TaskType.DOCUMENT_IMPORT, EventType.TASK_COMPLETED, result.model_dump())
        return result

    async def _import(self, payload: DocumentImportPayload) -> DocumentImportResult:
        self._stage("parsing")
        parsed: ParseResult = await workflow.execute_activity(
            "parse_document",
            ParseRequest(
                file_id=payload.file_id,
                document_id=payload.document_id,
                filename=payload.filename,
                chunking=payload.chunking,
            ),
            result_type=ParseResult,
            **_options("parse_document"),
        )
        # Nothing was written to the index yet: a bad file leaves an existing document intact.
        self._stage("embedding", parsed.total_chunks)
        try:
            embedded: EmbedResult = await workflow.execute_activity(
                "embed_and_upsert",
                EmbedRequest(
                    document_id=payload.document_id,
                    total_chunks=parsed.total_chunks,
                    batch_size=payload.embed_batch_size,
                ),
                result_type=EmbedResult,
                # Wait for the activity to really stop before cleaning up behind it.
                **_options(
                    "embed_and_upsert",
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                ),
            )
        except (asyncio.CancelledError, ActivityError):
            # Never leave half a document searchable: remove what this import wrote.
            self._stage("cleaning up")
            self._cleared = {"index_cleared": True}
            await workflow.execute_activity(
                "delete_document_points",
                DeleteDocumentRequest(document_id=payload.document_id),
                result_type=int,
                **_options("delete_document_points"),
            )
            raise
        self._progress.processed_chunks = parsed.total_chunks
        self._stage("completed")
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
