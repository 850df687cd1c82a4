"""Tasks (submission, status, cancel, live status) and the domain event feed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, ValidationError

from knowledgeops.contracts.document_import import DocumentImportPayload
from knowledgeops.contracts.events import StoredEvent
from knowledgeops.errors import validation_text
from knowledgeops.files.outputs import OutputNotFoundError, OutputStore
from knowledgeops.registry.task_types import TaskQueue, TaskType, spec_for
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
from starter.http.sse import KEEPALIVE_SECONDS, sse, stream_slot
from starter.services.task_models import PayloadInvalidError, TaskNotFoundError, TaskStatus

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, dependencies=[Depends(caller)])
POLL_SECONDS = 0.5
# Event cursors are database integers (BIGINT): anything larger is no cursor this API issued.
MAX_SEQ = 2**63 - 1


async def visible_task(rt: RuntimeDep, who: Caller, task_id: str) -> None:
    """An owner-bound caller's view: another owner's task is unknown, like a missing one."""
    if who.owner is not None and await rt.service.owner_of(task_id) != who.owner:
        raise TaskNotFoundError(f"No task with id {task_id!r}")


@router.get("/tasks/{task_id}", response_model=TaskStatus)
async def task_status(rt: RuntimeDep, who: CallerDep, task_id: str) -> TaskStatus:
    await visible_task(rt, who, task_id)
    return await rt.service.get_status(task_id)


class CancelRequest(BaseModel):
    reason: str = Field(default="", max_length=2000)


class CancelAccepted(BaseModel):
    task_id: str
    status: str = "cancelling"


@router.get("/tasks/{task_id}/output")
async def task_output(rt: RuntimeDep, who: CallerDep, task_id: str) -> dict[str, Any]:
    """What the task produced, as stored by it (its type's output model as JSON); the task's
    status carries only a small result that names it. 404 until the task has stored one."""
    await visible_task(rt, who, task_id)
    try:
        return await OutputStore(rt.resources.storage).load(task_id)
    except OutputNotFoundError as e:
        raise ApiError(404, "not_found", str(e)) from None


@router.post(
    "/tasks/{task_id}/cancel",
    status_code=202,
    response_model=CancelAccepted,
    responses=ACCEPTED_RESPONSE,
)
async def cancel_task(
    rt: RuntimeDep,
    who: CallerDep,
    response: Response,
    task_id: str,
    body: CancelRequest | None = None,
) -> CancelAccepted:
    await visible_task(rt, who, task_id)
    await rt.service.cancel(task_id, reason=body.reason if body else "", actor=who.name)
    accepted(response, task_id)
    return CancelAccepted(task_id=task_id)


@router.get("/tasks/{task_id}/events")
async def task_status_stream(
    rt: RuntimeDep, who: CallerDep, task_id: str, request: Request
) -> StreamingResponse:
    """Live status and progress as Server-Sent Events (`event: status`) until the task ends."""
    await visible_task(rt, who, task_id)
    slot = stream_slot(request)  # 503 when SSE_MAX_STREAMS streams are open
    try:
        first = await rt.service.get_status(task_id)  # 404 before the stream starts
    except BaseException:
        slot.release()
        raise

    async def stream() -> AsyncIterator[str]:
        last: Any = None
        beat = time.monotonic()
        st = first
        while True:
            snapshot = st.model_dump(mode="json")
            if snapshot != last:
                yield sse(snapshot, event="status")
                last, beat = snapshot, time.monotonic()
            elif time.monotonic() - beat > KEEPALIVE_SECONDS:
                yield ": keep-alive\n\n"
                beat = time.monotonic()
            if st.finished or await request.is_disconnected():
                return
            await asyncio.sleep(POLL_SECONDS)
            st = await rt.service.get_status(task_id)

    return slot.response(stream())


class TaskRequest(BaseModel):
    type: str
    payload: dict[str, Any]
    idempotency_key: str | None = Field(default=None, max_length=200)


class TaskAccepted(BaseModel):
    task_id: str
    task_type: TaskType
    status: str = "pending"
    status_url: str


@router.post("/tasks", status_code=202, response_model=TaskAccepted, responses=ACCEPTED_RESPONSE)
async def submit_task(
    rt: RuntimeDep,
    who: CallerDep,
    response: Response,
    body: TaskRequest,
    idempotency_header: IdempotencyKeyHeader = None,
) -> TaskAccepted:
    """Start a task. DOCUMENT_IMPORT takes the document path (its one task id per document,
    as an upload does), so two imports of one document never run at once. Follow
    `status_url` (also `Location`)."""
    key = resolve_idempotency_key(idempotency_header, body.idempotency_key, "idempotency_key")
    started = await _submit(rt, who, body, key)
    accepted(response, started.task_id)
    return started


async def _submit(rt: RuntimeDep, who: Caller, body: TaskRequest, key: str | None) -> TaskAccepted:
    try:
        task_type = TaskType(body.type)
    except ValueError:
        known = ", ".join(t.value for t in TaskType)
        raise ApiError(
            400, "unknown_task_type", f"Unknown task type {body.type!r}; known: {known}"
        ) from None
    if who.owner is not None and spec_for(task_type).task_queue == TaskQueue.MAINTENANCE:
        raise ApiError(403, "forbidden", f"A token bound to one owner cannot start {task_type}")
    if task_type == TaskType.DOCUMENT_IMPORT:
        return await _submit_import(rt, who, body, key)
    if who.owner is not None:
        await _own_documents_only(rt, who.owner, body.payload)
    ref = await rt.service.enqueue(
        task_type, body.payload, idempotency_key=key, requested_by=who.name, owner=who.owner
    )
    return TaskAccepted(
        task_id=ref.task_id, task_type=ref.task_type, status_url=task_location(ref.task_id)
    )


async def _own_documents_only(rt: RuntimeDep, owner: str, payload: dict[str, Any]) -> None:
    """An owner-bound token names only its owner's documents in a payload (the AI types read
    them): another owner's document is unknown to it, like a missing one."""
    named = payload.get("document_ids") or []
    if isinstance(payload.get("document_id"), str):
        named = [payload["document_id"], *named]
    for doc in named if isinstance(named, list) else []:
        row = await rt.documents.catalogue.get(str(doc)) if isinstance(doc, str) else None
        if row is None or row.owner != owner:
            raise ApiError(404, "not_found", f"No document with id {doc!r}")


