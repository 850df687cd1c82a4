"""DOCUMENT_BATCH_IMPORT: a submission of many files (a folder) as one task.

The manifest (in storage) lists the files; the workflow hands out its ranges to group
activities, `groups_at_once` at a time, each importing its documents in-process
(knowledgeops/documents/batch_import.py). A group hands back the documents it does not import
itself (bigger files, scans, images): each gets its own DOCUMENT_IMPORT as a child task, a few
at a time. Progress (documents done of the total, failures with their reasons) is in the memo
and the `batch_progress` query; the result lists the failures. Cancelling the batch cancels its
running groups and child imports; documents already imported stay. A long batch continues as
new between groups, carrying its counts.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from temporalio import workflow
from temporalio.common import Priority
from temporalio.exceptions import FailureError, WorkflowAlreadyStartedError

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.document_batch import (
        BATCH_PROGRESS_QUERY,
        IMPORT_GROUP,
        MAX_LISTED_FAILURES,
        SETTLE_BATCH,
        BatchFailure,
        BatchProgress,
        BatchState,
        DeferredDocument,
        DocumentBatchPayload,
        DocumentBatchResult,
        ImportGroupRequest,
        ImportGroupResult,
        SettleBatchRequest,
        import_task_name,
    )
    from knowledgeops.contracts.document_import import (
        DocumentImportPayload,
        DocumentImportResult,
    )
    from knowledgeops.errors import failure_text
    from knowledgeops.registry.task_types import REGISTRY, TaskType, task_search_attributes

# Bigger files' imports running at once: each has its own steps and parser; more would only
# queue on the worker's parse and embedding capacity.
CHILD_IMPORTS_AT_ONCE = 4


@workflow.defn(name="DocumentBatchImport")
class DocumentBatchImportWorkflow(TaskWorkflow[DocumentBatchPayload, DocumentBatchResult]):
    task_type = TaskType.DOCUMENT_BATCH_IMPORT

    def __init__(self) -> None:
        super().__init__()
        self._state = BatchState()
        self._total = 0
        self._groups: dict[asyncio.Future[ImportGroupResult], tuple[int, int]] = {}
        self._children: dict[asyncio.Future[str | None], DeferredDocument] = {}
        self._waiting: deque[DeferredDocument] = deque()
        # How the batch ended, for its cleanup: "failed" or "cancelled".
        self._ending: tuple[str, str | None] = ("failed", None)

    @workflow.run
    async def run(self, payload: DocumentBatchPayload) -> DocumentBatchResult:
        return await self.run_task(payload)

    def event_data(self, payload: DocumentBatchPayload) -> dict[str, Any]:
        return {"manifest_id": payload.manifest_id, "total": payload.total}

    @workflow.query(name=BATCH_PROGRESS_QUERY)
    def batch_progress(self) -> BatchProgress:
        s = self._state
        return BatchProgress(
            total=self._total,
            imported=s.imported,
            failed=s.failed,
            next=s.next,
            running_groups=sorted(self._groups.values()),
            running_imports=len(self._children),
            waiting_imports=len(self._waiting),
            failures=s.failures,
        )

    async def steps(self, payload: DocumentBatchPayload) -> DocumentBatchResult:
        info = workflow.info()
        # One version for the batch's documents (each has its own point ids and files under
        # it), the same for every run of the task's chain: a continued run, a reset.
        version = (info.first_execution_run_id or info.run_id).replace("-", "")
        self._state = payload.resume or BatchState()
        self._total = payload.total
        self.on_failure("settled", lambda: self._settle(version, *self._ending))
        self._report()
        try:
            await self._import_all(payload, version)
        except asyncio.CancelledError:
            self._ending = ("cancelled", "the batch import was cancelled")
            await self._stop_running()
            raise
        except FailureError as e:
            self._ending = ("failed", f"the batch import failed: {failure_text(e)}")
            await self._stop_running()
            raise
        # Rows a child import never took over (it could not start) say so.
        await self._settle(version, "failed", "its own import did not start")
        s = self._state
        return DocumentBatchResult(
            total=payload.total,
            imported=s.imported,
            failed=s.failed,
            failures=s.failures,
            embedded=s.embedded,
            reused=s.reused,
            chunks=s.chunks,
            version=version,
        )

    async def _import_all(self, payload: DocumentBatchPayload, version: str) -> None:
        state = self._state
        draining = False
        while True:
            # A long batch's history is kept short: between groups, continue as new.
            draining = draining or workflow.info().is_continue_as_new_suggested()
            while not draining and len(self._groups) < payload.groups_at_once:
                if state.next >= payload.total:
                    break
                start, end = state.next, min(state.next + payload.group_size, payload.total)
                state.next = end
                group = asyncio.ensure_future(
                    self.activity(IMPORT_GROUP, self._group_request(payload, version, start, end))
                )
                self._groups[group] = (start, end)
            while self._waiting and len(self._children) < CHILD_IMPORTS_AT_ONCE:
                doc = self._waiting.popleft()
                self._children[asyncio.ensure_future(self._child(payload, doc))] = doc
            if not self._groups and not self._children:
                if draining and state.next < payload.total:
                    workflow.continue_as_new(payload.model_copy(update={"resume": state}))
                return
            running: list[asyncio.Future[Any]] = [*self._groups, *self._children]
            done, _ = await workflow.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                if future in self._groups:
                    del self._groups[future]
                    self._count_group(future.result())  # a group that failed fails the batch
                else:
                    doc = self._children.pop(future)
                    self._count_child(doc, future.result())
            self._report()

    def _group_request(
        self, payload: DocumentBatchPayload, version: str, start: int, end: int
    ) -> ImportGroupRequest:
        s = self._state
        return ImportGroupRequest(
            task_id=workflow.info().workflow_id,
            manifest_id=payload.manifest_id,
            start=start,
            end=end,
            version=version,
            metadata=payload.metadata,
            chunking=payload.chunking,
            embed_batch_size=payload.embed_batch_size,
            small_bytes=payload.small_bytes,
            counted_before=s.imported + s.failed,
            batch_total=payload.total,
        )

    def _count_group(self, r: ImportGroupResult) -> None:
        s = self._state
        s.imported += r.imported
        s.embedded += r.embedded
        s.reused += r.reused
        s.chunks += r.chunks
        for failure in r.failures:
            self._fail(failure)
        self._waiting.extend(r.deferred)

    def _count_child(self, doc: DeferredDocument, error: str | None) -> None:
        if error is None:
            self._state.imported += 1
        else:
            self._fail(
                BatchFailure(document_id=doc.document_id, filename=doc.filename, error=error)
            )

    def _fail(self, failure: BatchFailure) -> None:
        self._state.failed += 1
        if len(self._state.failures) < MAX_LISTED_FAILURES:
            self._state.failures.append(failure)

    def _report(self) -> None:
        s = self._state
        self.stage("importing", total=self._total, done=s.imported + s.failed)

    async def _child(self, payload: DocumentBatchPayload, doc: DeferredDocument) -> str | None:
        """A deferred document's own import, as a child task (visible and cancellable on its
        own, under the document's one import task id); None if it completed, else why not."""
        spec = REGISTRY[TaskType.DOCUMENT_IMPORT]
        owner = payload.metadata.owner
        task_id = self.task_id_for(import_task_name(doc.document_id))
        try:
            await workflow.execute_child_workflow(
                spec.workflow_name,
                DocumentImportPayload(
                    file_id=doc.file_id,
                    document_id=doc.document_id,
                    filename=doc.filename,
                    metadata=payload.metadata,
                    chunking=payload.chunking,
                    embed_batch_size=payload.embed_batch_size,
                    local_steps=doc.size <= payload.small_bytes,
                ),
                id=task_id,
                task_queue=self.task_id_for(spec.task_queue.value),
                execution_timeout=spec.execution_timeout,
                search_attributes=task_search_attributes(
                    spec.task_type, document_id=doc.document_id, owner=owner
                ),
                memo={"requested_by": f"task:{workflow.info().workflow_id}"}
                | ({"owner": owner} if owner else {}),
                static_summary=f"Import {doc.filename}",
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                priority=Priority(priority_key=doc.priority),
                result_type=DocumentImportResult,
            )
        except WorkflowAlreadyStartedError:
            return f"ImportRunning: an import of this document is running already ({task_id})"
        except FailureError as e:
            return failure_text(e)
        return None

    async def _stop_running(self) -> None:
        """Cancel the running groups and child imports and wait until they have stopped, so
        the cleanup that follows never races a write of theirs."""
        running: list[asyncio.Future[Any]] = [*self._groups, *self._children]
        for future in running:
            future.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _settle(self, version: str, status: str, error: str | None) -> None:
        await self.activity(
            SETTLE_BATCH,
            SettleBatchRequest(
                task_id=workflow.info().workflow_id, version=version, status=status, error=error
            ),
        )
