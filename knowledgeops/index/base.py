"""What `VectorIndex` is built on: the engine behind the index's own threads, its collections,
aliases and metadata, the tokenization of each chunks collection's keyword vectors, and the
calls that treat a collection as plain vectors by id (the embedding cache, backup and restore).

Separate from vector_index.py because none of this knows about documents: versions, staging,
scopes and search are there, written over these calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from knowledgeops.index import bm25
from knowledgeops.index.engine import Engine, EnginePoint, Kind, Record, Sparse
from knowledgeops.index.points import INDEX_PREFIX, StoredPoint, kind_of, payload_text
from knowledgeops.models.embedding import slug

T = TypeVar("T")
log = logging.getLogger(__name__)
# How often a bulk writer held back by the background build looks again, and for how long at
# most in all for one document (a build of a partition took up to ~4 minutes at 1M chunks).
ROOM_POLL_SECONDS = 1.0
ROOM_WAIT_SECONDS = 600.0


class IndexBase:
    """Async facade over an engine. Calls run on the index's own threads, so the event loop
    keeps heartbeating and a busy index never starves the shared default executor (which
    serves uploads)."""

    def __init__(self, engine: Engine, *, threads: int = 4) -> None:
        self.engine = engine
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="index")
        # Searches (and the lookups before them) on threads of their own: behind a bulk
        # import's queue of writes on the others, a search waited for them (bench.import_at_scale).
        self._query_threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="index-query")
        self._closers: list[Callable[[], None]] = []
        # Collection -> the tokenization its keyword vectors were made with (fixed for its
        # life, so read once).
        self._sparse_models: dict[str, str] = {}

    @property
    def local(self) -> bool:
        """Embedded in this process (one process at a time), not a shared server."""
        return self.engine.local

    def on_close(self, fn: Callable[[], None]) -> None:
        self._closers.append(fn)

    def close(self) -> None:
        for fn in reversed(self._closers):
            fn()
        self._threads.shutdown(wait=True)
        self._query_threads.shutdown(wait=True)
        self.engine.close()

    async def _query(self, fn: Callable[..., T], *args: Any) -> T:
        """A read a search waits for, on the query threads."""
        return await asyncio.get_running_loop().run_in_executor(self._query_threads, fn, *args)

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        # If the caller is cancelled mid-write, wait for the write to land before re-raising,
        # so cleanup that follows a cancellation never races a write still in flight.
        task = loop.run_in_executor(self._threads, partial(fn, *args, **kwargs))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait([task])
            raise

    @staticmethod
    def collection_name(model_id: str, tag: str = "") -> str:
        # One collection per embedding model (and per re-index): vectors of different models
        # never mix. Without an alias (no re-index yet), this is the live collection.
        return f"{INDEX_PREFIX}{slug(model_id)}" + (f"_{tag}" if tag else "")

    # -- collections, aliases, metadata -----------------------------------------------------

    async def collections(self) -> list[str]:
        return await self._run(self.engine.collections)

    async def exists(self, collection: str) -> bool:
        return await self._query(self.engine.exists, collection)

    async def ensure(self, collection: str, dimension: int) -> None:
        kind = kind_of(collection)
        # A new chunks collection records the tokenization its keyword vectors are made with,
        # in the step that creates it (an existing one keeps what it has).
        meta = {bm25.SPARSE_MODEL_KEY: bm25.SPARSE_MODEL} if kind == Kind.CHUNKS else None
        await self._run(self.engine.create, collection, kind, dimension, meta)

    async def drop_collection(self, collection: str) -> bool:
        self._sparse_models.pop(collection, None)
        return await self._run(self.engine.drop, collection)

    async def alias_target(self, alias: str) -> str | None:
        return await self._query(self.engine.alias, alias)

    async def aliased(self, alias: str) -> tuple[str, dict[str, Any]] | None:
        """The existing collection `alias` names and its metadata. Every search asks: the
        embedded engine answers from memory, here; a server in one trip to a query thread (a
        trip costs a search ~0.3 ms, bench.search_latency)."""
        if self.local:
            return self.engine.aliased(alias)
        return await self._query(self.engine.aliased, alias)

    async def set_alias(self, alias: str, collection: str | None) -> None:
        await self._run(self.engine.set_alias, alias, collection)

    async def metadata(self, collection: str) -> dict[str, Any]:
        return await self._query(self.engine.metadata, collection)

    async def set_metadata(self, collection: str, metadata: dict[str, Any]) -> None:
        """Replace a collection's metadata; a chunks collection's tokenization stays recorded
        whatever `metadata` says (it describes the vectors it holds, not the caller's wish)."""

        def write() -> None:
            meta = dict(metadata)
            if kind_of(collection) == Kind.CHUNKS:
                meta[bm25.SPARSE_MODEL_KEY] = self.sparse_model(collection)
            self.engine.set_metadata(collection, meta)

        await self._run(write)

    # -- keyword vectors: each collection's own tokenization (bm25.py) ----------------------
    # Called on the index's threads, inside the calls that write or search.

    def sparse_model(self, collection: str) -> str:
        """The tokenization of an existing chunks collection's keyword vectors."""
        model = self._sparse_models.get(collection)
        if model is None:
            model = bm25.sparse_model_of(self.engine.metadata(collection))
            if model != bm25.SPARSE_MODEL:
                # Not mixed: its texts and queries keep being tokenized as its vectors were.
                log.warning(
                    "the keyword vectors of %s were made by an earlier tokenization (%s); "
                    "`knowledgeops reindex` rebuilds them with the current one (%s), which "
                    "matches Chinese text better",
                    collection,
                    model,
                    bm25.SPARSE_MODEL,
                )
            self._sparse_models[collection] = model
        return model

    async def keyword_tokenization(self, collection: str) -> str:
        """The tokenization a chunks collection records, as recorded (for a report; one not
        made yet will be made with the current one)."""

        def read() -> str:
            if not self.engine.exists(collection):
                return bm25.SPARSE_MODEL
            recorded = self.engine.metadata(collection).get(bm25.SPARSE_MODEL_KEY)
            return str(recorded) if recorded else bm25.LEGACY_SPARSE_MODEL

        return await self._run(read)

    def document_vector(self, collection: str, text: str) -> Sparse:
        return bm25.document_vector(text, self.sparse_model(collection))

    def query_vector(self, collection: str, text: str) -> Sparse:
        return bm25.query_vector(text, self.sparse_model(collection))

    async def room_to_write(
        self,
        collection: str,
        document_id: str | None,
        most: float = ROOM_WAIT_SECONDS,
        *,
        writer: str | None = None,
    ) -> float:
        """Wait until a bulk write of the document's points (None: of documents anywhere in
        the collection, a batch's group) may go ahead (`Engine.has_room`: the embedded engine
        holds it while its build is too far behind), for `most` seconds at most; the seconds
        waited. `writer` names the write in the log (by default the document)."""
        writer = writer or document_id or "a bulk write"
        started = time.monotonic()
        # Polled: the count changes in the engine's own threads and its builder's child.
        while True:
            waited = time.monotonic() - started
            if await self._query(self.engine.has_room, collection, document_id):
                if waited > ROOM_POLL_SECONDS:
                    log.info(
                        "%s waited %.0f s to write: the index's build of %s was behind",
                        writer,
                        waited,
                        collection,
                    )
                return waited
            if waited >= most:
                # A build that keeps failing must not stop imports: write, unindexed.
                log.warning(
                    "writing %s after %.0f s: the index of %s is still not built; the worker's "
                    "log says why its builds fail or lag",
                    writer,
                    waited,
                    collection,
                )
                return waited
            await asyncio.sleep(ROOM_POLL_SECONDS)

    async def unindexed(self) -> dict[str, int]:
        """Index collections' points not in a vector index yet (being built meanwhile)."""
        return await self._run(self.engine.unindexed)

    # -- the embedding cache (vectors by id) ------------------------------------------------

    async def retrieve_vectors(self, collection: str, ids: Sequence[str]) -> dict[str, list[float]]:
        """Point id -> vector, for the ids that exist."""
        records = await self._by_id(collection, ids, dense=True)
        return {r.id: r.dense for r in records if r.dense is not None}

    async def existing_ids(self, collection: str, ids: Sequence[str]) -> set[str]:
        """The ids among `ids` that have a point; no vector or payload is read."""
        return {r.id for r in await self._by_id(collection, ids, dense=False)}

    async def _by_id(self, collection: str, ids: Sequence[str], *, dense: bool) -> list[Record]:
        if not ids or not await self.exists(collection):
            return []
        return await self._run(
            partial(self.engine.retrieve, collection, list(ids), payload=False, dense=dense)
        )

    async def upsert_vectors(
        self,
        collection: str,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        payloads: Sequence[dict[str, Any]],
    ) -> None:
        if not ids:
            return
        await self.ensure(collection, len(vectors[0]))
        points = [
            EnginePoint(i, list(v), p) for i, v, p in zip(ids, vectors, payloads, strict=True)
        ]
        await self._run(self.engine.upsert, collection, points)

    # -- backup and restore -----------------------------------------------------------------
    # A scroll export and an upsert import: the same calls on both engines, so an archive
    # restores into either. Sparse vectors are not exported: they are made again from the text.

    async def vector_params(self, collection: str) -> tuple[int, str]:
        """(vector size, distance name) of a collection."""
        return await self._run(self.engine.dimension, collection), "Cosine"

    async def export_points(
        self, collection: str, offset: int | str | None, limit: int
    ) -> tuple[list[StoredPoint], int | str | None]:
        """One page of points (id order) with vectors and payloads, and the next offset."""
        records, after = await self._run(
            partial(
                self.engine.scroll,
                collection,
                None if offset is None else str(offset),
                limit,
                fields=None,
                dense=True,
            )
        )
        points = []
        for r in records:
            if r.dense is None:
                raise ValueError(f"point {r.id} of {collection} has no dense vector")
            points.append(StoredPoint(r.id, r.dense, r.payload))
        return points, after

    async def import_points(
        self, collection: str, dimension: int, points: Sequence[StoredPoint]
    ) -> None:
        """Upsert exported points as they are (ids, vectors, payloads): nothing is embedded."""
        await self.ensure(collection, dimension)
        chunks = kind_of(collection) == Kind.CHUNKS

        def write() -> None:
            self.engine.upsert(
                collection,
                [
                    EnginePoint(
                        str(p.id),
                        p.vector,
                        p.payload,
                        self.document_vector(collection, payload_text(p.payload))
                        if chunks
                        else None,
                    )
                    for p in points
                ],
            )

        await self._run(write)
