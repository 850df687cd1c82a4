"""Read-side queries for the admin API: its models, task details, overview, workers.

Details, runs, the overview and workers are read from Temporal (describe, history,
visibility); the task list from the projection of the domain events
(starter/services/task_listing.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel
from temporalio.api.enums.v1 import (
    EventType,
    PendingActivityState,
    TaskQueueKind,
    TaskQueueType,
)
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.taskqueue.v1 import TaskQueue as TaskQueueProto
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.base import BEGAN_MEMO
from knowledgeops.contracts.events import RETRY_OF_MEMO
from knowledgeops.registry.task_types import TASK_TYPE_SEARCH_ATTRIBUTE, TaskQueue, TaskType

# Our status vocabulary ("pending" is Running that no worker picked up yet).
StatusName = Literal[
    "pending", "running", "completed", "failed", "cancelled", "terminated", "timed_out"
]
# Each status as the visibility store names it (for the overview's counts).
VISIBILITY_STATUS: dict[str, str] = {
    "pending": "Running",
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Canceled",
    "terminated": "Terminated",
    "timed_out": "TimedOut",
}
_FROM_VISIBILITY = {v: k for k, v in VISIBILITY_STATUS.items() if k != "pending"} | {
    "ContinuedAsNew": "running"
}
# describe_task_queue lists pollers seen in the last ~5 minutes; newer than this is "live".
LIVE_WORKER_WINDOW = timedelta(seconds=90)
INPUT_SUMMARY_CHARS = 2000


class TaskSummary(BaseModel):
    task_id: str
    run_id: str
    task_type: str | None
    status: str
    # The run's start in Temporal (when it was enqueued); the list's order.
    started_at: datetime | None
    closed_at: datetime | None
    # When a worker took the run up (its TaskStarted event).
    picked_up_at: datetime | None = None
    # From started_at to closed_at; None while the run is open.
    duration_seconds: float | None = None
    document_id: str | None = None
    owner: str | None = None
    # Runs of this task id that began: the first, manual retries, re-imports, resets.
    attempts: int = 0


class TaskPage(BaseModel):
    items: list[TaskSummary]
    next_cursor: str | None


class TaskFilter(BaseModel):
    task_type: TaskType | None = None
    status: StatusName | None = None
    since: datetime | None = None
    until: datetime | None = None


class ActivityAttempt(BaseModel):
    activity: str
    activity_id: str
    attempt: int
    scheduled_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str = "running"
    error: str | None = None
    # Run as a local activity (a small document's import steps): recorded once it ended, as
    # a marker, with the attempt that ended it; no scheduled / started times of its own.
    local: bool = False


class RunInfo(BaseModel):
    run_id: str
    status: str
    started_at: datetime | None
    closed_at: datetime | None
    retry_of: str | None = None


class TaskDetail(BaseModel):
    status: Any  # TaskStatus (starter.services.tasks); typed loosely to keep this module below it
    input: Any
    activities: list[dict[str, Any]]
    runs: list[RunInfo]
    last_checkpoint: dict[str, Any] | None


class WorkerInfo(BaseModel):
    identity: str
    task_queue: str
    kind: str
    last_seen: datetime | None


class QueueStats(BaseModel):
    task_queue: str
    backlog_count: int
    backlog_age_seconds: float
    tasks_add_rate: float
    tasks_dispatch_rate: float
    workers: list[WorkerInfo]


class Overview(BaseModel):
    task_types: dict[str, dict[str, int]]
    queues: list[QueueStats]


def status_name(status: WorkflowExecutionStatus | None) -> str:
    return _STATUS.get(status, "running") if status is not None else "running"


_STATUS = {
    WorkflowExecutionStatus.RUNNING: "running",
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "running",
}
FINISHED = frozenset({"completed", "failed", "cancelled", "terminated", "timed_out"})


def _summary(w: WorkflowExecution) -> TaskSummary:
    return TaskSummary(
        task_id=w.id,
        run_id=w.run_id,
        task_type=w.typed_search_attributes.get(TASK_TYPE_SEARCH_ATTRIBUTE),
        status=status_name(w.status),
        started_at=w.start_time,
        closed_at=w.close_time,
    )


def is_pending(memo: Mapping[str, Any], pending_activities: Sequence[Any]) -> bool:
    """A running task no worker has begun: no activity of the run completed (the workflow base
    sets the `began` memo) and none is started or being retried now."""
    return not memo.get(BEGAN_MEMO) and all(
        pa.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED and pa.attempt <= 1
        for pa in pending_activities
    )


async def runs_of(client: Client, task_id: str) -> list[RunInfo]:
    """Every run of a task id (retries and re-imports), newest first."""
    runs: list[RunInfo] = []
    async for w in client.list_workflows(f"WorkflowId = {json.dumps(task_id)}"):
        memo = await w.memo()
        s = _summary(w)
        runs.append(
            RunInfo(
                run_id=w.run_id,
                status=s.status,
                started_at=w.start_time,
                closed_at=w.close_time,
                retry_of=memo.get(RETRY_OF_MEMO),
            )
        )
    runs.sort(key=lambda r: r.started_at or datetime.min.replace(tzinfo=UTC), reverse=True)
    return runs


async def execution_log(client: Client, task_id: str, run_id: str | None = None) -> dict[str, Any]:
    """Input summary and every activity attempt (start / end / error) of one run."""
    history = await client.get_workflow_handle(task_id, run_id=run_id).fetch_history()
    attempts: dict[int, ActivityAttempt] = {}
    input_summary: Any = None
    for e in history.events:
        t = e.event_type
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = e.workflow_execution_started_event_attributes.input.payloads
            values = await client.data_converter.decode(payloads) if payloads else []
            text = json.dumps(values[0] if values else None, default=str, ensure_ascii=False)
            input_summary = (
                values[0]
                if len(text) <= INPUT_SUMMARY_CHARS
                else text[:INPUT_SUMMARY_CHARS] + "..."
            )
        elif t == EventType.EVENT_TYPE_MARKER_RECORDED:
            local = _local_activity(e)
            if local is not None:
                attempts[e.event_id] = local
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = e.activity_task_scheduled_event_attributes
            attempts[e.event_id] = ActivityAttempt(
                activity=a.activity_type.name,
                activity_id=a.activity_id,
                attempt=1,
                scheduled_at=e.event_time.ToDatetime(UTC),
            )
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            a2 = e.activity_task_started_event_attributes
            rec = attempts[a2.scheduled_event_id]
            rec.attempt = a2.attempt
            rec.started_at = e.event_time.ToDatetime(UTC)
            if a2.HasField("last_failure") and a2.last_failure.message:
                rec.error = a2.last_failure.message  # why the previous attempts failed
        else:
            outcome = {
                EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: (
                    "completed",
                    "activity_task_completed_event_attributes",
                ),
                EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: (
                    "failed",
                    "activity_task_failed_event_attributes",
                ),
                EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: (
                    "timed_out",
                    "activity_task_timed_out_event_attributes",
                ),
                EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: (
                    "cancelled",
                    "activity_task_canceled_event_attributes",
                ),
            }.get(t)
            if outcome is None:
                continue
            attrs = getattr(e, outcome[1])
            rec = attempts[attrs.scheduled_event_id]
            rec.outcome = outcome[0]
            rec.ended_at = e.event_time.ToDatetime(UTC)
            failure = getattr(attrs, "failure", None)
            if failure is not None and failure.message:
                rec.error = failure.message
    return {
        "input": input_summary,
        "activities": [a.model_dump(mode="json") for a in attempts.values()],
    }


# What the SDK's core names the marker of a local activity's result.
_LOCAL_ACTIVITY_MARKER = "core_local_activity"


def _local_activity(e: HistoryEvent) -> ActivityAttempt | None:
    """The attempt a local activity's result marker records (None for other markers and for
    domain-event recording, which is bookkeeping, not a step)."""
    marker = e.marker_recorded_event_attributes
    if marker.marker_name != _LOCAL_ACTIVITY_MARKER or "data" not in marker.details:
        return None
    data = json.loads(marker.details["data"].payloads[0].data)
    if data.get("activity_type") in (None, "record_task_events"):
        return None
    failed = marker.HasField("failure")
    return ActivityAttempt(
        activity=data["activity_type"],
        activity_id=str(data.get("activity_id", "")),
        attempt=int(data.get("attempt", 1)),
        ended_at=e.event_time.ToDatetime(UTC),
        outcome="failed" if failed else "completed",
        error=marker.failure.message if failed else None,
        local=True,
    )


async def last_checkpoint(client: Client, task_id: str) -> dict[str, Any] | None:
    """The last heartbeat checkpoint of a running activity, whatever the task type."""
    desc = await client.get_workflow_handle(task_id).describe()
    for pa in desc.raw_description.pending_activities:
        if pa.heartbeat_details.payloads:
            [details] = await client.data_converter.decode(pa.heartbeat_details.payloads)
            fields = details if isinstance(details, dict) else {"details": details}
            return fields | {"activity": pa.activity_type.name, "attempt": pa.attempt}
    return None


async def overview(client: Client, settings: Settings) -> Overview:
    counts: dict[str, dict[str, int]] = {}
    for t in TaskType:
        query = f"{TASK_TYPE_SEARCH_ATTRIBUTE.name} = {json.dumps(t.value)}"
        if settings.prefix:
            query += f" AND WorkflowId STARTS_WITH {json.dumps(settings.prefix)}"
        result = await client.count_workflows(query + " GROUP BY ExecutionStatus")
        counts[t.value] = {
            _FROM_VISIBILITY.get(str(g.group_values[0]), str(g.group_values[0])): g.count
            for g in result.groups
        }
    queues = [await queue_stats(client, settings, settings.queue(q.value)) for q in TaskQueue]
    return Overview(task_types=counts, queues=queues)


async def queue_stats(client: Client, settings: Settings, name: str) -> QueueStats:
    backlog, age, add, dispatch = 0, 0.0, 0.0, 0.0
    workers: list[WorkerInfo] = []
    now = datetime.now(UTC)
    for kind, label in (
        (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, "workflow"),
        (TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY, "activity"),
    ):
        resp = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=settings.temporal_namespace,
                task_queue=TaskQueueProto(name=name, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                task_queue_type=kind,
                report_stats=True,
            )
        )
        if resp.HasField("stats"):
            st = resp.stats
            backlog += st.approximate_backlog_count
            age = max(age, st.approximate_backlog_age.ToTimedelta().total_seconds())
            add += st.tasks_add_rate
            dispatch += st.tasks_dispatch_rate
        for p in resp.pollers:
            seen = p.last_access_time.ToDatetime(UTC) if p.HasField("last_access_time") else None
            if seen is not None and now - seen <= LIVE_WORKER_WINDOW:
                workers.append(
                    WorkerInfo(identity=p.identity, task_queue=name, kind=label, last_seen=seen)
                )
    return QueueStats(
        task_queue=name,
        backlog_count=backlog,
        backlog_age_seconds=round(age, 3),
        tasks_add_rate=round(add, 3),
        tasks_dispatch_rate=round(dispatch, 3),
        workers=workers,
    )


async def live_workers(client: Client, settings: Settings) -> list[WorkerInfo]:
    out: list[WorkerInfo] = []
    for q in TaskQueue:
        out.extend((await queue_stats(client, settings, settings.queue(q.value))).workers)
    return out
