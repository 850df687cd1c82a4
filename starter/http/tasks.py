"""Tasks (submission, status, cancel, live status) and the domain event feed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from knowledgeops.contracts.events import StoredEvent
from knowledgeops.task_types import TaskType
from starter.http.errors import ERROR_RESPONSES, ApiError
from starter.http.runtime import RuntimeDep
from starter.http.sse import KEEPALIVE_SECONDS, SSE_HEADERS, sse
from starter.service import TaskStatus

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)
POLL_SECONDS = 0.5


@router.get("/tasks/{task_id}", response_model=TaskStatus)
async def task_status(rt: RuntimeDep, task_id: str) -> TaskStatus:
    return await rt.service.get_status(task_id)


class CancelRequest(BaseModel):
    reason: str = Field(default="", max_length=2000)


class CancelAccepted(BaseModel):
    task_id: str
    status: str = "cancelling"


@router.post("/tasks/{task_id}/cancel", status_code=202, response_model=CancelAccepted)
async def cancel_task(
    rt: RuntimeDep, task_id: str, body: CancelRequest | None = None
) -> CancelAccepted:
    await rt.service.cancel(task_id, reason=body.reason if body else "", actor="api")
    return CancelAccepted(task_id=task_id)


@router.get("/tasks/{task_id}/events")
async def task_status_stream(rt: RuntimeDep, task_id: str, request: Request) -> StreamingResponse:
    """Live status and progress as Server-Sent Events (`event: status`) until the task ends."""
    first = await rt.service.get_status(task_id)  # 404 before the stream starts

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

    return StreamingResponse(stream(), media_type="text/event-stream", headers=SSE_HEADERS)


class TaskRequest(BaseModel):
    type: str
    payload: dict[str, Any]
    idempotency_key: str | None = Field(default=None, max_length=200)


class TaskAccepted(BaseModel):
    task_id: str
    task_type: TaskType
    status: str = "pending"
    status_url: str


@router.post("/tasks", status_code=202, response_model=TaskAccepted)
async def submit_task(rt: RuntimeDep, body: TaskRequest) -> TaskAccepted:
    try:
        task_type = TaskType(body.type)
    except ValueError:
        known = ", ".join(t.value for t in TaskType)
        raise ApiError(
            400, "unknown_task_type", f"Unknown task type {body.type!r}; known: {known}"
        ) from None
    ref = await rt.service.enqueue(
        task_type, body.payload, idempotency_key=body.idempotency_key, requested_by="api"
    )
    return TaskAccepted(
        task_id=ref.task_id, task_type=ref.task_type, status_url=f"/v1/tasks/{ref.task_id}"
    )


class EventPage(BaseModel):
    events: list[StoredEvent]
    next_cursor: int


@router.get("/events", response_model=EventPage)
async def events(
    rt: RuntimeDep,
    after: Annotated[int, Query(ge=0, description="cursor: the last seq you have")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    task_id: str | None = None,
) -> EventPage:
    """Domain events in order. Resume with `after=next_cursor`; dedupe by `event_id`."""
    found = await rt.db.events.after(after, limit, task_id)
    return EventPage(events=found, next_cursor=found[-1].seq if found else after)


@router.get("/events/stream")
async def events_stream(
    rt: RuntimeDep,
    request: Request,
    after: Annotated[int, Query(ge=0)] = 0,
    task_id: str | None = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """The same feed, live, as SSE (`id` is the cursor; reconnects resume from Last-Event-ID)."""
    cursor = int(last_event_id) if last_event_id and last_event_id.isdigit() else after

    async def stream() -> AsyncIterator[str]:
        nonlocal cursor
        beat = time.monotonic()
        while not await request.is_disconnected():
            batch = await rt.db.events.after(cursor, 200, task_id)
            for ev in batch:
                yield sse(ev.model_dump(mode="json"), event=ev.event_type.value, id=ev.seq)
                cursor = ev.seq
            if batch:
                beat = time.monotonic()
            elif time.monotonic() - beat > KEEPALIVE_SECONDS:
                yield ": keep-alive\n\n"
                beat = time.monotonic()
            await asyncio.sleep(POLL_SECONDS)

    return StreamingResponse(stream(), media_type="text/event-stream", headers=SSE_HEADERS)
