"""Recording domain events: workflows call this activity, so a crash cannot lose an event
(Temporal retries the activity) and a retry cannot duplicate one (ids are deterministic)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity

from activities.database import Database
from knowledgeops.events import TaskEvent


class EventActivities:
    def __init__(self, db: Database) -> None:
        self.db = db

    @activity.defn(name="record_task_events")
    async def record_task_events(self, events: list[TaskEvent]) -> int:
        return await self.db.record_events(events)

    def all(self) -> list[Callable[..., Any]]:
        return [self.record_task_events]
