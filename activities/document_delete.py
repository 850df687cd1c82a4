"""DOCUMENT_DELETE's steps (see knowledgeops/contracts/document_delete.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from activities.support import Heartbeater
from knowledgeops.contracts.document_batch import (
    BATCH_PROGRESS_QUERY,
    BatchProgress,
    DocumentBatchPayload,
    import_task_name,
)
from knowledgeops.contracts.document_delete import (
    DELETE_DOCUMENT_CHUNKS,
    DELETE_DOCUMENT_POINTS,
    REMOVE_DOCUMENT,
    STOP_IMPORT,
    DocumentRef,
    RemovedDocument,
    RemoveDocumentRequest,
    StopImportRequest,
    StoppedImport,
)
from knowledgeops.db.audit import audit_row
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.documents.batch_manifest import position_of
from knowledgeops.documents.removal import remove_document
from knowledgeops.index.live import delete_document_everywhere
from knowledgeops.registry.task_types import REGISTRY, TaskType
from knowledgeops.runtime.resources import Resources

# The batch import's workflow type: a document of it is waited for, the batch not cancelled.
BATCH_WORKFLOW = REGISTRY[TaskType.DOCUMENT_BATCH_IMPORT].workflow_name
# How often the stop step looks whether the import has closed.
STOP_POLL_SECONDS = 0.5


class DocumentDeleteActivities:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings
        self.catalogue = DocumentCatalogue(resources.db)

    @activity.defn(name=STOP_IMPORT.name)
    async def stop_import(self, req: StopImportRequest) -> StoppedImport:
        """Cancel the import if it still runs (the delete request asked already; asking again
        is harmless) and wait until it has closed, its cleanup done. A batch import is not
        cancelled for one of its documents: this waits until the batch is past it (and stops
        the document's own import, which the batch may have started)."""
        handle = activity.client().get_workflow_handle(req.import_task_id)
        try:
            desc = await handle.describe()
            if desc.workflow_type == BATCH_WORKFLOW and req.document_id:
                async with Heartbeater():
                    await self._batch_past(handle, req.document_id)
                own = self.settings.task_id(import_task_name(req.document_id))
                await self.stop_import(StopImportRequest(import_task_id=own))
                desc = await handle.describe()
            elif desc.status == WorkflowExecutionStatus.RUNNING:
                await handle.cancel()
                async with Heartbeater():
                    while desc.status == WorkflowExecutionStatus.RUNNING:
                        await asyncio.sleep(STOP_POLL_SECONDS)
                        desc = await handle.describe()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return StoppedImport(status=None)  # never started, or past its retention
            raise
        status = desc.status or WorkflowExecutionStatus.RUNNING
        # The service's word for Temporal's CANCELED (starter/services/task_queries.py).
        return StoppedImport(
            status="cancelled"
            if status == WorkflowExecutionStatus.CANCELED
            else status.name.lower()
        )

    async def _batch_past(self, handle: WorkflowHandle[Any, Any], document_id: str) -> None:
        """Until the batch has closed, or the group that imports the document has ended: its
        row says `deleting` now, so no group starting later writes the document."""
        payload: DocumentBatchPayload | None = None
        async for event in handle.fetch_history_events(page_size=1):
            started = event.workflow_execution_started_event_attributes
            [raw] = await activity.client().data_converter.decode(started.input.payloads)
            payload = DocumentBatchPayload.model_validate(raw)
            break
        if payload is None:
            return
        at = await position_of(self.resources.files, payload.manifest_id, document_id)
        while at is not None:
            desc = await handle.describe()
            if desc.status != WorkflowExecutionStatus.RUNNING:
                return
            p = await handle.query(BATCH_PROGRESS_QUERY, result_type=BatchProgress)
            if at < p.next and not any(start <= at < end for start, end in p.running_groups):
                return
            await asyncio.sleep(STOP_POLL_SECONDS)

    @activity.defn(name=DELETE_DOCUMENT_POINTS.name)
    async def delete_points(self, req: DocumentRef) -> int:
        async with Heartbeater():
            # From every index collection: a re-index running now must not bring it back.
            return await delete_document_everywhere(self.resources.store, req.document_id)

    @activity.defn(name=DELETE_DOCUMENT_CHUNKS.name)
    async def delete_chunks(self, req: DocumentRef) -> None:
        # The pointer first: readers then find nothing live rather than files going away.
        await self.resources.live_versions.delete(req.document_id)
        await self.resources.files.delete_document(req.document_id)

    @activity.defn(name=REMOVE_DOCUMENT.name)
    async def remove(self, req: RemoveDocumentRequest) -> RemovedDocument:
        record = audit_row(
            req.actor,
            "document_delete",
            [req.task_id, req.import_task_id],
            req.reason,
            "deleted",
            {"document_id": req.document_id, "points_removed": req.points_removed},
        )
        async with Heartbeater():
            listed, file_removed = await remove_document(
                self.catalogue,
                activity.client(),
                self.settings,
                req.document_id,
                req.file_id,
                record,
                files=self.resources.files,
            )
        return RemovedDocument(listed=listed, file_removed=file_removed)
