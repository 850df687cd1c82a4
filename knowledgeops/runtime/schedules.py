"""Temporal Schedules of the task types the registry declares `schedule` for (backup, cleanup,
report): created or updated idempotently at worker start, managed with `knowledgeops schedules`.

A schedule starts the type's workflow exactly as `TaskQueueService.enqueue` would (queue,
execution timeout, `TaskType` search attribute), with the payload the registry declares; its
runs are tasks like any other. Overlap policy SKIP: a backup still running when the next one is
due is not doubled. The schedule id is the deployment prefix + `schedule-<type>`.
"""

from __future__ import annotations

from pydantic import BaseModel
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleHandle,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from knowledgeops.config.settings import Settings
from knowledgeops.registry.task_types import (
    REGISTRY,
    TaskSpec,
    TaskType,
    spec_for,
    task_search_attributes,
)


class ScheduleInfo(BaseModel):
    schedule_id: str
    task_type: str
    cron: list[str]
    paused: bool
    note: str | None = None
    next_runs: list[str] = []
    recent_runs: list[str] = []


def scheduled_specs() -> list[TaskSpec]:
    return [s for s in REGISTRY.values() if s.schedule is not None]


def schedule_id(settings: Settings, task_type: TaskType) -> str:
    return settings.task_id(f"schedule-{task_type.value.lower()}")


def _schedule(settings: Settings, spec: TaskSpec, cron: str) -> Schedule:
    assert spec.schedule is not None and spec.workflow_name is not None
    return Schedule(
        action=ScheduleActionStartWorkflow(
            spec.workflow_name,
            spec.payload_model.model_validate(dict(spec.schedule.payload)),
            # Temporal appends each run's scheduled time, so every run has its own task id.
            id=settings.task_id(spec.task_type.task_name("scheduled")),
            task_queue=settings.queue(spec.task_queue.value),
            execution_timeout=spec.execution_timeout,
            typed_search_attributes=task_search_attributes(spec.task_type),
            memo={"requested_by": "schedule"},
            static_summary=f"{spec.summary} (scheduled)",
        ),
        spec=ScheduleSpec(cron_expressions=[cron]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )


async def ensure_schedules(client: Client, settings: Settings) -> list[str]:
    """Create or update the schedule of every scheduled type; remove those whose setting is
    empty. Safe to run at every start, by any number of processes. Returns the ids kept."""
    kept = []
    for spec in scheduled_specs():
        assert spec.schedule is not None
        sid = schedule_id(settings, spec.task_type)
        cron = str(getattr(settings, spec.schedule.setting)).strip()
        handle = client.get_schedule_handle(sid)
        if not cron:
            await _delete_if_present(handle)
            continue
        wanted = _schedule(settings, spec, cron)
        try:
            await client.create_schedule(sid, wanted)
        except ScheduleAlreadyRunningError:

            def keep_state(current: ScheduleUpdateInput, new: Schedule = wanted) -> ScheduleUpdate:
                # A pause set by an operator survives restarts.
                new.state = current.description.schedule.state
                return ScheduleUpdate(schedule=new)

            await handle.update(keep_state)
        kept.append(sid)
    return kept


async def _delete_if_present(handle: ScheduleHandle) -> None:
    try:
        await handle.delete()
    except RPCError as e:
        if e.status != RPCStatusCode.NOT_FOUND:
            raise


def _handle(client: Client, settings: Settings, task_type: str) -> ScheduleHandle:
    spec = spec_for(task_type.upper())
    if spec.schedule is None:
        scheduled = ", ".join(s.task_type.value for s in scheduled_specs())
        raise LookupError(f"{spec.task_type} has no schedule; scheduled types: {scheduled}")
    return client.get_schedule_handle(schedule_id(settings, spec.task_type))


async def list_schedules(client: Client, settings: Settings) -> list[ScheduleInfo]:
    out = []
    for spec in scheduled_specs():
        assert spec.schedule is not None
        handle = client.get_schedule_handle(schedule_id(settings, spec.task_type))
        try:
            desc = await handle.describe()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                continue  # not created: its setting is empty, or no worker has started yet
            raise
        out.append(
            ScheduleInfo(
                schedule_id=handle.id,
                task_type=spec.task_type.value,
                # The server keeps a cron as calendar specs; show the expression configured.
                cron=[str(getattr(settings, spec.schedule.setting))],
                paused=desc.schedule.state.paused,
                note=desc.schedule.state.note,
                next_runs=[t.isoformat() for t in desc.info.next_action_times[:3]],
                recent_runs=[a.action.workflow_id for a in desc.info.recent_actions[-3:]],  # type: ignore[attr-defined]
            )
        )
    return out


async def pause(client: Client, settings: Settings, task_type: str, note: str) -> None:
    await _handle(client, settings, task_type).pause(note=note)


async def unpause(client: Client, settings: Settings, task_type: str, note: str) -> None:
    await _handle(client, settings, task_type).unpause(note=note)


async def trigger(client: Client, settings: Settings, task_type: str) -> None:
    """Run it now (the overlap policy still applies)."""
    await _handle(client, settings, task_type).trigger()