async def _submit_import(
    rt: RuntimeDep, who: Caller, body: TaskRequest, key: str | None
) -> TaskAccepted:
    try:
        payload = DocumentImportPayload.model_validate(body.payload)
    except ValidationError as e:
        raise PayloadInvalidError(
            f"Invalid DOCUMENT_IMPORT payload: {validation_text(e.errors())}"
        ) from None
    meta = payload.metadata
    if who.owner is not None:
        if meta.owner not in (None, who.owner):
            raise ApiError(403, "forbidden", "This token imports only for its own owner")
        meta.owner = who.owner
    await rt.documents.admit_stored(payload.file_id)
    ref = await rt.documents.import_stored(
        payload.file_id,
        filename=payload.filename,
        document_id=payload.document_id,
        metadata=meta,
        idempotency_key=key,
        requested_by=who.name,
        visible_to=who.owner,
        chunking=payload.chunking,
        embed_batch_size=payload.embed_batch_size,
    )
    return TaskAccepted(
        task_id=ref.task_id,
        task_type=TaskType.DOCUMENT_IMPORT,
        status_url=task_location(ref.task_id),
    )


async def _event_scope(rt: RuntimeDep, who: Caller, task_id: str | None) -> None:
    # The feed spans every owner: an owner-bound token reads one of its own tasks' events.
    if who.owner is not None:
        if task_id is None:
            raise ApiError(
                403, "forbidden", "A token bound to one owner reads events by task_id only"
            )
        await visible_task(rt, who, task_id)


class EventPage(BaseModel):
    events: list[StoredEvent]
    next_cursor: int


@router.get("/events", response_model=EventPage)
async def events(
    rt: RuntimeDep,
    who: CallerDep,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="cursor: the last seq you have")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    task_id: str | None = None,
) -> EventPage:
    """Domain events in order. Resume with `after=next_cursor`; dedupe by `event_id`."""
    await _event_scope(rt, who, task_id)
    found = await rt.events.after(after, limit, task_id)
    return EventPage(events=found, next_cursor=found[-1].seq if found else after)


@router.get("/events/stream")
async def events_stream(
    rt: RuntimeDep,
    who: CallerDep,
    request: Request,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    task_id: str | None = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """The same feed, live, as SSE (`id` is the cursor; reconnects resume from Last-Event-ID)."""
    await _event_scope(rt, who, task_id)
    cursor = _last_event_id(last_event_id) if last_event_id else after
    slot = stream_slot(request)  # 503 when SSE_MAX_STREAMS streams are open

    async def stream() -> AsyncIterator[str]:
        nonlocal cursor
        beat = time.monotonic()
        while not await request.is_disconnected():
            batch = await rt.events.after(cursor, 200, task_id)
            for ev in batch:
                yield sse(ev.model_dump(mode="json"), event=ev.event_type.value, id=ev.seq)
                cursor = ev.seq
            if batch:
                beat = time.monotonic()
            elif time.monotonic() - beat > KEEPALIVE_SECONDS:
                yield ": keep-alive\n\n"
                beat = time.monotonic()
            await asyncio.sleep(POLL_SECONDS)

    return slot.response(stream())


def _last_event_id(value: str) -> int:
    """The `id:` this feed sent (a seq); anything else is refused rather than guessed at."""
    value = value.strip()
    # str.isdigit() accepts '²' and other digits int() rejects: ASCII digits only.
    if not (value.isascii() and value.isdigit()) or int(value) > MAX_SEQ:
        raise ApiError(
            400,
            "invalid_last_event_id",
            "Last-Event-ID must be an event seq this feed sent (0 to 2^63-1); "
            "omit it to start from `after`",
        )
    return int(value)
