"""Worker: polls the task queues of every implemented task type.

Run with `python worker.py` or `knowledgeops worker`. With the embedded Qdrant (no QDRANT_URL)
this process owns the index, so it also serves the search API (see starter/node.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker

from activities.database import Database
from activities.document_import import ImportActivities
from activities.embedding import Embedder
from activities.task_events import EventActivities
from activities.vector_store import VectorStore
from knowledgeops.settings import Settings
from knowledgeops.task_types import REGISTRY, TaskQueue
from workflows import WORKFLOWS

# Heartbeats reach the server at most this often (the SDK default is 0.8 x heartbeat timeout):
# fresh checkpoints mean less re-embedding after a crash, live progress and prompt cancels.
HEARTBEAT_THROTTLE = timedelta(seconds=1)


def build_workers(
    client: Client,
    settings: Settings,
    store: VectorStore,
    embedder: Embedder,
    db: Database,
) -> Sequence[Worker]:
    """One worker per task queue that has implemented task types."""
    import_activities = ImportActivities(settings, store, embedder)
    common = EventActivities(db).all()
    workflows_by_name = {w.__temporal_workflow_definition.name: w for w in WORKFLOWS}  # type: ignore[attr-defined]
    activities_by_queue = {TaskQueue.INGEST.value: import_activities.all()}
    queues: dict[str, list[type]] = {}
    for spec in REGISTRY.values():
        if spec.workflow is not None:
            queues.setdefault(spec.task_queue.value, []).append(workflows_by_name[spec.workflow])
    return [
        Worker(
            client,
            task_queue=settings.queue(queue),
            workflows=workflows,
            activities=[*common, *activities_by_queue.get(queue, [])],
            max_concurrent_activities=settings.worker_max_activities,
            max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
            default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
            graceful_shutdown_timeout=timedelta(seconds=5),
        )
        for queue, workflows in queues.items()
    ]


def main() -> None:
    from starter.node import run_standalone_worker

    run_standalone_worker()


if __name__ == "__main__":
    main()
