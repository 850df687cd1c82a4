"""What TaskQueueService answers and raises: task references, status and progress (from a
run's memo and its running activity's heartbeat checkpoint), and its errors."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from knowledgeops.contracts.base import Checkpoint, Progress
from knowledgeops.registry.task_types import TaskType, spec_for
from starter.services.task_queries import FINISHED


class TaskRef(BaseModel):
    task_id: str
    run_id: str | None
    task_type: TaskType


class TaskProgress(Progress):
    percent: float | None = None
    eta_seconds: float | None = None


class TaskStatus(BaseModel):
    task_id: str
    task_type: str | None
    status: str
    progress: TaskProgress
    attempts: int = 0
    last_error: str | None = None
    started_at: datetime | None = None
    closed_at: datetime | None = None
    result: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class TaskNotFoundError(LookupError):
    pass


class TaskFinishedError(RuntimeError):
    pass


class PayloadInvalidError(ValueError):
    pass


class PayloadTooLargeError(ValueError):
    pass


class TaskNotRetryableError(RuntimeError):
    """Only failed, terminated or timed-out tasks can be retried (409 at the API)."""


def memo_progress(raw: Any, task_type: str | None) -> TaskProgress:
    """The memo's progress; before the workflow first wrote it, pending in the type's unit."""
    if raw:
        try:
            return TaskProgress.model_validate(raw)
        except ValidationError:
            pass  # written by another workflow version: show the type's empty progress
    try:
        return TaskProgress(unit=spec_for(task_type or "").progress_unit)
    except LookupError:
        return TaskProgress()  # not one of ours (no TaskType attribute)


def checkpoint_progress(details: Any) -> Checkpoint | None:
    """A heartbeat's details as progress, when they are a checkpoint (any type's)."""
    try:
        return Checkpoint.model_validate(details)
    except ValidationError:
        return None


def with_eta(p: TaskProgress, started: datetime | None) -> TaskProgress:
    if p.total:
        p.percent = round(100.0 * p.done / p.total, 1)
        if started is not None and 0 < p.done < p.total:
            elapsed = (datetime.now(UTC) - started).total_seconds()
            p.eta_seconds = round(elapsed * (p.total - p.done) / p.done, 1)
    return p
