"""What running (or still queued) imports need: their inputs, read from Temporal.

An import that no worker has begun has no catalogue row yet (the row is the projection of its
first event), so the catalogue alone cannot tell that its stored file is needed. Its input
can: the first event of its history. A running batch import's files are read from its
manifest, named the same way (a group that has not begun has listed none of them). Used by a
document delete (never remove a file a queued import of another document will read) and by
cleanup (never count such a file an orphan).
Visibility is eventually consistent: an import started within the last second or so may not
be listed yet.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_batch import DocumentBatchPayload
from knowledgeops.contracts.document_import import DocumentImportPayload
from knowledgeops.documents.batch_manifest import ManifestMissingError, read_manifest
from knowledgeops.files.data_files import open_storage
from knowledgeops.registry.task_types import REGISTRY, TaskType

# Histories read at once (one page of one event each).
INPUT_READS = 16


async def live_import_inputs(client: Client, settings: Settings) -> list[DocumentImportPayload]:
    """Inputs of this deployment's running (or queued) DOCUMENT_IMPORT tasks, and one for
    each file of a running DOCUMENT_BATCH_IMPORT (from its manifest)."""
    singles = await _running_inputs(client, settings, TaskType.DOCUMENT_IMPORT)
    batches = await _running_inputs(client, settings, TaskType.DOCUMENT_BATCH_IMPORT)
    files = open_storage(settings)[1]
    for raw in batches:
        batch = DocumentBatchPayload.model_validate(raw)
        try:
            entries = await read_manifest(files, batch.manifest_id)
        except ManifestMissingError:
            continue  # its groups fail on it too: it reads no file
        singles += [
            {"file_id": e.file_id, "document_id": e.document_id, "filename": e.filename}
            for e in entries
        ]
    return [DocumentImportPayload.model_validate(raw) for raw in singles]


async def _running_inputs(client: Client, settings: Settings, task_type: TaskType) -> list[Any]:
    spec = REGISTRY[task_type]
    queue = settings.queue(spec.task_queue.value)
    query = (
        f'WorkflowType = "{spec.workflow_name}" AND ExecutionStatus = "Running" '
        f'AND TaskQueue = "{queue}"'
    )
    runs = [(w.id, w.run_id) async for w in client.list_workflows(query)]
    gate = asyncio.Semaphore(INPUT_READS)

    async def input_of(task_id: str, run_id: str | None) -> Any:
        async with gate:
            handle = client.get_workflow_handle(task_id, run_id=run_id)
            try:
                async for event in handle.fetch_history_events(page_size=1):
                    started = event.workflow_execution_started_event_attributes
                    [raw] = await client.data_converter.decode(started.input.payloads)
                    return raw
            except RPCError as e:
                if e.status != RPCStatusCode.NOT_FOUND:
                    raise
            return None  # gone since it was listed: it needs nothing any more

    inputs = await asyncio.gather(*(input_of(t, r) for t, r in runs))
    return [raw for raw in inputs if raw is not None]
