"""What a task's Temporal history shows: which activities started, and when."""

from __future__ import annotations

import json
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from knowledgeops.contracts.events import RECORD_TASK_EVENTS


@dataclass(frozen=True)
class ActivityStart:
    """One started activity of a task, as its history records it."""

    activity: str
    attempt: int
    # The worker's identity ("knowledgeops:<pid>@<host>"); empty for a local activity.
    identity: str = ""
    local: bool = False

    @property
    def pid(self) -> int:
        return int(self.identity.rpartition(":")[2].partition("@")[0])


async def activity_starts(client: Client, task_id: str) -> list[ActivityStart]:
    """Every ActivityTaskStarted event of the task's latest run (with the attempt and worker
    that ran it) and every local activity's result marker (a small document's steps: the
    attempt that ended it), in history order, leaving out domain-event recording."""
    names: dict[int, str] = {}
    out: list[ActivityStart] = []
    async for e in client.get_workflow_handle(task_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            a = e.activity_task_started_event_attributes
            out.append(ActivityStart(names[a.scheduled_event_id], a.attempt, a.identity))
        elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = e.marker_recorded_event_attributes
            if marker.marker_name == "core_local_activity":
                data = json.loads(marker.details["data"].payloads[0].data)
                out.append(ActivityStart(data["activity_type"], data["attempt"], local=True))
    return [s for s in out if s.activity != RECORD_TASK_EVENTS.name]
