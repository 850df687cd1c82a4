"""Standard HTTP headers the routes share: `Location` of an accepted task (every 202), and the
`Idempotency-Key` request header, honoured wherever a body's `idempotency_key` is."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Header, Response

from starter.http.errors import ApiError

# The body field's limit, so the header is no way around it.
IDEMPOTENCY_KEY_MAX = 200

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=IDEMPOTENCY_KEY_MAX,
        description="The same as the body's `idempotency_key` (send either, or both alike): "
        "requests with one key start one task",
    ),
]

# OpenAPI of a 202: the header every one carries.
ACCEPTED_RESPONSE: dict[int | str, dict[str, Any]] = {
    202: {
        "description": "Accepted: the task carries it out; follow it at `Location`",
        "headers": {
            "Location": {
                "description": "The task: `/v1/tasks/{task_id}`",
                "schema": {"type": "string"},
            }
        },
    }
}


def task_location(task_id: str) -> str:
    # Percent-encoded as a path segment; task ids are made of characters it leaves as they are.
    return f"/v1/tasks/{quote(task_id, safe=':')}"


def accepted(response: Response, task_id: str) -> None:
    """Point an accepted (202) answer at the task that carries the work out."""
    response.headers["Location"] = task_location(task_id)


def resolve_idempotency_key(header: str | None, body: str | None, field: str) -> str | None:
    """The request's idempotency key, from the header or the body `field`; 422 when they
    differ. An empty one is none, as the service has always treated an empty body key."""
    if header and body and header != body:
        raise ApiError(
            422,
            "idempotency_key_conflict",
            f"The Idempotency-Key header ({header!r}) and the {field} field ({body!r}) differ; "
            "send the key in one of them, or the same key in both",
        )
    return header or body
