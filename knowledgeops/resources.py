"""The process-wide resources activities and the API share, opened once and closed once.

Embedded Qdrant admits one process per folder, and the local embedding model is a ~120 MB
child process: a process opens them here, once, and hands them to whatever needs them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from knowledgeops.chat import ChatModel, make_chat_model
from knowledgeops.embedding import Embedder, make_embedder
from knowledgeops.settings import Settings
from knowledgeops.stores.database import Database
from knowledgeops.stores.vector_store import VectorStore


@dataclass
class Resources:
    settings: Settings
    db: Database
    store: VectorStore
    embedder: Embedder
    # None: no CHAT_MODEL / VISION_MODEL configured (the AI types use their local methods).
    chat: ChatModel | None = None
    vision: ChatModel | None = None

    @property
    def collection(self) -> str:
        """The index collection of the configured embedding model."""
        return VectorStore.collection_name(self.embedder.model_id)


@contextlib.asynccontextmanager
async def open_resources(settings: Settings, *, warm_up: bool = True) -> AsyncIterator[Resources]:
    """Database (migrated), vector index, embedder and chat models; closed in reverse on exit."""
    async with contextlib.AsyncExitStack() as stack:
        db = await Database.open(settings)
        stack.push_async_callback(db.close)
        store = VectorStore.open(settings)
        stack.callback(store.close)
        embedder = make_embedder(settings)
        stack.push_async_callback(embedder.aclose)
        if warm_up:
            await embedder.warm_up()
        chat = make_chat_model(settings)
        if chat is not None:
            stack.push_async_callback(chat.aclose)
        vision = make_chat_model(settings, vision=True)
        if vision is not None:
            stack.push_async_callback(vision.aclose)
        yield Resources(settings, db, store, embedder, chat, vision)
