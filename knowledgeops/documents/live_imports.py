"""What running (or still queued) imports need: their inputs, read from Temporal.

An import that no worker has begun has no catalogue row yet (the row is the projection of its
first event), so the catalogue alone cannot tell that its stored file is needed. Its input
can: the first event of its history. Used by a document delete (never remove a file a queued
import of another document will read) and by cleanup (never count such a file an orphan).
Visibility is eventually consistent: an import started within the last second or so may not
be listed yet.
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentImportPayload
from knowledgeops.registry.task_types import REGISTRY, TaskType

# Histories read at once (one page of one event each).
INPUT_READS = 16


async def live_import_inputs(client: Client, settings: Settings) -> list[DocumentImportPayload]:
    """Inputs of this deployment's running (or queued) DOCUMENT_IMPORT tasks."""
    spec = REGISTRY[TaskType.DOCUMENT_IMPORT]
    queue = settings.queue(spec.task_queue.value)
    query = (
        f'WorkflowType = "{spec.workflow_name}" AND ExecutionStatus = "Running" '
        f'AND TaskQueue = "{queue}"'
    )
    runs = [(w.id, w.run_id) async for w in client.list_workflows(query)]
    gate = asyncio.Semaphore(INPUT_READS)

    async def input_of(task_id: str, run_id: str | None) -> DocumentImportPayload | None:
        async with gate:
            handle = client.get_workflow_handle(task_id, run_id=run_id)
            try:
                async for event in handle.fetch_history_events(page_size=1):
                    started = event.workflow_execution_started_event_attributes
                    [raw] = await client.data_converter.decode(started.input.payloads)
                    return DocumentImportPayload.model_validate(raw)
            except RPCError as e:
                if e.status != RPCStatusCode.NOT_FOUND:
                    raise
            return None  # gone since it was listed: it needs nothing any more

    inputs = await asyncio.gather(*(input_of(t, r) for t, r in runs))
    return [p for p in inputs if p is not None]
