"""Start a re-index (INDEXING_UPSERT with `reindex`): one at a time, audited. Shared by the
CLI (`knowledgeops reindex`) and the admin API (POST /v1/admin/reindex)."""

from __future__ import annotations

from knowledgeops.contracts.indexing import IndexingUpsertPayload, ReindexOptions
from knowledgeops.registry.task_types import TaskType
from starter.services.task_models import TaskRef
from starter.services.tasks import TaskQueueService

# The one task id of re-indexes: a second request while one runs joins it.
REINDEX_TASK = TaskType.INDEXING_UPSERT.task_name("reindex")


async def start_reindex(
    service: TaskQueueService,
    options: ReindexOptions,
    *,
    model: str | None,
    actor: str,
    reason: str = "",
) -> TaskRef:
    """Start (or join the running) re-index and record it in the audit log."""
    ref = await service.enqueue(
        TaskType.INDEXING_UPSERT,
        IndexingUpsertPayload(model=model, reindex=options),
        task_id=REINDEX_TASK,
        requested_by=actor,
    )
    await service.audit(
        actor,
        "reindex",
        [ref.task_id],
        reason,
        "started",
        {"model": model, **options.model_dump()},
    )
    return ref
