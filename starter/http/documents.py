"""Documents: upload (202 + job id), catalogue, delete, search."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Query, UploadFile
from pydantic import BaseModel

from activities import file_store
from activities.chunk_store import delete_chunks
from activities.errors import DocumentError
from activities.parsing import detect_format
from activities.vector_store import VectorStore
from knowledgeops.models import DocumentImportPayload, DocumentMetadata
from starter.http.errors import ERROR_RESPONSES, ApiError
from starter.http.runtime import Runtime, RuntimeDep
from starter.search import SearchHit, search
from starter.service import JobNotFoundError, JobStatus, derive_document_id

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)
COPY_BLOCK = 1024 * 1024
# How long a delete waits for the document's import to stop (cancel + index clean-up).
CANCEL_WAIT_SECONDS = 120.0


class Accepted(BaseModel):
    job_id: str
    document_id: str
    status: str
    status_url: str


class Document(BaseModel):
    document_id: str
    title: str | None
    filename: str
    tags: list[str]
    owner: str | None
    status: str
    indexed_chunks: int
    last_job_id: str
    error: str | None
    created_at: datetime
    updated_at: datetime


class DocumentDetail(Document):
    job: JobStatus | None
    points_in_index: int


class DocumentPage(BaseModel):
    items: list[Document]
    total: int


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
    document_id: Annotated[str | None, Form(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")] = None,
    idempotency_key: Annotated[str | None, Form(max_length=200)] = None,
) -> Accepted:
    """Store the upload (streamed, content-addressed: the client's file name never becomes a
    path) and start its import. Answers at once; follow `status_url`."""
    s = rt.settings
    name = file.filename or "upload"
    limit = min(s.upload_max_bytes, s.max_file_bytes)
    try:
        file_id = await asyncio.to_thread(
            file_store.store_blocks,
            s.files_dir,
            iter(lambda: file.file.read(COPY_BLOCK), b""),
            name,
            limit,
        )
    except file_store.FileTooLargeError as e:
        raise ApiError(413, "file_too_large", str(e)) from None
    path = file_store.path_for(s.files_dir, file_id)
    try:
        await asyncio.to_thread(detect_format, path, name)
    except DocumentError as e:
        if not await rt.db.file_in_use(file_id):
            path.unlink(missing_ok=True)
        status, code = _UPLOAD_REJECTIONS.get(e.kind, (400, "bad_file"))
        raise ApiError(status, code, e.message) from None
    meta = DocumentMetadata(
        title=title, tags=[t.strip() for t in tags.split(",") if t.strip()], owner=owner
    )
    ref = await rt.service.import_stored(
        file_id,
        filename=name,
        document_id=document_id,
        metadata=meta,
        idempotency_key=idempotency_key,
    )
    return Accepted(
        job_id=ref.job_id,
        document_id=ref.document_id or derive_document_id(file_id),
        status="pending",
        status_url=f"/v1/jobs/{ref.job_id}",
    )


def _document(row: Any) -> Document:
    return Document.model_validate(row, from_attributes=True)


@router.get("/documents", response_model=DocumentPage)
async def list_documents(
    rt: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
    owner: str | None = None,
) -> DocumentPage:
    rows, total = await rt.db.list_documents(limit=limit, offset=offset, owner=owner)
    return DocumentPage(items=[_document(r) for r in rows], total=total)


async def _points(rt: Runtime, document_id: str) -> int:
    return await rt.store.count(VectorStore.collection_name(rt.embedder.model_id), document_id)


@router.get("/documents/{document_id}", response_model=DocumentDetail)
async def get_document(rt: RuntimeDep, document_id: str) -> DocumentDetail:
    row = await rt.db.get_document(document_id)
    if row is None:
        return await _awaiting_import(rt, document_id)
    job = await rt.service.get_status(row.last_job_id)
    return DocumentDetail(
        **_document(row).model_dump(), job=job, points_in_index=await _points(rt, document_id)
    )


async def _queued_input(rt: Runtime, job_id: str) -> DocumentImportPayload:
    raw, _ = await rt.service.task_input(job_id)
    return DocumentImportPayload.model_validate(raw)


async def _awaiting_import(rt: Runtime, document_id: str) -> DocumentDetail:
    """A document is listed when its import starts running; until a worker picks the import
    up, the job's own input describes it (status `queued`)."""
    job_id = rt.service.import_job_id(document_id)
    missing = ApiError(404, "not_found", f"No document with id {document_id!r}")
    try:
        job = await rt.service.get_status(job_id)
        if job.finished:
            raise missing  # deleted, or ended before it was ever listed
        payload = await _queued_input(rt, job_id)
    except JobNotFoundError:
        raise missing from None
    since = job.started_at or datetime.now(UTC)
    return DocumentDetail(
        document_id=document_id,
        title=payload.metadata.title,
        filename=payload.filename,
        tags=payload.metadata.tags,
        owner=payload.metadata.owner,
        status="queued",
        indexed_chunks=0,
        last_job_id=job_id,
        error=None,
        created_at=since,
        updated_at=since,
        job=job,
        points_in_index=0,
    )


class Deleted(BaseModel):
    document_id: str
    points_removed: int
    import_cancelled: bool


@router.delete("/documents/{document_id}", response_model=Deleted)
async def delete_document(
    rt: RuntimeDep, document_id: str, reason: str = "", actor: str = "api"
) -> Deleted:
    """Remove a document: cancel its running import first, then its vectors, chunks and
    stored file (unless another document has the same bytes). Audited."""
    row = await rt.db.get_document(document_id)
    # Not listed yet: its import may still be waiting for a worker (see _awaiting_import).
    job_id = row.last_job_id if row else rt.service.import_job_id(document_id)
    try:
        job = await rt.service.get_status(job_id)
    except JobNotFoundError:
        if row is None:
            raise ApiError(404, "not_found", f"No document with id {document_id!r}") from None
        job = None

    async def audit(outcome: str, **details: Any) -> None:
        await rt.db.audit(
            actor=actor,
            action="document_delete",
            task_ids=[job_id],
            reason=reason,
            outcome=outcome,
            details={"document_id": document_id, **details},
        )

    cancelled = False
    if job is not None and not job.finished:
        await rt.service.cancel(job_id, reason=f"document delete: {reason}", actor=actor)
        try:
            await rt.service.wait(job_id, timeout=CANCEL_WAIT_SECONDS)
        except TimeoutError:
            # The cancel stays requested; only a worker can carry it out (and clean up).
            await audit("refused", error="import has not stopped yet")
            raise ApiError(
                503,
                "cancel_pending",
                f"The import of {document_id!r} was asked to stop but has not stopped within "
                f"{CANCEL_WAIT_SECONDS} s: is a worker running? Nothing was deleted; delete "
                f"again once GET /v1/jobs/{job_id} shows it cancelled.",
                headers={"Retry-After": "30"},
            ) from None
        cancelled = True
        row = row or await rt.db.get_document(document_id)
    collection = VectorStore.collection_name(rt.embedder.model_id)
    removed = await rt.store.delete_document(collection, document_id)
    await asyncio.to_thread(delete_chunks, rt.settings.chunks_dir, document_id)
    await rt.db.delete_document(document_id)
    file_id = row.file_id if row else (await _queued_input(rt, job_id)).file_id
    if not await rt.db.file_in_use(file_id):
        file_store.path_for(rt.settings.files_dir, file_id).unlink(missing_ok=True)
    await audit("deleted", points_removed=removed)
    return Deleted(document_id=document_id, points_removed=removed, import_cancelled=cancelled)


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
