"""TaskQueueService: the one way app code starts, inspects and cancels work.

Temporal is the source of truth for task state: status is read from the workflow execution
(description, memo, pending activities' heartbeat details). The admin task list is a read
model of the domain events (knowledgeops/db/task_list.py), for listing only; a run started
here is listed there as pending at once, before any worker records its events.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import (
    Priority,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.base import OWNER_MEMO, PROGRESS_MEMO
from knowledgeops.contracts.events import RETRY_OF_MEMO
from knowledgeops.db.audit import AuditLog
from knowledgeops.db.database import Database
from knowledgeops.db.task_list import ListKey, TaskList
from knowledgeops.errors import failure_text, validation_text
from knowledgeops.registry.task_types import (
    DOCUMENT_ID_SEARCH_ATTRIBUTE,
    TASK_TYPE_SEARCH_ATTRIBUTE,
    TaskSpec,
    TaskType,
    spec_for,
    task_search_attributes,
)
from starter.services import task_queries as tq
from starter.services.task_listing import list_started, list_tasks
from starter.services.task_models import (
    PayloadInvalidError,
    PayloadTooLargeError,
    TaskFinishedError,
    TaskNotFoundError,
    TaskNotRetryableError,
    TaskRef,
    TaskStatus,
    checkpoint_progress,
    memo_progress,
    with_eta,
)
from starter.services.task_presentation import document_id_of, one_line, web_ui_details
from starter.services.task_queries import is_pending, status_name

# Every task id this code makes (after the deployment prefix) starts with one of these: a
# document's import, or a type's own name (random, idempotency-key and scheduled ids alike).
_OUR_NAMES = ("import-", *(t.task_name("") for t in TaskType))


def _validate(spec: TaskSpec, payload: BaseModel | dict[str, Any]) -> BaseModel:
    try:
        return spec.payload_model.model_validate(
            payload.model_dump() if isinstance(payload, BaseModel) else payload
        )
    except ValidationError as e:
        raise PayloadInvalidError(
            f"Invalid {spec.task_type} payload: {validation_text(e.errors())}"
        ) from None


class TaskQueueService:
    """Start, inspect, cancel and retry tasks of any registered type. With a database, every
    manual action (cancel, retry) is written to the audit log."""

    def __init__(self, client: Client, settings: Settings, db: Database | None = None) -> None:
        self.client = client
        self.settings = settings
        self.db = db
        # Built once: a store prepares its statements when built (the task list's upsert).
        self.task_list = TaskList(db) if db is not None else None
        self.audit_log = AuditLog(db) if db is not None else None
        # Task-list writes of runs started here, in flight (see _list_started).
        self._listing: set[asyncio.Task[None]] = set()

    async def enqueue(
        self,
        task_type: TaskType | str,
        payload: BaseModel | dict[str, Any],
        *,
        idempotency_key: str | None = None,
        requested_by: str | None = None,
        task_id: str | None = None,
        owner: str | None = None,
        memo: Mapping[str, Any] | None = None,
        priority: int | None = None,
        summary: str | None = None,
    ) -> TaskRef:
        """Validate and start a task. `task_id` (before the deployment prefix) names a task
        that must never run twice at once: a duplicate submission joins the running one.
        `summary`: what the Web UI lists the task as (default: what its type does)."""
        spec = spec_for(task_type)
        model = _validate(spec, payload)
        size = len(model.model_dump_json())
        if size > self.settings.payload_max_bytes:
            raise PayloadTooLargeError(
                f"{spec.task_type} payload is {size} bytes, over the limit of "
                f"{self.settings.payload_max_bytes}; pass large content as a stored file id"
            )
        reuse = WorkflowIDReusePolicy.ALLOW_DUPLICATE
        if task_id is None and idempotency_key:
            # The key names the task: the same key can never start a second one.
            digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]
            task_id = spec.task_type.task_name(digest)
            reuse = WorkflowIDReusePolicy.REJECT_DUPLICATE
        task_id = self.settings.task_id(task_id or spec.task_type.task_name(uuid.uuid4().hex))
        if idempotency_key and reuse == WorkflowIDReusePolicy.ALLOW_DUPLICATE:
            existing = await self._run_with_key(task_id, idempotency_key)
            if existing is not None:
                return TaskRef(task_id=task_id, run_id=existing, task_type=spec.task_type)
        memo = {
            **(memo or {}),
            "requested_by": requested_by,
            "idempotency_key": idempotency_key,
            OWNER_MEMO: owner,
        }
        try:
            handle = await self.client.start_workflow(
                spec.workflow_name,
                model,
                id=task_id,
                task_queue=self.settings.queue(spec.task_queue.value),
                execution_timeout=spec.execution_timeout,
                search_attributes=task_search_attributes(
                    spec.task_type, document_id=document_id_of(model), owner=owner
                ),
                memo={k: v for k, v in memo.items() if v},
                static_summary=one_line(summary or spec.summary),
                static_details=web_ui_details(spec, model, requested_by, owner),
                # A duplicate submission while the task runs joins it instead of doubling it.
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=reuse,
                # Its activities inherit it: a backlogged queue hands out lower keys first.
                priority=Priority(priority_key=priority) if priority else Priority.default,
            )
            run_id = handle.result_run_id
        except WorkflowAlreadyStartedError:
            # The key's task exists (maybe long finished): its events listed it already.
            run_id = (await self._describe(task_id)).run_id
            return TaskRef(task_id=task_id, run_id=run_id, task_type=spec.task_type)
        ref = TaskRef(task_id=task_id, run_id=run_id, task_type=spec.task_type)
        self._list_started(ref, document_id_of(model), owner)
        return ref

    async def _run_with_key(self, task_id: str, key: str) -> str | None:
        try:
            desc = await self._describe(task_id)
        except TaskNotFoundError:
            return None
        return desc.run_id if (await desc.memo()).get("idempotency_key") == key else None

    async def _describe(self, task_id: str) -> WorkflowExecutionDescription:
        """Only this system's tasks: its id prefix and its TaskType attribute. Any other
        workflow in the namespace is unknown here, exactly like an id that does not exist."""
        missing = TaskNotFoundError(f"No task with id {task_id!r}")
        name = task_id.removeprefix(self.settings.prefix)
        if not task_id.startswith(self.settings.prefix) or not name.startswith(_OUR_NAMES):
            raise missing
        with _task_must_exist(task_id):
            desc = await self.client.get_workflow_handle(task_id).describe()
        if desc.typed_search_attributes.get(TASK_TYPE_SEARCH_ATTRIBUTE) is None:
            raise missing
        return desc

    async def owner_of(self, task_id: str) -> str | None:
        """The owner recorded when the task was enqueued (None: no owner)."""
        owner = (await (await self._describe(task_id)).memo()).get(OWNER_MEMO)
        return str(owner) if owner is not None else None

    async def get_status(self, task_id: str) -> TaskStatus:
        """Status and `{stage, done, total, unit}` progress of any task type: the memo the
        workflow base writes, refined by a running activity's heartbeat checkpoint."""
        desc = await self._describe(task_id)
        memo = await desc.memo()
        task_type = desc.typed_search_attributes.get(TASK_TYPE_SEARCH_ATTRIBUTE)
        progress = memo_progress(memo.get(PROGRESS_MEMO), task_type)
        status = status_name(desc.status)
        attempts = 0
        last_error: str | None = None
        for pa in desc.raw_description.pending_activities:
            attempts = max(attempts, pa.attempt)
            if pa.HasField("last_failure") and pa.last_failure.message:
                last_error = pa.last_failure.message
            if pa.heartbeat_details.payloads:
                details = await self.client.data_converter.decode(pa.heartbeat_details.payloads)
                checkpoint = checkpoint_progress(details[0] if details else None)
                if checkpoint is not None:
                    progress.done = max(progress.done, checkpoint.done)
                    progress.total = progress.total or checkpoint.total
        if status == "running" and is_pending(memo, desc.raw_description.pending_activities):
            status = "pending"
        result: dict[str, Any] | None = None
        # Retention may delete the closed run between the describe and this read.
        with _task_must_exist(task_id):
            if status == "completed":
                value = await self.client.get_workflow_handle(task_id).result()
                result = value if isinstance(value, dict) else None
            elif status == "failed":
                try:
                    await self.client.get_workflow_handle(task_id).result()
                except WorkflowFailureError as e:
                    last_error = failure_text(e)
        return TaskStatus(
            task_id=task_id,
            task_type=task_type,
            status=status,
            progress=with_eta(progress, desc.start_time),
            attempts=attempts,
            last_error=last_error,
            started_at=desc.start_time,
            closed_at=desc.close_time,
            result=result,
        )

    async def list(
        self, flt: tq.TaskFilter, limit: int = 50, after: ListKey | None = None
    ) -> tq.TaskPage:
        """Tasks newest first, filtered by type, status and start time; `after`: the previous
        page's `next_cursor` (ListKey.decode)."""
        if self.task_list is None:
            raise RuntimeError(
                "Listing tasks reads the task list in the app database: build "
                "TaskQueueService with a Database"
            )
        await self.listed()
        return await list_tasks(self.client, self.task_list, self.settings, flt, limit, after)

    async def describe(self, task_id: str) -> tq.TaskDetail:
        """Status, input summary, every activity attempt, all runs, last checkpoint."""
        status = await self.get_status(task_id)
        log = await tq.execution_log(self.client, task_id)
        return tq.TaskDetail(
            status=status,
            input=log["input"],
            activities=log["activities"],
            runs=await tq.runs_of(self.client, task_id),
            last_checkpoint=None
            if status.finished
            else await tq.last_checkpoint(self.client, task_id),
        )

    async def cancel(self, task_id: str, *, reason: str = "", actor: str = "system") -> None:
        try:
            current = await self.get_status(task_id)
            if current.finished:
                raise TaskFinishedError(f"Task {task_id} already finished ({current.status})")
            await self.client.get_workflow_handle(task_id).cancel()
        except Exception as e:
            await self.audit(actor, "cancel", [task_id], reason, "refused", {"error": str(e)})
            raise
        await self.audit(actor, "cancel", [task_id], reason, "requested")

    async def retry(self, task_id: str, *, reason: str = "", actor: str = "system") -> TaskRef:
        """Start a new run of a failed, terminated or timed-out task with the same input.

        The new run has the same task id and carries the old run id in its memo (`retry_of`);
        it emits TaskRetried instead of TaskEnqueued."""
        try:
            ref = await self._retry(task_id, actor)
        except Exception as e:
            await self.audit(actor, "retry", [task_id], reason, "refused", {"error": str(e)})
            raise
        await self.audit(actor, "retry", [task_id], reason, "started", {"new_run_id": ref.run_id})
        return ref

    async def _retry(self, task_id: str, actor: str) -> TaskRef:
        desc = await self._describe(task_id)
        status = status_name(desc.status)
        if status not in ("failed", "terminated", "timed_out"):
            raise TaskNotRetryableError(
                f"Task {task_id} is {status}; only failed, terminated or timed-out tasks can be "
                "retried"
            )
        task_type = desc.typed_search_attributes.get(TASK_TYPE_SEARCH_ATTRIBUTE)
        spec = spec_for(task_type or "")
        raw, queue = await self.task_input(task_id, desc.run_id)
        memo = await desc.memo()
        handle: WorkflowHandle[Any, Any] = await self.client.start_workflow(
            spec.workflow_name,
            _validate(spec, raw),
            id=task_id,
            task_queue=queue,
            execution_timeout=spec.execution_timeout,
            search_attributes=desc.typed_search_attributes,
            memo={**_carry_memo(memo), RETRY_OF_MEMO: desc.run_id, "retried_by": actor},
            static_summary=await desc.static_summary() or spec.summary,
            static_details=await desc.static_details(),
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
        ref = TaskRef(task_id=task_id, run_id=handle.result_run_id, task_type=spec.task_type)
        document_id = desc.typed_search_attributes.get(DOCUMENT_ID_SEARCH_ATTRIBUTE)
        owner = memo.get(OWNER_MEMO)
        owner = owner if isinstance(owner, str) else None
        self._list_started(ref, document_id, owner)
        return ref

    def _list_started(self, ref: TaskRef, document_id: str | None, owner: str | None) -> None:
        """List a run started here as pending, off the caller's path: awaited, that SQLite
        write in every upload cut bench.small_docs from 22.3 to 18.9 documents/s (uploads
        waited on the database's one writer, busy with the worker's event writes)."""
        task = asyncio.create_task(
            list_started(self.task_list, ref, document_id=document_id, owner=owner)
        )
        self._listing.add(task)
        task.add_done_callback(self._listing.discard)

    async def listed(self) -> None:
        """Until the task-list writes of runs started here are done (a listing waits for them;
        so does a short-lived process before it closes its database)."""
        if self._listing:
            await asyncio.gather(*list(self._listing))

    async def task_input(self, task_id: str, run_id: str | None = None) -> tuple[Any, str]:
        """A run's input (decoded, not validated) and its task queue, from its first event."""
        handle = self.client.get_workflow_handle(task_id, run_id=run_id)
        with _task_must_exist(task_id):
            async for event in handle.fetch_history_events(page_size=1):
                started = event.workflow_execution_started_event_attributes
                [raw] = await self.client.data_converter.decode(started.input.payloads)
                return raw, started.task_queue.name
        raise TaskNotFoundError(f"Task {task_id!r} has no history")

    async def audit(
        self,
        actor: str,
        action: str,
        task_ids: Sequence[str],
        reason: str,
        outcome: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Record a manual action in the audit log (when this service has a database)."""
        if self.audit_log is not None:
            await self.audit_log.record(actor, action, task_ids, reason, outcome, details)

    async def handle(self, task_id: str) -> WorkflowHandle[Any, Any]:
        """The Temporal handle of one of this system's tasks (else TaskNotFoundError), for what
        a type adds itself, e.g. the agent's message update (starter/services/agent.py)."""
        await self._describe(task_id)
        return self.client.get_workflow_handle(task_id)

    async def wait(self, task_id: str, timeout: float | None = None) -> TaskStatus:
        """Block until the task finishes (a long poll on its result, not a polling loop)."""
        await self._describe(task_id)  # unknown ids fail now, not after the timeout
        handle = self.client.get_workflow_handle(task_id)
        try:
            await asyncio.wait_for(handle.result(), timeout)
        except WorkflowFailureError:
            pass  # failed / cancelled / terminated / timed out: get_status says which and why
        except TimeoutError:
            st = await self.get_status(task_id)
            raise TimeoutError(f"task {task_id} still {st.status} after {timeout}s") from None
        return await self.get_status(task_id)


@contextlib.contextmanager
def _task_must_exist(task_id: str) -> Iterator[None]:
    """Temporal's NOT_FOUND as our TaskNotFoundError (a 404 at the API)."""
    try:
        yield
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise TaskNotFoundError(f"No task with id {task_id!r}") from None
        raise


def _carry_memo(memo: Mapping[str, Any]) -> dict[str, Any]:
    # Progress keys belong to the old run; who asked and why stay with the task.
    return {k: v for k, v in memo.items() if k in ("requested_by", "idempotency_key", OWNER_MEMO)}
