"""Server-Sent Events helpers."""

from __future__ import annotations

import json
from typing import Any

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
