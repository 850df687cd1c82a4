"""Documents: upload (202 + task id), catalogue, delete, search. The lifecycle itself lives in
starter/documents.py (shared with the CLI); these handlers only speak HTTP."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Query, UploadFile
from pydantic import BaseModel

from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN, DocumentMetadata
from knowledgeops.errors import DocumentError
from knowledgeops.stores import file_store
from starter.documents import Deleted, DocumentDetail, DocumentPage
from starter.http.errors import ERROR_RESPONSES, ApiError
from starter.http.runtime import RuntimeDep
from starter.search import SearchHit, search

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)
COPY_BLOCK = 1024 * 1024


class Accepted(BaseModel):
    task_id: str
    document_id: str
    status: str
    status_url: str


# Sniffing results that are the upload's own fault, and the status each one gets.
_UPLOAD_REJECTIONS = {
    "EmptyDocument": (400, "empty_file"),
    "UnsupportedFormat": (415, "unsupported_media_type"),
    "CorruptDocument": (415, "unsupported_media_type"),
    "HostileDocument": (400, "hostile_file"),
}


@router.post("/documents", status_code=202, response_model=Accepted)
async def upload_document(
    rt: RuntimeDep,
    file: Annotated[UploadFile, File(description="txt, md, html, pdf or docx")],
    title: Annotated[str | None, Form(max_length=500)] = None,
    tags: Annotated[str, Form(description="comma-separated")] = "",
    owner: Annotated[str | None, Form(max_length=200)] = None,
    document_id: Annotated[str | None, Form(pattern=DOCUMENT_ID_PATTERN)] = None,
    idempotency_key: Annotated[str | None, Form(max_length=200)] = None,
) -> Accepted:
    """Store the upload (streamed, content-addressed: the client's file name never becomes a
    path) and start its import. Answers at once; follow `status_url`."""
    s = rt.settings
    name = file.filename or "upload"
    try:
        file_id = await rt.documents.store_upload(
            iter(lambda: file.file.read(COPY_BLOCK), b""),
            name,
            min(s.upload_max_bytes, s.max_file_bytes),
        )
    except file_store.FileTooLargeError as e:
        raise ApiError(413, "file_too_large", str(e)) from None
    except DocumentError as e:
        status, code = _UPLOAD_REJECTIONS.get(e.kind, (400, "bad_file"))
        raise ApiError(status, code, e.message) from None
    meta = DocumentMetadata(
        title=title, tags=[t.strip() for t in tags.split(",") if t.strip()], owner=owner
    )
    ref = await rt.documents.import_stored(
        file_id,
        filename=name,
        document_id=document_id,
        metadata=meta,
        idempotency_key=idempotency_key,
    )
    return Accepted(
        task_id=ref.task_id,
        document_id=ref.document_id,
        status="pending",
        status_url=f"/v1/tasks/{ref.task_id}",
    )


@router.get("/documents", response_model=DocumentPage)
async def list_documents(
    rt: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
    owner: str | None = None,
) -> DocumentPage:
    return await rt.documents.list(limit=limit, offset=offset, owner=owner)


@router.get("/documents/{document_id}", response_model=DocumentDetail)
async def get_document(rt: RuntimeDep, document_id: str) -> DocumentDetail:
    return await rt.documents.get(document_id)


@router.delete("/documents/{document_id}", response_model=Deleted)
async def delete_document(
    rt: RuntimeDep, document_id: str, reason: str = "", actor: str = "api"
) -> Deleted:
    """Remove a document: cancel its running import first (`503 cancel_pending` if it has not
    stopped within 120 s), then its vectors, chunks and stored file. Audited."""
    return await rt.documents.delete(document_id, reason=reason, actor=actor)


@router.get("/search", response_model=list[SearchHit])
async def search_documents(
    rt: RuntimeDep,
    q: Annotated[str, Query(min_length=1, max_length=2000)],
    k: Annotated[int, Query(ge=1, le=100)] = 5,
    document_id: str | None = None,
) -> list[SearchHit]:
    try:
        return await search(rt.store, rt.embedder, q, k, document_id, rt.db)
    except ValueError as e:
        raise ApiError(400, "bad_query", str(e)) from None
