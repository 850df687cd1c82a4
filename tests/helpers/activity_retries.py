"""Which activities of a task were retried, and how the attempt before each retry ended: what
a crash-resume test asserts (a heartbeat timeout after a kill, a worker's hand-back on SIGTERM)."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client


async def retries(client: Client, task_id: str) -> dict[str, str]:
    """The task's retried activities (latest run) and how the attempt before each one's last
    attempt ended: a timeout's type ("HEARTBEAT": the server gave up on it) or the type of the
    failure a worker reported ("WorkerShutdown": a draining worker handed it back)."""
    names: dict[int, str] = {}
    ended: dict[str, str] = {}
    async for e in client.get_workflow_handle(task_id).fetch_history_events():
        if e.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            a = e.activity_task_started_event_attributes
            if a.attempt > 1:
                f = a.last_failure
                if f.HasField("timeout_failure_info"):
                    how = TimeoutType.Name(f.timeout_failure_info.timeout_type)
                    ended[names[a.scheduled_event_id]] = how.removeprefix("TIMEOUT_TYPE_")
                else:
                    ended[names[a.scheduled_event_id]] = (
                        f.application_failure_info.type or f.message
                    )
    return ended
