"""The platform part of every workflow, written once: domain events, the progress memo,
activity options from the registry, cleanup on failure or cancel.

A task workflow subclasses `TaskWorkflow`, sets `task_type`, and holds only its steps:

    @workflow.defn(name="...")
    class MyWorkflow(TaskWorkflow[MyPayload, MyResult]):
        task_type = TaskType.MY_TYPE

        @workflow.run
        async def run(self, payload: MyPayload) -> MyResult:
            return await self.run_task(payload)   # Temporal wants @workflow.run on the class

        async def steps(self, payload: MyPayload) -> MyResult:
            self.stage("working", total=n)
            out = await self.activity(MY_ACTIVITY, MyRequest(...))
            ...

Events: TaskEnqueued (or TaskRetried for a manual retry), TaskStarted, then one of
TaskCompleted / TaskFailed / TaskCancelled; a run cancelled while still queued records its
first event and TaskCancelled. Activity retries inside a run record nothing. Events are
recorded by a local activity: its result is a marker in the workflow task that ran it, so a
recording costs no round trip through the task queue (measured: an import's history shrank
from 32 to 22 events and from 5 workflow tasks to 3). Still durable: if the worker dies before
that workflow task completes, the task is retried and the activity runs again (event ids are
deterministic, the database stores each once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import FailureError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.base import (
        BEGAN_MEMO,
        OWNER_MEMO,
        PROGRESS_MEMO,
        ActivityRef,
        Progress,
    )
    from knowledgeops.contracts.events import (
        RECORD_TASK_EVENTS,
        RETRY_OF_MEMO,
        EventType,
        TaskEvent,
    )
    from knowledgeops.errors import failure_text
    from knowledgeops.registry.task_types import (
        EXPRESS_PRIORITY,
        REGISTRY,
        TaskType,
        activity_options,
        task_search_attributes,
    )

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
Child = TypeVar("Child")
In = TypeVar("In")
Out = TypeVar("Out")


class TaskWorkflow(Generic[P, R]):
    task_type: ClassVar[TaskType]

    def __init__(self) -> None:
        self._progress = Progress(unit=REGISTRY[self.task_type].progress_unit)
        self._began = False
        self._compensations: list[tuple[str, Callable[[], Awaitable[Any]]]] = []

    # -- what a workflow file provides ------------------------------------------------------

    async def steps(self, payload: P) -> R:
        raise NotImplementedError

    def event_data(self, payload: P) -> dict[str, Any]:
        """What every event of this run carries (ids a consumer needs, never content)."""
        return {}

    def first_event_data(self, payload: P) -> dict[str, Any]:
        """What the first event (TaskEnqueued / TaskRetried) carries for projections."""
        return self.event_data(payload)

    # -- what a workflow file calls ---------------------------------------------------------

    async def activity(self, ref: ActivityRef[In, Out], arg: In, *, local: bool = False) -> Out:
        """Run an activity with the options the registry declares for it. `local`: as a local
        activity in this workflow task, on this worker, for steps known to take under a
        second: no task-queue round trips (each costs the server a workflow task and an
        activity task), so a small document's import is one workflow task, not six."""
        options = activity_options(self.task_type, ref.name)
        result: Out
        if local:
            result = await workflow.execute_local_activity(
                ref.name, arg, result_type=ref.output, **options.as_local_kwargs()
            )
        else:
            kwargs = options.as_kwargs()
            if options.task_queue is not None:
                # Queue names carry the deployment prefix; this workflow's own queue has it.
                kwargs["task_queue"] = self.task_id_for(options.task_queue.value)
            result = await workflow.execute_activity(
                ref.name, arg, result_type=ref.output, **kwargs
            )
        self._began = True
        return result

    @staticmethod
    def express() -> bool:
        """Whether this task runs at EXPRESS_PRIORITY (a small document's import)."""
        return _priority_key() == EXPRESS_PRIORITY

    def task_id_for(self, name: str) -> str:
        """`name` with this deployment's prefix (task ids and queue names carry it)."""
        own = REGISTRY[self.task_type].task_queue.value
        return workflow.info().task_queue.removesuffix(own) + name

    def child_task_id(self, task_type: TaskType, suffix: str) -> str:
        """The id `child_task(task_type, ..., suffix=suffix)` starts its child under."""
        return self.task_id_for(task_type.task_name(suffix))

    async def child_task(
        self,
        task_type: TaskType,
        payload: Any,
        result_type: type[Child],
        *,
        suffix: str,
        owner: str | None = None,
        requested_by: str | None = None,
    ) -> Child:
        """Run another task type as a child workflow, started the way the service starts
        tasks (id named after its type, deployment prefix, TaskType attribute, the type's
        queue and timeout, requester and owner memo), so it is visible, filterable and
        cancellable on its own in the Web UI. Cancelling this task cancels the child."""
        info = workflow.info()
        spec = REGISTRY[task_type]
        memo: dict[str, Any] = {"requested_by": requested_by or f"task:{info.workflow_id}"}
        if owner:
            memo[OWNER_MEMO] = owner
        result: Child = await workflow.execute_child_workflow(
            spec.workflow_name,
            payload,
            id=self.child_task_id(task_type, suffix),
            task_queue=self.task_id_for(spec.task_queue.value),
            execution_timeout=spec.execution_timeout,
            search_attributes=task_search_attributes(
                spec.task_type, document_id=getattr(payload, "document_id", None), owner=owner
            ),
            memo=memo,
            static_summary=spec.summary,
            parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
            result_type=result_type,
        )
        self._began = True
        return result

    def stage(
        self, stage: str, *, total: int | None = None, done: int | None = None, memo: bool = True
    ) -> None:
        """Record the stage (and progress) in the memo, readable with no worker running.
        `memo=False`: for the progress query only, for a stage that ends within this workflow
        task (local activities): nobody could read it in the memo, and each upsert is a
        command and a history event."""
        self._progress.stage = stage
        if total is not None:
            self._progress.total = total
        if done is not None:
            self._progress.done = done
        # The Web UI's "current details" of the run (read by a query: no history event).
        workflow.set_current_details(self._progress.line())
        if memo:
            workflow.upsert_memo(
                {PROGRESS_MEMO: self._progress.model_dump(), BEGAN_MEMO: self._began}
            )

    def on_failure(self, name: str, cleanup: Callable[[], Awaitable[Any]]) -> None:
        """Run `cleanup` if the task fails or is cancelled from here on; the failure / cancel
        event then carries `{name: True}` once it has run (False and the error if it failed)."""
        self._compensations.append((name, cleanup))

    @workflow.query
    def progress(self) -> Progress:
        return self._progress

    # -- the platform part ------------------------------------------------------------------

    async def run_task(self, payload: P) -> R:
        about = self.event_data(payload)
        # A run continued as new is the same task going on: its start was recorded already.
        if not workflow.info().continued_run_id:
            await _emit_started(
                self.task_type, about, _first(self.task_type, self.first_event_data(payload))
            )
        try:
            result = await self.steps(payload)
        except (asyncio.CancelledError, FailureError) as e:
            cleaned = await self._compensate()
            if is_cancelled_exception(e):
                await _emit(self.task_type, EventType.TASK_CANCELLED, about | cleaned)
            else:
                await _emit(
                    self.task_type, EventType.TASK_FAILED, about | cleaned, error=failure_text(e)
                )
            raise
        total = self._progress.total
        self.stage("completed", done=total if total is not None else self._progress.done)
        await _emit(self.task_type, EventType.TASK_COMPLETED, result.model_dump(mode="json"))
        return result

    async def _compensate(self) -> dict[str, Any]:
        done: dict[str, Any] = {}
        if self._compensations:
            self.stage("cleaning up")
        for name, cleanup in reversed(self._compensations):
            try:
                await cleanup()
                done[name] = True
            except FailureError as e:
                done |= {name: False, f"{name}_error": failure_text(e)}
        return done


