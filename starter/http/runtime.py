"""What route handlers share: settings, Temporal client, service, database, index, embedder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from temporalio.client import Client

from activities.database import Database
from activities.embedding import Embedder
from activities.vector_store import VectorStore
from knowledgeops.settings import Settings
from starter.service import TaskQueueService


@dataclass
class Runtime:
    settings: Settings
    client: Client
    service: TaskQueueService
    db: Database
    store: VectorStore
    embedder: Embedder


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
