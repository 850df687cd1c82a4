"""Documents: upload (202 + task id), catalogue, delete, search. The lifecycle itself lives in
starter/services/documents.py (shared with the CLI); these handlers only speak HTTP."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, Query, Response, UploadFile
from pydantic import BaseModel, ValidationError

from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN, DocumentMetadata
from knowledgeops.contracts.search import SearchMode
from knowledgeops.errors import DocumentError, validation_text
from knowledgeops.files import file_store
from knowledgeops.index.engine import IndexOutdatedError
from starter.http.access import Caller, CallerDep, caller
from starter.http.errors import ERROR_RESPONSES, ApiError
from starter.http.headers import (
    ACCEPTED_RESPONSE,
    IdempotencyKeyHeader,
    accepted,
    resolve_idempotency_key,
    task_location,
)
from starter.http.runtime import RuntimeDep
from starter.services.document_chunks import MAX_CHUNK_PAGE, ChunkPage
from starter.services.document_models import DeleteAccepted, DocumentDetail, DocumentPage
from starter.services.search import MAX_QUERY_CHARACTERS, SearchHit, search

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, dependencies=[Depends(caller)])
COPY_BLOCK = 1024 * 1024
# DocumentImportPayload.filename's limit, checked before the upload is stored.
FILENAME_MAX = 500


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


@router.post("/documents", status_code=202, response_model=Accepted, responses=ACCEPTED_RESPONSE)
async def upload_document(
    rt: RuntimeDep,
    who: CallerDep,
    response: Response,
    file: Annotated[UploadFile, File(description="txt, md, html, pdf or docx")],
    title: Annotated[str | None, Form(max_length=500)] = None,
    tags: Annotated[str, Form(description="comma-separated")] = "",
    owner: Annotated[str | None, Form(max_length=200)] = None,
    document_id: Annotated[str | None, Form(pattern=DOCUMENT_ID_PATTERN)] = None,
    idempotency_key: Annotated[str | None, Form(max_length=200)] = None,
    idempotency_header: IdempotencyKeyHeader = None,
) -> Accepted:
    """Store the upload (streamed, content-addressed: the client's file name never becomes a
    path) and start its import. Answers at once; follow `status_url` (also `Location`)."""
    s = rt.settings
    name = file.filename or "upload"
    # Everything about the request is checked before a byte is stored: a refusal leaves nothing.
    key = resolve_idempotency_key(idempotency_header, idempotency_key, "idempotency_key")
    if len(name) > FILENAME_MAX:
        raise ApiError(
            422,
            "invalid_request",
            f"file name is {len(name)} characters; the limit is {FILENAME_MAX}: rename the file",
        )
    try:
        meta = DocumentMetadata(
            title=title, tags=[t.strip() for t in tags.split(",") if t.strip()], owner=owner
        )
    except ValidationError as e:
        raise ApiError(422, "invalid_request", validation_text(e.errors())) from None
    if who.owner is not None:
        if meta.owner not in (None, who.owner):
            raise ApiError(403, "forbidden", "This token imports only for its own owner")
        meta.owner = who.owner  # an owner-bound token's documents are always its owner's
        if document_id is not None:  # before storing: a refusal leaves nothing behind
            await rt.documents.check_document_id(document_id, who.owner)
    try:
        file_id = await rt.documents.store_upload(
            iter(lambda: file.file.read(COPY_BLOCK), b""),
            name,
            min(s.upload_max_bytes, s.max_file_bytes),
            size=file.size or 0,
        )
    except file_store.FileTooLargeError as e:
        raise ApiError(413, "file_too_large", str(e)) from None
    except DocumentError as e:
        status, code = _UPLOAD_REJECTIONS.get(e.kind, (400, "bad_file"))
        raise ApiError(status, code, e.message) from None
    ref = await rt.documents.import_stored(
        file_id,
        filename=name,
        document_id=document_id,
        metadata=meta,
        idempotency_key=key,
        requested_by=who.name,
        visible_to=who.owner,
    )
    accepted(response, ref.task_id)
    return Accepted(
        task_id=ref.task_id,
        document_id=ref.document_id,
        status="pending",
        status_url=task_location(ref.task_id),
    )


class Scope:
    """The documents a listing or search covers: all filters must match."""

    def __init__(
        self, owner: str | None, tags: list[str] | None, document_id: list[str] | None
    ) -> None:
        self.owner = owner
        self.tags = tags or []
        self.document_ids = document_id or []

    def for_caller(self, who: Caller) -> bool:
        """Narrow to an owner-bound caller's owner; False when nothing can match."""
        if who.owner is None:
            return True
        if self.owner not in (None, who.owner):
            return False
        self.owner = who.owner
        return True


