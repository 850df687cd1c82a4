"""DOCUMENT_DELETE's steps (see knowledgeops/contracts/document_delete.py)."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.support import Heartbeater
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
from knowledgeops.documents.removal import remove_document
from knowledgeops.index.live import delete_document_everywhere
from knowledgeops.runtime.resources import Resources

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
        is harmless) and wait until it has closed, its cleanup done."""
        handle = activity.client().get_workflow_handle(req.import_task_id)
        try:
            desc = await handle.describe()
            if desc.status == WorkflowExecutionStatus.RUNNING:
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
