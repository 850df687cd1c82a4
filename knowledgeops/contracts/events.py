"""Domain events of tasks: the contract between workflows (which emit them through an
activity), the database (which stores them once per event id) and consumers (API, webhooks)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, model_validator

from knowledgeops.contracts.base import ActivityRef

# Memo key a manual retry sets on the new run: the run id it retries.
RETRY_OF_MEMO = "retry_of"


class EventType(StrEnum):
    TASK_ENQUEUED = "TaskEnqueued"
    TASK_STARTED = "TaskStarted"
    TASK_COMPLETED = "TaskCompleted"
    TASK_FAILED = "TaskFailed"
    TASK_CANCELLED = "TaskCancelled"
    TASK_RETRIED = "TaskRetried"
    # Closings no workflow code sees; recorded by the reconciler (runtime/operator_actions.py).
    TASK_TERMINATED = "TaskTerminated"
    TASK_TIMED_OUT = "TaskTimedOut"


class TaskEvent(BaseModel):
    # Deterministic (task id, run id, event type; derived from them unless given): an activity
    # retry re-sends the same id and the store keeps one copy, so consumers see each event
    # once per id.
    event_id: str = ""
    event_type: EventType
    task_id: str
    run_id: str
    task_type: str
    attempt: int = 1
    at: datetime
    error: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _derived_id(self) -> TaskEvent:
        if not self.event_id:
            self.event_id = f"{self.task_id}/{self.run_id}/{self.event_type.value}"
        return self


class StoredEvent(TaskEvent):
    """An event as consumers read it; `seq` is the cursor (`after=`)."""

    seq: int


# Every workflow records its events through this (local) activity; see workflows/base.py.
RECORD_TASK_EVENTS: ActivityRef[list[TaskEvent], int] = ActivityRef(
    "record_task_events", list[TaskEvent], int
)
