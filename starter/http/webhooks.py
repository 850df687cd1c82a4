"""Admin view of webhook delivery (/v1/admin/webhooks): the deliveries given up as dead, with
their last error, so an operator sees which events a receiver never took (they stay in the
events feed, GET /v1/events, for a receiver to catch up from)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from knowledgeops.db.webhook_cursors import WebhookCursors
from starter.http.access import operator
from starter.http.errors import ERROR_RESPONSES
from starter.http.runtime import RuntimeDep

router = APIRouter(
    prefix="/v1/admin/webhooks", responses=ERROR_RESPONSES, dependencies=[Depends(operator)]
)


class DeadDelivery(BaseModel):
    id: int
    url: str
    event_seq: int
    event_id: str
    event_type: str
    task_id: str
    attempts: int
    # HTTP status of the last attempt; null when no response came (network, invalid URL).
    last_status: int | None
    last_error: str
    first_attempt_at: datetime
    dead_at: datetime


@router.get("/dead", response_model=list[DeadDelivery])
async def dead_deliveries(
    rt: RuntimeDep,
    url: Annotated[str | None, Query(max_length=1000)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    # Bounded by the id column (a 32-bit integer on PostgreSQL).
    before_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
) -> list[DeadDelivery]:
    """Newest first; pass the last `id` as `before_id` for the next page."""
    rows = await WebhookCursors(rt.db).dead(url=url, limit=limit, before_id=before_id)
    return [DeadDelivery.model_validate(r, from_attributes=True) for r in rows]
