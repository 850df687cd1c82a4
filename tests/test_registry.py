"""The registry's rules: every type declared, bounded retries, heartbeats on long activities."""

from __future__ import annotations

from datetime import timedelta

import pytest

from knowledgeops.task_types import (
    MAX_HEARTBEAT_TIMEOUT,
    REGISTRY,
    TaskNotImplementedError,
    TaskType,
    spec_for,
)
from starter.service import TaskQueueService
from tests.conftest import Env
from workflows import WORKFLOWS

# An activity allowed to run longer than this must heartbeat.
SHORT_ACTIVITY = timedelta(seconds=30)


def test_every_task_type_is_registered() -> None:
    assert set(REGISTRY) == set(TaskType)
    assert len(REGISTRY) == 12


@pytest.mark.parametrize("task_type", list(TaskType))
def test_activity_rules(task_type: TaskType) -> None:
    spec = REGISTRY[task_type]
    assert spec.execution_timeout > timedelta(0)
    for name, act in spec.activities.items():
        assert act.retry_policy.maximum_attempts > 0, f"{task_type}.{name}: unbounded retries"
        if act.start_to_close > SHORT_ACTIVITY:
            assert act.heartbeat_timeout is not None, f"{task_type}.{name} must heartbeat"
        if act.heartbeat_timeout is not None:
            assert act.heartbeat_timeout <= MAX_HEARTBEAT_TIMEOUT, f"{task_type}.{name}"
            assert act.heartbeat_timeout < act.start_to_close


def test_registered_workflows_exist_and_no_others() -> None:
    defined = {w.__temporal_workflow_definition.name for w in WORKFLOWS}  # type: ignore[attr-defined]
    registered = {s.workflow for s in REGISTRY.values() if s.workflow}
    assert defined == registered


def test_unknown_type_is_a_clear_error() -> None:
    with pytest.raises(LookupError, match="Unknown task type 'NOPE'"):
        spec_for("NOPE")


async def test_starting_a_type_without_workflow_is_refused(env: Env) -> None:
    service: TaskQueueService = env.service
    with pytest.raises(TaskNotImplementedError, match="OCR_PROCESS is registered but has no"):
        await service.enqueue(TaskType.OCR_PROCESS, {"file_id": "x", "document_id": "d1"})


def test_worker_registers_exactly_the_declared_activities() -> None:
    from activities.document_import import ImportActivities
    from activities.task_events import EventActivities

    names = {
        fn.__temporal_activity_definition.name
        for cls in (ImportActivities, EventActivities)
        for fn in vars(cls).values()
        if hasattr(fn, "__temporal_activity_definition")
    }
    assert names == set(REGISTRY[TaskType.DOCUMENT_IMPORT].activities)
