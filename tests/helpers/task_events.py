"""A task event as a workflow records it, for tests of the event store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from knowledgeops.contracts.events import EventType, TaskEvent


def event(task: str, kind: EventType, n: int = 0) -> TaskEvent:
    return TaskEvent(
        event_id=f"{task}/run/{kind.value}",
        event_type=kind,
        task_id=task,
        run_id="run",
        task_type="REPORT_GENERATE",
        at=datetime.now(UTC) + timedelta(milliseconds=n),
    )