# A function, not the class itself: FastAPI runs a class's __init__ in a worker thread (a
# hop on every listing and search), an async function inline.
async def scope_filters(
    owner: Annotated[str | None, Query(max_length=200)] = None,
    tags: Annotated[
        list[str] | None, Query(max_length=50, description="repeat: all must match")
    ] = None,
    document_id: Annotated[
        list[str] | None, Query(max_length=1000, description="repeat: any of these")
    ] = None,
) -> Scope:
    return Scope(owner, tags, document_id)


ScopeDep = Annotated[Scope, Depends(scope_filters)]


@router.get("/documents", response_model=DocumentPage)
async def list_documents(
    rt: RuntimeDep,
    who: CallerDep,
    scope: ScopeDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
) -> DocumentPage:
    """Newest first; filtered by owner, tags (all must match) and document ids."""
    return await rt.documents.list(
        limit=limit,
        offset=offset,
        owner=scope.owner,
        tags=scope.tags,
        document_ids=scope.document_ids,
        visible_to=who.owner,
    )


@router.get("/documents/{document_id}", response_model=DocumentDetail)
async def get_document(rt: RuntimeDep, who: CallerDep, document_id: str) -> DocumentDetail:
    return await rt.documents.get(document_id, visible_to=who.owner)


@router.get("/documents/{document_id}/chunks", response_model=ChunkPage)
async def get_document_chunks(
    rt: RuntimeDep,
    who: CallerDep,
    document_id: str,
    offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_CHUNK_PAGE)] = 50,
) -> ChunkPage:
    """What was indexed: the live (searchable) version's chunks in order, `total` of them.
    A known document with no published version yet (its first import queued, running,
    failed or cancelled) is `409 chunks_not_published`, saying why."""
    return await rt.documents.chunks(document_id, offset=offset, limit=limit, visible_to=who.owner)


@router.delete(
    "/documents/{document_id}",
    status_code=202,
    response_model=DeleteAccepted,
    responses=ACCEPTED_RESPONSE,
)
async def delete_document(
    rt: RuntimeDep, who: CallerDep, response: Response, document_id: str, reason: str = ""
) -> DeleteAccepted:
    """Remove a document: it leaves search at once; its DOCUMENT_DELETE task (follow it at
    `/v1/tasks/{task_id}`) stops its import, then removes its points, chunks, catalogue row
    and stored file. Asking again while the task runs answers the same task. Audited, as the
    caller the API token names."""
    done = await rt.documents.delete(
        document_id, reason=reason, actor=who.name, visible_to=who.owner
    )
    accepted(response, done.task_id)
    return done


@router.get("/search", response_model=list[SearchHit])
async def search_documents(
    rt: RuntimeDep,
    who: CallerDep,
    scope: ScopeDep,
    q: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARACTERS)],
    k: Annotated[int, Query(ge=1, le=100)] = 5,
    mode: SearchMode = SearchMode.HYBRID,
) -> list[SearchHit]:
    """The k best chunks among the documents the filters select (conditions of the engine's
    query, so a filtered search still returns k hits when there are k). `mode`: `hybrid`
    (default: meaning and exact words fused), `dense` (meaning) or `keyword` (BM25)."""
    if not scope.for_caller(who):
        return []
    try:
        return await search(
            rt.store,
            rt.resources,
            q,
            k,
            db=rt.db,
            mode=mode,
            owner=scope.owner,
            tags=scope.tags,
            document_ids=scope.document_ids,
        )
    except IndexOutdatedError as e:
        raise ApiError(409, "index_outdated", str(e)) from None
    except ValueError as e:
        raise ApiError(400, "bad_query", str(e)) from None
