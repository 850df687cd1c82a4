"""Admin API (/v1/admin): overview, task list and detail, manual retry / cancel (single and
bulk), re-index and the live index, workers, audit log. Bearer tokens from ADMIN_TOKENS, each
mapped to an operator name (checked by `starter.http.access.operator`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, Field

from knowledgeops.contracts.indexing import MODEL_PATTERN, ReindexOptions
from knowledgeops.db.audit import AuditLog
from knowledgeops.db.task_list import ListKey
from knowledgeops.index.bm25 import SPARSE_MODEL
from knowledgeops.index.live import index_collections
from knowledgeops.registry.task_types import TaskType
from starter.http.access import Operator, operator
from starter.http.errors import ERROR_RESPONSES, ApiError
from starter.http.headers import ACCEPTED_RESPONSE, accepted
from starter.http.runtime import Runtime, RuntimeDep
from starter.services import task_queries as tq
from starter.services.reindex import start_reindex
from starter.services.task_models import (
    TaskFinishedError,
    TaskNotFoundError,
    TaskNotRetryableError,
    TaskStatus,
)

BULK_MAX = 1000


router = APIRouter(prefix="/v1/admin", responses=ERROR_RESPONSES, dependencies=[Depends(operator)])


@router.get("/overview", response_model=tq.Overview)
async def overview(rt: RuntimeDep) -> tq.Overview:
    return await tq.overview(rt.client, rt.settings)


def _filter(
    type: TaskType | None = None,
    status: tq.StatusName | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tq.TaskFilter:
    return tq.TaskFilter(
        task_type=type, status=status, since=_moment(since, "since"), until=_moment(until, "until")
    )


def _moment(value: datetime | None, name: str) -> datetime | None:
    """A time the visibility query can hold (in UTC), or 422 naming the parameter."""
    if value is None:
        return None
    try:
        (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    except (OverflowError, ValueError):
        raise ApiError(
            422, "invalid_request", f"{name}: {value.isoformat()} is out of range"
        ) from None
    return value


def _cursor(value: str | None) -> ListKey | None:
    """A `next_cursor` this API returned, or 400 (so is a cursor of the old, time-only form):
    never a 500 from parsing."""
    if value is None:
        return None
    try:
        return ListKey.decode(value)
    except ValueError:
        raise ApiError(
            400,
            "invalid_cursor",
            "cursor must be a next_cursor value returned by this listing; omit it for page one",
        ) from None


@router.get("/tasks", response_model=tq.TaskPage)
async def list_tasks(
    rt: RuntimeDep,
    flt: Annotated[tq.TaskFilter, Depends(_filter)],
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: str | None = None,
) -> tq.TaskPage:
    """Newest first (by the start of each task's newest run, then task id); pass
    `next_cursor` back as `cursor` for the next page. Served from the task list the domain
    events feed; `GET /tasks/{task_id}` reads Temporal."""
    return await rt.service.list(flt, limit, _cursor(cursor))


class TaskDetail(tq.TaskDetail):
    status: TaskStatus


@router.get("/tasks/{task_id}", response_model=TaskDetail)
async def task_detail(rt: RuntimeDep, task_id: str) -> TaskDetail:
    return TaskDetail.model_validate((await rt.service.describe(task_id)).model_dump())


class ActionRequest(BaseModel):
    reason: str = Field(min_length=1, max_length=2000)


class ActionAccepted(BaseModel):
    task_id: str
    action: str
    run_id: str | None = None


@router.post(
    "/tasks/{task_id}/retry",
    status_code=202,
    response_model=ActionAccepted,
    responses=ACCEPTED_RESPONSE,
)
async def retry_task(
    rt: RuntimeDep, who: Operator, response: Response, task_id: str, body: ActionRequest
) -> ActionAccepted:
    ref = await rt.service.retry(task_id, reason=body.reason, actor=who)
    accepted(response, task_id)
    return ActionAccepted(task_id=task_id, action="retry", run_id=ref.run_id)


@router.post(
    "/tasks/{task_id}/cancel",
    status_code=202,
    response_model=ActionAccepted,
    responses=ACCEPTED_RESPONSE,
)
async def cancel_task(
    rt: RuntimeDep, who: Operator, response: Response, task_id: str, body: ActionRequest
) -> ActionAccepted:
    await rt.service.cancel(task_id, reason=body.reason, actor=who)
    accepted(response, task_id)
    return ActionAccepted(task_id=task_id, action="cancel")


class BulkFilter(BaseModel):
    type: TaskType | None = None
    status: tq.StatusName | None = None
    since: datetime | None = None
    until: datetime | None = None


class BulkRequest(BaseModel):
    action: Literal["retry", "cancel"]
    filter: BulkFilter
    reason: str = Field(min_length=1, max_length=2000)
    max_tasks: int = Field(default=200, ge=1, le=BULK_MAX)


class BulkResult(BaseModel):
    action: str
    matched: int
    done: list[str]
    skipped: dict[str, str]


@router.post("/tasks/bulk", response_model=BulkResult)
async def bulk_action(rt: RuntimeDep, who: Operator, body: BulkRequest) -> BulkResult:
    flt = _filter(body.filter.type, body.filter.status, body.filter.since, body.filter.until)
    page = await rt.service.list(flt, limit=body.max_tasks)
    done: list[str] = []
    skipped: dict[str, str] = {}
    outcome = "failed"
    try:
        for item in page.items:
            try:
                if body.action == "retry":
                    await rt.service.retry(item.task_id, reason=body.reason, actor=who)
                else:
                    await rt.service.cancel(item.task_id, reason=body.reason, actor=who)
                done.append(item.task_id)
            # A task may end, or be removed by retention, between the listing and its turn.
            except (TaskFinishedError, TaskNotRetryableError, TaskNotFoundError) as e:
                skipped[item.task_id] = str(e)
        outcome = "partial" if skipped else "done"
    finally:
        # Written whatever happened: what was done before a failure stays on record.
        await rt.service.audit(
            who,
            f"bulk_{body.action}",
            [i.task_id for i in page.items],
            body.reason,
            outcome,
            {"filter": body.filter.model_dump(mode="json"), "done": done, "skipped": skipped},
        )
    return BulkResult(action=body.action, matched=len(page.items), done=done, skipped=skipped)


class ReindexRequest(ReindexOptions):
    model: str | None = Field(
        default=None,
        pattern=MODEL_PATTERN,
        description="embedding model of the new index; default: the live index's",
    )
    reason: str = Field(default="", max_length=2000)


@router.post(
    "/reindex", status_code=202, response_model=ActionAccepted, responses=ACCEPTED_RESPONSE
)
async def reindex(
    rt: RuntimeDep, who: Operator, response: Response, body: ReindexRequest
) -> ActionAccepted:
    """Start a re-index (one at a time: a second request joins the running one). Follow it
    at GET /v1/tasks/{task_id} (`Location`); search answers from the live index throughout."""
    options = ReindexOptions.model_validate(body.model_dump(exclude={"model", "reason"}))
    ref = await start_reindex(rt.service, options, model=body.model, actor=who, reason=body.reason)
    accepted(response, ref.task_id)
    return ActionAccepted(task_id=ref.task_id, action="reindex", run_id=ref.run_id)


class IndexCollectionInfo(BaseModel):
    name: str
    points: int
    live: bool
    # Points not in the vector index (HNSW) yet: the embedded engine is building it in the
    # background (search scans them exactly meanwhile). A server reports none here.
    unindexed: int = 0


class IndexInfo(BaseModel):
    live_collection: str
    model: str
    chunk_tokens: int | None
    # The tokenization of the live collection's keyword vectors, and whether it is this
    # version's (false: `knowledgeops reindex` rebuilds them with it; until then the collection
    # keeps its own, for its documents and queries alike).
    keyword_tokenization: str
    keyword_tokenization_current: bool
    collections: list[IndexCollectionInfo]


@router.get("/index", response_model=IndexInfo)
async def index_info(rt: RuntimeDep) -> IndexInfo:
    """The live index (collection, embedding model, chunk size) and every index collection:
    one being built by a re-index, or in its grace period, shows up here."""
    live = await rt.resources.live_index()
    names = await index_collections(rt.store)
    unindexed = await rt.store.unindexed()
    tokenization = await rt.store.keyword_tokenization(live.collection)
    return IndexInfo(
        live_collection=live.collection,
        model=live.model,
        chunk_tokens=live.chunking.chunk_tokens if live.chunking else None,
        keyword_tokenization=tokenization,
        keyword_tokenization_current=tokenization == SPARSE_MODEL,
        collections=[
            IndexCollectionInfo(
                name=n,
                points=await rt.store.count(n, staged=True),
                live=n == live.collection,
                unindexed=unindexed.get(n, 0),
            )
            for n in names
        ],
    )


@router.get("/workers", response_model=list[tq.WorkerInfo])
async def workers(rt: RuntimeDep) -> list[tq.WorkerInfo]:
    """Workers that polled a queue in the last 90 s (Temporal lists dead ones for ~5 min)."""
    return await tq.live_workers(rt.client, rt.settings)


class AuditRecord(BaseModel):
    id: int
    at: datetime
    actor: str
    action: str
    task_ids: list[str]
    reason: str
    outcome: str
    details: dict[str, Any]


@router.get("/audit", response_model=list[AuditRecord])
async def audit_log(
    rt: RuntimeDep,
    actor: str | None = None,
    action: str | None = None,
    task_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
) -> list[AuditRecord]:
    rows = await AuditLog(rt.db).records(
        actor=actor,
        action=action,
        task_id=task_id,
        since=since,
        until=until,
        limit=limit,
        before_id=before_id,
    )
    return [AuditRecord.model_validate(r, from_attributes=True) for r in rows]


__all__ = ["Runtime", "router"]
