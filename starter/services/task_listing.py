"""The admin task list (GET /v1/admin/tasks): pages of the projection of the domain events
(knowledgeops/db/task_list.py), asking Temporal only what events cannot tell: whether a
worker began an open task. And the service's note of a run it started, listed before any
worker records its events."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from knowledgeops.config.settings import Settings
from knowledgeops.db.task_list import OPEN_STATUSES, ListKey, TaskList, TaskListEntry, key_of
from starter.services.task_models import TaskRef
from starter.services.task_queries import TaskFilter, TaskPage, TaskSummary, is_pending

log = logging.getLogger(__name__)

# A pending / running filter asks Temporal about each open row: a page looks at no more rows
# than this (or twice its limit), then answers with what it found and a cursor past them.
MIN_OPEN_ROWS_CHECKED = 500
CHECKS_AT_ONCE = 16


async def list_tasks(
    client: Client,
    task_list: TaskList,
    settings: Settings,
    flt: TaskFilter,
    limit: int = 50,
    after: ListKey | None = None,
) -> TaskPage:
    """Newest first (the run's start, then task id), keyset-paged: a walk with the cursors
    meets every task once. `pending` and `running` are both Temporal's Running, so for those
    two filters each open task's Temporal state decides (`_open_tasks`)."""
    scope: dict[str, Any] = {
        "task_type": flt.task_type.value if flt.task_type else None,
        "since": flt.since,
        "until": flt.until,
        "prefix": settings.prefix,
    }
    if flt.status in ("pending", "running"):
        return await _open_tasks(client, task_list, flt.status, scope, limit, after)
    statuses = (flt.status,) if flt.status else ()
    rows, more = await task_list.page(statuses=statuses, after=after, limit=limit, **scope)
    return TaskPage(
        items=[summary_of(r) for r in rows], next_cursor=key_of(rows[-1]).encode() if more else None
    )


async def _open_tasks(
    client: Client,
    task_list: TaskList,
    wanted: str,
    scope: dict[str, Any],
    limit: int,
    after: ListKey | None,
) -> TaskPage:
    """Open rows whose task is `wanted` (pending / running) in Temporal. A row still "pending"
    has no event yet: no worker ran its task, so it is taken as it is; a "running" one may
    still wait for its first activity, so its task is described (CHECKS_AT_ONCE at a time)."""
    statuses = OPEN_STATUSES if wanted == "pending" else ("running",)
    gate = asyncio.Semaphore(CHECKS_AT_ONCE)

    async def check(row: TaskListEntry) -> str | None:
        async with gate:
            return await _open_status(client, row.task_id)

    items: list[TaskSummary] = []
    budget = max(MIN_OPEN_ROWS_CHECKED, 2 * limit)
    while True:
        rows, more = await task_list.page(statuses=statuses, after=after, limit=limit, **scope)
        verdicts = iter(await asyncio.gather(*(check(r) for r in rows if r.status == "running")))
        for i, row in enumerate(rows):
            status = next(verdicts) if row.status == "running" else row.status
            after = key_of(row)
            if status == wanted:
                items.append(summary_of(row, status))
                if len(items) == limit:
                    rest = more or i < len(rows) - 1
                    return TaskPage(items=items, next_cursor=after.encode() if rest else None)
        budget -= len(rows)
        if not more:
            return TaskPage(items=items, next_cursor=None)
        if budget <= 0 and after is not None:
            return TaskPage(items=items, next_cursor=after.encode())


async def _open_status(client: Client, task_id: str) -> str | None:
    """Whether a task open in Temporal is "pending" or "running"; None if it is not open
    (closed, its closing event on the way; or gone, removed by Temporal's retention)."""
    try:
        desc = await client.get_workflow_handle(task_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return None
    pending = is_pending(await desc.memo(), desc.raw_description.pending_activities)
    return "pending" if pending else "running"


def summary_of(row: TaskListEntry, status: str | None = None) -> TaskSummary:
    return TaskSummary(
        task_id=row.task_id,
        run_id=row.run_id,
        task_type=row.task_type or None,
        status=status or row.status,
        started_at=row.started_at,
        closed_at=row.closed_at,
        picked_up_at=row.picked_up_at,
        duration_seconds=row.duration_seconds,
        document_id=row.document_id,
        owner=row.owner,
        attempts=row.attempts,
    )


async def list_started(
    task_list: TaskList | None,
    ref: TaskRef,
    document_id: str | None = None,
    owner: str | None = None,
) -> None:
    """List a run the service just started as pending (with a database). A failure costs
    only that: the run goes on, and its first event lists it."""
    if task_list is None or ref.run_id is None:
        return
    try:
        await task_list.seed(
            task_id=ref.task_id,
            run_id=ref.run_id,
            task_type=ref.task_type.value,
            document_id=document_id,
            owner=owner,
        )
    except SQLAlchemyError:
        log.warning(
            "task %s (run %s) started but could not be listed as pending; it is listed once "
            "a worker records its start",
            ref.task_id,
            ref.run_id,
            exc_info=True,
        )
