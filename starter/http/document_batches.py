"""Many files in one request (a folder): one DOCUMENT_BATCH_IMPORT (202 + its task id), and
its progress. The lifecycle lives in starter/services/document_batches.py; cancelling is the
task's (`POST /v1/tasks/{task_id}/cancel`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from knowledgeops.contracts.document_import import DocumentMetadata
from knowledgeops.errors import validation_text
from starter.http.access import CallerDep, caller
from starter.http.errors import ERROR_RESPONSES, ApiError
from starter.http.headers import ACCEPTED_RESPONSE, accepted
from starter.http.runtime import RuntimeDep
from starter.services.document_batches import (
    BatchAccepted,
    BatchView,
    DocumentBatchService,
    NotABatchError,
)

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, dependencies=[Depends(caller)])
# Files one request may carry (Starlette's default is 1,000; a folder of notes is more).
MAX_BATCH_FILES = 50_000
COPY_BLOCK = 1024 * 1024

# The form, for the OpenAPI document (the handler reads it itself: see submit_batch).
_FORM: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["files"],
                    "properties": {
                        "files": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "the files, one part each (repeat `files`); a "
                            "part's file name may be a relative path (`notes/a.md`)",
                        },
                        "tags": {"type": "string", "description": "comma-separated"},
                        "owner": {"type": "string", "maxLength": 200},
                    },
                }
            }
        },
    }
}


def _blocks(upload: UploadFile) -> Any:
    # Read in the service's storing thread: a spooled upload's reads may touch the disk.
    return iter(lambda: upload.file.read(COPY_BLOCK), b"")


@router.post(
    "/document-batches",
    status_code=202,
    response_model=BatchAccepted,
    responses=ACCEPTED_RESPONSE,
    openapi_extra=_FORM,
)
async def submit_batch(
    rt: RuntimeDep, who: CallerDep, request: Request, response: Response
) -> BatchAccepted:
    """Store every file of the request and start ONE import of them all: each file becomes a
    document of its own (status, chunks, search hits, delete), a bad file fails alone with its
    reason, and the batch is one task to follow (`status_url`) and cancel."""
    form = await request.form(max_files=MAX_BATCH_FILES, max_fields=100)
    try:
        uploads = [f for f in form.getlist("files") if isinstance(f, UploadFile)]
        if not uploads:
            raise ApiError(422, "invalid_request", "send the files as `files` parts")
        tags, owner = form.get("tags"), form.get("owner")
        try:
            meta = DocumentMetadata(
                tags=[t.strip() for t in str(tags or "").split(",") if t.strip()],
                owner=str(owner) if isinstance(owner, str) and owner else None,
            )
        except ValidationError as e:
            raise ApiError(422, "invalid_request", validation_text(e.errors())) from None
        if who.owner is not None:
            if meta.owner not in (None, who.owner):
                raise ApiError(403, "forbidden", "This token imports only for its own owner")
            meta.owner = who.owner  # an owner-bound token's documents are always its owner's
        batch = DocumentBatchService(rt.documents)
        done = await batch.submit(
            [(u.filename or "upload", _blocks(u)) for u in uploads],
            size=sum(u.size or 0 for u in uploads),
            metadata=meta,
            requested_by=who.name,
        )
    finally:
        await form.close()
    accepted(response, done.task_id)
    return done


@router.get("/document-batches/{task_id}", response_model=BatchView)
async def get_batch(
    rt: RuntimeDep, who: CallerDep, task_id: Annotated[str, Path(max_length=300)]
) -> BatchView:
    """Done, imported and failed of the total, the failures with their reasons (each failed
    document's own status says it too), and the task's status."""
    try:
        return await DocumentBatchService(rt.documents).view(task_id, visible_to=who.owner)
    except NotABatchError as e:
        raise ApiError(404, "not_found", str(e)) from None
