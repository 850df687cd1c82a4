"""TaskQueueService: the one way app code starts, inspects and cancels work.

Temporal is the source of truth for task state: status is read from the workflow execution
(description, memo, pending activities' heartbeat details), never from a second job table.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities import file_store
from activities.database import Database
from knowledgeops.errors import failure_text, validation_text
from knowledgeops.events import RETRY_OF_MEMO
from knowledgeops.models import DocumentImportPayload, DocumentMetadata, EmbedCheckpoint
from knowledgeops.settings import Settings
from knowledgeops.task_types import (
    TASK_TYPE_SEARCH_ATTRIBUTE,
    TaskNotImplementedError,
    TaskSpec,
    TaskType,
    spec_for,
)
from starter import task_queries as tq
from starter.task_queries import FINISHED, status_name


class TaskRef(BaseModel):
    job_id: str
    run_id: str | None
    task_type: TaskType
    document_id: str | None = None


class JobProgress(BaseModel):
    stage: str
    total: int | None = None
    done: int = 0
    percent: float | None = None
    eta_seconds: float | None = None


class JobStatus(BaseModel):
    job_id: str
    task_type: str | None
    status: str
    progress: JobProgress
    attempts: int = 0
    last_error: str | None = None
    started_at: datetime | None = None
    closed_at: datetime | None = None
    result: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class JobNotFoundError(LookupError):
    pass


class JobFinishedError(RuntimeError):
    pass


class PayloadInvalidError(ValueError):
    pass


def derive_document_id(file_id: str) -> str:
    # Same bytes -> same document: re-importing a file updates it instead of adding a copy.
    return "doc-" + file_id[:32]


class PayloadTooLargeError(ValueError):
    pass


class TaskNotRetryableError(RuntimeError):
    """Only failed, terminated or timed-out tasks can be retried (409 at the API)."""


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

    async def enqueue(
        self,
        task_type: TaskType | str,
        payload: BaseModel | dict[str, Any],
        *,
        idempotency_key: str | None = None,
        requested_by: str | None = None,
        job_id: str | None = None,
    ) -> TaskRef:
        spec = spec_for(task_type)
        if not spec.implemented or spec.workflow is None:
            raise TaskNotImplementedError(
                f"Task type {spec.task_type} is registered but has no workflow yet; "
                "it cannot be started"
            )
        model = _validate(spec, payload)
        size = len(model.model_dump_json())
        if size > self.settings.payload_max_bytes:
            raise PayloadTooLargeError(
                f"{spec.task_type} payload is {size} bytes, over the limit of "
                f"{self.settings.payload_max_bytes}; pass large content as a stored file id"
            )
        reuse = WorkflowIDReusePolicy.ALLOW_DUPLICATE
        if job_id is None and idempotency_key:
            # The key names the task: the same key can never start a second one.
            digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]
            job_id = f"{spec.task_type.value.lower()}-{digest}"
            reuse = WorkflowIDReusePolicy.REJECT_DUPLICATE
        job_id = self.settings.job_id(
            job_id or f"{spec.task_type.value.lower()}-{uuid.uuid4().hex}"
        )
        if idempotency_key and reuse == WorkflowIDReusePolicy.ALLOW_DUPLICATE:
            existing = await self._run_with_key(job_id, idempotency_key)
            if existing is not None:
                return TaskRef(
                    job_id=job_id,
                    run_id=existing,
                    task_type=spec.task_type,
                    document_id=getattr(model, "document_id", None),
                )
        memo = {"requested_by": requested_by, "idempotency_key": idempotency_key}
        try:
            handle = await self.client.start_workflow(
                spec.workflow,
                model,
                id=job_id,
                task_queue=self.settings.queue(spec.task_queue.value),
                execution_timeout=spec.execution_timeout,
                search_attributes=_task_type_attribute(spec.task_type),
                memo={k: v for k, v in memo.items() if v},
                # A duplicate submission while the job runs joins it instead of doubling it.
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=reuse,
            )
            run_id = handle.result_run_id
        except WorkflowAlreadyStartedError:
            run_id = (await self._describe(job_id)).run_id
        return TaskRef(
            job_id=job_id,
            run_id=run_id,
            task_type=spec.task_type,
            document_id=getattr(model, "document_id", None),
        )

    async def _run_with_key(self, job_id: str, key: str) -> str | None:
        try:
            desc = await self._describe(job_id)
        except JobNotFoundError:
            return None
        return desc.run_id if (await desc.memo()).get("idempotency_key") == key else None

    async def import_file(
        self,
        path: Path,
        *,
        document_id: str | None = None,
        metadata: DocumentMetadata | None = None,
    ) -> TaskRef:
        """Store a local file (streamed, hashed) and start its DOCUMENT_IMPORT."""
        file_id = await asyncio.to_thread(
            file_store.store_path, self.settings.files_dir, path, self.settings.max_file_bytes
        )
        return await self.import_stored(
            file_id, filename=path.name, document_id=document_id, metadata=metadata
        )

    async def import_stored(
        self,
        file_id: str,
        *,
        filename: str,
        document_id: str | None = None,
        metadata: DocumentMetadata | None = None,
        idempotency_key: str | None = None,
        requested_by: str | None = None,
    ) -> TaskRef:
        doc_id = document_id or derive_document_id(file_id)
        meta = metadata or DocumentMetadata()
        payload = DocumentImportPayload(
            file_id=file_id,
            document_id=doc_id,
            filename=filename,
            metadata=meta,
            chunking={
                "chunk_tokens": self.settings.chunk_tokens,
                "overlap_tokens": self.settings.chunk_overlap,
            },
            embed_batch_size=self.settings.embedding_batch_size,
        )
        return await self.enqueue(
            TaskType.DOCUMENT_IMPORT,
            payload,
            job_id=_import_job_name(doc_id),
            idempotency_key=idempotency_key,
            requested_by=requested_by,
        )

    def import_job_id(self, document_id: str) -> str:
        """The one job id of a document's imports: it serialises imports of the document."""
        return self.settings.job_id(_import_job_name(document_id))

    async def _describe(self, job_id: str) -> WorkflowExecutionDescription:
        with _job_must_exist(job_id):
            return await self.client.get_workflow_handle(job_id).describe()

    async def get_status(self, job_id: str) -> JobStatus:
        desc = await self._describe(job_id)
        memo = await desc.memo()
        stage = str(memo.get("stage", "pending"))
        total = memo.get("total_chunks")
        status = status_name(desc.status)
        done = 0
        attempts = 0
        last_error: str | None = None
        any_started = False
        for pa in desc.raw_description.pending_activities:
            attempts = max(attempts, pa.attempt)
            if pa.state != PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED:
                any_started = True
            if pa.HasField("last_failure") and pa.last_failure.message:
                last_error = pa.last_failure.message
            if pa.activity_type.name == "embed_and_upsert" and pa.heartbeat_details.payloads:
                details = await self.client.data_converter.decode(pa.heartbeat_details.payloads)
                try:
                    done = EmbedCheckpoint.model_validate(details[0]).next_index
                except (ValidationError, IndexError):
                    done = 0
        if status == "running" and stage in ("pending", "parsing") and not any_started:
            # Pending until a worker has picked up the first activity.
            status = "pending" if attempts <= 1 else "running"
        result: dict[str, Any] | None = None
        if status == "completed":
            value = await self.client.get_workflow_handle(job_id).result()
            result = value if isinstance(value, dict) else None
            total = (result or {}).get("total_chunks", total)
            done = total or 0
        elif status == "failed":
            try:
                await self.client.get_workflow_handle(job_id).result()
            except WorkflowFailureError as e:
                last_error = failure_text(e)
        started = desc.start_time
        return JobStatus(
            job_id=job_id,
            task_type=desc.typed_search_attributes.get(TASK_TYPE_SEARCH_ATTRIBUTE),
            status=status,
            progress=_progress(stage, total, done, started),
            attempts=attempts,
            last_error=last_error,
            started_at=started,
            closed_at=desc.close_time,
            result=result,
        )

    async def list(
        self, flt: tq.TaskFilter, limit: int = 50, cursor: str | None = None
    ) -> tq.TaskPage:
        """Tasks newest first, filtered by type, status and start time; paged by cursor."""
        return await tq.list_tasks(self.client, self.settings, flt, limit, cursor)

    async def describe(self, job_id: str) -> tq.TaskDetail:
        """Status, input summary, every activity attempt, all runs, last checkpoint."""
        status = await self.get_status(job_id)
        log = await tq.execution_log(self.client, job_id)
        return tq.TaskDetail(
            status=status,
            input=log["input"],
            activities=log["activities"],
            runs=await tq.runs_of(self.client, self.settings, job_id),
            last_checkpoint=None
            if status.finished
            else await tq.last_checkpoint(self.client, job_id),
        )

    async def cancel(self, job_id: str, *, reason: str = "", actor: str = "system") -> None:
        try:
            current = await self.get_status(job_id)
            if current.finished:
                raise JobFinishedError(f"Job {job_id} already finished ({current.status})")
            await self.client.get_workflow_handle(job_id).cancel()
        except Exception as e:
            await self._audit(actor, "cancel", [job_id], reason, "refused", {"error": str(e)})
            raise
        await self._audit(actor, "cancel", [job_id], reason, "requested")

    async def retry(self, job_id: str, *, reason: str = "", actor: str = "system") -> TaskRef:
        """Start a new run of a failed, terminated or timed-out task with the same input.

        The new run has the same job id and carries the old run id in its memo (`retry_of`);
        it emits TaskRetried instead of TaskEnqueued."""
        try:
            ref = await self._retry(job_id, actor)
        except Exception as e:
            await self._audit(actor, "retry", [job_id], reason, "refused", {"error": str(e)})
            raise
        await self._audit(actor, "retry", [job_id], reason, "started", {"new_run_id": ref.run_id})
        return ref

    async def _retry(self, job_id: str, actor: str) -> TaskRef:
        desc = await self._describe(job_id)
        status = status_name(desc.status)
        if status not in ("failed", "terminated", "timed_out"):
            raise TaskNotRetryableError(
                f"Job {job_id} is {status}; only failed, terminated or timed-out jobs can be "
                "retried"
            )
        task_type = desc.typed_search_attributes.get(TASK_TYPE_SEARCH_ATTRIBUTE)
        spec = spec_for(task_type or "")
        if spec.workflow is None:
            raise TaskNotImplementedError(f"{spec.task_type} has no workflow")
        raw, queue = await self.task_input(job_id, desc.run_id)
        memo = await desc.memo()
        handle: WorkflowHandle[Any, Any] = await self.client.start_workflow(
            spec.workflow,
            _validate(spec, raw),
            id=job_id,
            task_queue=queue,
            execution_timeout=spec.execution_timeout,
            search_attributes=_task_type_attribute(spec.task_type),
            memo={**_carry_memo(memo), RETRY_OF_MEMO: desc.run_id, "retried_by": actor},
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
        return TaskRef(job_id=job_id, run_id=handle.result_run_id, task_type=spec.task_type)

    async def task_input(self, job_id: str, run_id: str | None = None) -> tuple[Any, str]:
        """A run's input (decoded, not validated) and its task queue, from its first event."""
        handle = self.client.get_workflow_handle(job_id, run_id=run_id)
        with _job_must_exist(job_id):
            async for event in handle.fetch_history_events(page_size=1):
                started = event.workflow_execution_started_event_attributes
                [raw] = await self.client.data_converter.decode(started.input.payloads)
                return raw, started.task_queue.name
        raise JobNotFoundError(f"Job {job_id!r} has no history")

    async def _audit(
        self,
        actor: str,
        action: str,
        task_ids: Sequence[str],
        reason: str,
        outcome: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        if self.db is not None:
            await self.db.audit(
                actor=actor,
                action=action,
                task_ids=task_ids,
                reason=reason,
                outcome=outcome,
                details=details,
            )

    async def wait(self, job_id: str, timeout: float | None = None) -> JobStatus:
        """Block until the job finishes (a long poll on its result, not a polling loop)."""
        await self._describe(job_id)  # unknown ids fail now, not after the timeout
        handle = self.client.get_workflow_handle(job_id)
        try:
            await asyncio.wait_for(handle.result(), timeout)
        except WorkflowFailureError:
            pass  # failed / cancelled / terminated / timed out: get_status says which and why
        except TimeoutError:
            st = await self.get_status(job_id)
            raise TimeoutError(f"job {job_id} still {st.status} after {timeout}s") from None
        return await self.get_status(job_id)


def _import_job_name(document_id: str) -> str:
    # Before the deployment prefix (enqueue adds it).
    return f"import-{document_id}"


@contextlib.contextmanager
def _job_must_exist(job_id: str) -> Iterator[None]:
    """Temporal's NOT_FOUND as our JobNotFoundError (a 404 at the API)."""
    try:
        yield
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise JobNotFoundError(f"No job with id {job_id!r}") from None
        raise


def _task_type_attribute(task_type: TaskType) -> TypedSearchAttributes:
    return TypedSearchAttributes([SearchAttributePair(TASK_TYPE_SEARCH_ATTRIBUTE, task_type.value)])


def _carry_memo(memo: Mapping[str, Any]) -> dict[str, Any]:
    # Progress keys belong to the old run; who asked and why stay with the task.
    return {k: v for k, v in memo.items() if k in ("requested_by", "idempotency_key")}


def _progress(stage: str, total: Any, done: int, started: datetime | None) -> JobProgress:
    total_i = int(total) if isinstance(total, int | float) else None
    percent = eta = None
    if total_i:
        percent = round(100.0 * done / total_i, 1)
        if started is not None and 0 < done < total_i:
            elapsed = (datetime.now(UTC) - started).total_seconds()
            eta = round(elapsed * (total_i - done) / done, 1)
    return JobProgress(stage=stage, total=total_i, done=done, percent=percent, eta_seconds=eta)
