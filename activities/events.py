"""Recording domain events: workflows call this (local) activity, so a crash cannot lose an
event (Temporal retries it) and a retry cannot duplicate one (ids are deterministic)."""

from __future__ import annotations

from temporalio import activity

from knowledgeops.contracts.events import RECORD_TASK_EVENTS, TaskEvent
from knowledgeops.db.events import EventStore
from knowledgeops.observability import metrics
from knowledgeops.runtime.resources import Resources


class EventActivities:
    def __init__(self, resources: Resources) -> None:
        self.events = EventStore(resources.db)

    @activity.defn(name=RECORD_TASK_EVENTS.name)
    async def record_task_events(self, events: list[TaskEvent]) -> int:
        return await self.events.record(events, on_new=metrics.task_event)
