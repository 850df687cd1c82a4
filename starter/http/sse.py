"""Server-Sent Events helpers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from starter.http.errors import ApiError

KEEPALIVE_SECONDS = 15.0


def sse(data: Any, *, event: str | None = None, id: str | int | None = None) -> str:
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event:
        lines.append(f"event: {event}")
    payload = data if isinstance(data, str) else json.dumps(data, default=str, ensure_ascii=False)
    lines.extend(f"data: {line}" for line in payload.splitlines() or [""])
    return "\n".join(lines) + "\n\n"


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class StreamSlot:
    """One of the app's SSE_MAX_STREAMS stream slots; released once, when its stream ends
    (finished, failed or the client went away) or the request fails before streaming."""

    def __init__(self, streams: OpenStreams) -> None:
        self._streams = streams
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._streams.open -= 1

    def response(self, stream: AsyncIterator[str]) -> StreamingResponse:
        """The SSE response of `stream`, releasing this slot however the response ends (a
        generator that never started would run no `finally`, so this wraps the response)."""
        return _SlotResponse(self, stream)


class _SlotResponse(StreamingResponse):
    def __init__(self, slot: StreamSlot, stream: AsyncIterator[str]) -> None:
        super().__init__(stream, media_type="text/event-stream", headers=SSE_HEADERS)
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()


class OpenStreams:
    """Count of open SSE streams of one app (one event loop: no lock needed)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0


def stream_slot(request: Request) -> StreamSlot:
    """Take a stream slot or refuse with 503: each stream holds a connection and polls, so
    their number is bounded (SSE_MAX_STREAMS); a client retries after Retry-After."""
    state = request.app.state
    streams: OpenStreams | None = getattr(state, "open_streams", None)
    if streams is None:
        streams = state.open_streams = OpenStreams(state.runtime.settings.sse_max_streams)
    if streams.open >= streams.limit:
        raise ApiError(
            503,
            "too_many_streams",
            f"{streams.limit} event streams are open (SSE_MAX_STREAMS); retry later, or poll "
            "GET /v1/events?after= / GET /v1/tasks/{id} instead",
            headers={"Retry-After": "10"},
        )
    streams.open += 1
    return StreamSlot(streams)
