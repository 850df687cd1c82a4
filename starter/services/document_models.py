"""The document lifecycle's models and errors, as the HTTP API and the CLI read them
(starter/services/documents.py holds the lifecycle itself)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from starter.services.task_models import TaskStatus


class ImportRef(BaseModel):
    task_id: str
    run_id: str | None
    document_id: str


class Document(BaseModel):
    document_id: str
    title: str | None
    filename: str
    tags: list[str]
    owner: str | None
    status: str
    indexed_chunks: int
    last_task_id: str
    error: str | None
    created_at: datetime
    updated_at: datetime


class DocumentDetail(Document):
    task: TaskStatus | None
    points_in_index: int


class DocumentPage(BaseModel):
    items: list[Document]
    total: int


class DeleteAccepted(BaseModel):
    """A document's delete task: the document is hidden from search already; the task removes
    it (its result says how many points went and whether its import was cancelled)."""

    document_id: str
    task_id: str
    run_id: str | None = None


class DocumentNotFoundError(LookupError):
    pass


class DocumentOwnedElsewhereError(RuntimeError):
    """An owner-bound caller named a document id that another owner's document has (409)."""


class DocumentBeingDeletedError(RuntimeError):
    """An import of a document whose delete task has not finished yet (409 at the API)."""
