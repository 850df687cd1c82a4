"""What route handlers share: settings, Temporal client, the task and document services, and
the resources of the process (database, index, embedder)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from temporalio.client import Client

from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.models.embedding import Embedder
from knowledgeops.runtime.resources import Resources
from starter.services.documents import DocumentService
from starter.services.tasks import TaskQueueService


@dataclass
class Runtime:
    settings: Settings
    client: Client
    service: TaskQueueService
    documents: DocumentService
    db: Database
    store: VectorIndex
    embedder: Embedder
    # Embedders by model (search embeds with the live index's model).
    resources: Resources
    events: EventStore = field(init=False)

    def __post_init__(self) -> None:
        # Built once: an event store builds its projections and their statements.
        self.events = EventStore(self.db)

    @classmethod
    def build(cls, client: Client, resources: Resources) -> Runtime:
        s, db = resources.settings, resources.db
        service = TaskQueueService(client, s, db)
        documents = DocumentService(service, db, s, resources.store, resources.files)
        return cls(
            s, client, service, documents, db, resources.store, resources.embedder, resources
        )


# Async, as it blocks on nothing: FastAPI runs a plain `def` dependency in a worker thread, a
# hop per dependency on every request (measured on search, bench.search_latency).
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