def _priority_key() -> int | None:
    priority = workflow.info().priority
    return priority.priority_key if priority is not None else None


def _event(task_type: TaskType, kind: EventType, **fields: Any) -> TaskEvent:
    info = workflow.info()
    return TaskEvent(
        event_type=kind,
        task_id=info.workflow_id,
        run_id=info.run_id,
        task_type=task_type.value,
        attempt=info.attempt,
        at=fields.pop("at", None) or workflow.now(),
        **fields,
    )


async def _record(task_type: TaskType, events: list[TaskEvent]) -> None:
    options = activity_options(task_type, RECORD_TASK_EVENTS.name)
    await workflow.execute_local_activity(
        RECORD_TASK_EVENTS.name,
        events,
        result_type=RECORD_TASK_EVENTS.output,
        start_to_close_timeout=options.start_to_close,
        retry_policy=options.retry_policy,
    )


def _first(task_type: TaskType, data: dict[str, Any]) -> TaskEvent:
    """TaskEnqueued, or TaskRetried for a manual retry's run (ours, or an operator's reset in
    the Web UI / `temporal workflow reset`); dated at the run's start."""
    info = workflow.info()
    retry_of = workflow.memo_value(RETRY_OF_MEMO, None, type_hint=str)
    via = "retry"
    if not retry_of and info.first_execution_run_id and info.first_execution_run_id != info.run_id:
        # A reset keeps the chain's first run id (we use neither continue-as-new nor workflow
        # retry policies); the exact base run of a reset of a reset is in the audit record.
        # Only a reset to the first workflow task records this: a later reset point replays
        # the original first events (the reconciler audits every reset either way).
        retry_of, via = info.first_execution_run_id, "reset"
    start = info.start_time
    if retry_of:
        return _event(
            task_type,
            EventType.TASK_RETRIED,
            at=start,
            data={**data, "retry_of": retry_of, "via": via},
        )
    return _event(task_type, EventType.TASK_ENQUEUED, at=start, data=data)


async def _emit_started(task_type: TaskType, data: dict[str, Any], first: TaskEvent) -> None:
    """The first event, then TaskStarted. A run cancelled before this was recorded (cancelled
    while still queued) records its first event and TaskCancelled instead, so every run that
    began has a first and a last event."""
    try:
        await _record(task_type, [first, _event(task_type, EventType.TASK_STARTED, data=data)])
    except asyncio.CancelledError:
        await _record(task_type, [first, _event(task_type, EventType.TASK_CANCELLED, data=data)])
        raise


async def _emit(
    task_type: TaskType, kind: EventType, data: dict[str, Any], error: str | None = None
) -> None:
    await _record(task_type, [_event(task_type, kind, data=data, error=error)])
