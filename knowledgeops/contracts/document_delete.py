"""DOCUMENT_DELETE's contract: removing a document is a task, so every step happens even if a
process dies halfway (before, a crash inside the API left orphans for cleanup to find).

The request itself (starter/services/documents.py) hides the document at once: its catalogue row
says `deleting` and its points are staged, which search never returns. The task then stops the
document's import, deletes its points from every index collection, its chunk files, its
catalogue row (with the audit record, in one transaction) and its stored file unless another
document has the same bytes. Every step is idempotent, so a retry redoes what is left.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from knowledgeops.contracts.base import ActivityRef

# The catalogue status of a document whose delete task has been started.
DELETING = "deleting"


class DocumentDeletePayload(BaseModel):
    document_id: str = Field(min_length=1, max_length=128)
    # The import task to stop first (the document's one import task id), and whether it was
    # queued or running when the delete was asked for (its cancel was requested then).
    import_task_id: str = Field(min_length=1, max_length=300)
    import_running: bool = False
    # Its stored file (removed unless another document or a queued import needs it).
    file_id: str = Field(min_length=1, max_length=100)
    owner: str | None = None
    actor: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=2000)


class StopImportRequest(BaseModel):
    import_task_id: str
    # The document: when its import is a batch's (DOCUMENT_BATCH_IMPORT), the batch is not
    # cancelled; the step waits until the batch is past the document.
    document_id: str | None = None


class StoppedImport(BaseModel):
    # How the import task ended ("cancelled", "completed", ...); None: no such task (any more).
    status: str | None


class DocumentRef(BaseModel):
    document_id: str


class RemoveDocumentRequest(BaseModel):
    document_id: str
    file_id: str
    task_id: str  # this delete task (the audit record names it and the import)
    import_task_id: str
    actor: str
    reason: str
    points_removed: int


class RemovedDocument(BaseModel):
    listed: bool  # its catalogue row was still there (False: removed by an earlier attempt)
    file_removed: bool


class DocumentDeleteResult(BaseModel):
    document_id: str
    import_cancelled: bool
    points_removed: int
    file_removed: bool


STOP_IMPORT: ActivityRef[StopImportRequest, StoppedImport] = ActivityRef(
    "stop_document_import", StopImportRequest, StoppedImport
)
DELETE_DOCUMENT_POINTS: ActivityRef[DocumentRef, int] = ActivityRef(
    "delete_document_points", DocumentRef, int
)
DELETE_DOCUMENT_CHUNKS: ActivityRef[DocumentRef, None] = ActivityRef(
    "delete_document_chunks", DocumentRef, type(None)
)
REMOVE_DOCUMENT: ActivityRef[RemoveDocumentRequest, RemovedDocument] = ActivityRef(
    "remove_document", RemoveDocumentRequest, RemovedDocument
)
