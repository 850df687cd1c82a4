"""The index of chunks and the embedding cache: the one interface the rest of the code uses.

Behind it one engine: Qdrant Edge embedded in this process (default), or a Qdrant server when
QDRANT_URL is set (`open_index`). Everything here is written once over the engine primitives.

Point ids are derived from (document id, version, chunk index), so writing a chunk twice
overwrites it instead of duplicating it. An import writes its version's points *staged*
(invisible to search) next to the live version's, and publishes them at the end: the staged
flag is removed, then the other versions' points are deleted. So search answers from the
previous version until the new one is complete, and a failed import discards only its own
staged points. Points written before versions existed have neither field and count as live.
Each point carries its document's owner and tags, so a scoped search filters inside the
engine instead of sending the list of every document the caller may see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from knowledgeops.contracts.search import SearchMode
from knowledgeops.embedding import slug
from knowledgeops.index import bm25
from knowledgeops.index.engine import (
    Engine,
    EnginePoint,
    IndexOutdatedError,
    Kind,
    PointFilter,
    QuerySpec,
    Scored,
)
from knowledgeops.index.fusion import FusionConfig, fuse
from knowledgeops.index.points import (
    INDEX_PREFIX,
    Hit,
    PointFields,
    Scope,
    StoredPoint,
    kind_of,
    payload_text,
    point_id,
)
from knowledgeops.stores.chunk_store import Chunk

T = TypeVar("T")
# Candidates each list contributes to a hybrid ranking: enough for Recall@100, and the
# normalisation of scores needs a list deep enough that its lowest score means "unrelated".
HYBRID_CANDIDATES = 100


class VectorIndex:
    """Async facade over an engine. Calls run on the index's own threads, so the event loop
    keeps heartbeating and a busy index never starves the shared default executor (which
    serves uploads)."""

    def __init__(
        self, engine: Engine, *, fusion: FusionConfig | None = None, threads: int = 4
    ) -> None:
        self.engine = engine
        self.fusion = fusion or FusionConfig()
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="index")
        self._closers: list[Callable[[], None]] = []

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
        self.engine.close()

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
        return await self._run(self.engine.exists, collection)

    async def ensure(self, collection: str, dimension: int) -> None:
        await self._run(self.engine.create, collection, kind_of(collection), dimension)

    async def drop_collection(self, collection: str) -> bool:
        return await self._run(self.engine.drop, collection)

    async def alias_target(self, alias: str) -> str | None:
        return await self._run(self.engine.alias, alias)

    async def set_alias(self, alias: str, collection: str | None) -> None:
        await self._run(self.engine.set_alias, alias, collection)

    async def metadata(self, collection: str) -> dict[str, Any]:
        return await self._run(self.engine.metadata, collection)

    async def set_metadata(self, collection: str, metadata: dict[str, Any]) -> None:
        await self._run(self.engine.set_metadata, collection, metadata)

    async def unindexed(self) -> dict[str, int]:
        """Index collections' points not in a vector index yet (being built meanwhile)."""
        return await self._run(self.engine.unindexed)

    # -- chunks -----------------------------------------------------------------------------

    async def upsert(
        self,
        collection: str,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
        *,
        version: str | None = None,
        staged: bool = False,
        owner: str | None = None,
        tags: Sequence[str] = (),
    ) -> None:
        if not chunks:
            return
        await self.ensure(collection, len(vectors[0]))
        fields = PointFields(document_id, version, staged, owner, tuple(tags))

        def write() -> None:
            points = [
                EnginePoint(
                    point_id(document_id, c.index, version),
                    list(v),
                    fields.payload(c),
                    bm25.document_vector(c.index_text),
                )
                for c, v in zip(chunks, vectors, strict=True)
            ]
            self.engine.upsert(collection, points)

        await self._run(write)

    async def publish(
        self,
        collection: str,
        document_id: str,
        version: str,
        *,
        staged: bool = True,
        others: bool = True,
    ) -> int:
        """Make a version's staged points live, then delete every other version's points.
        Idempotent (a retry finds nothing staged and nothing else). Returns points deleted.
        A caller that knows there is nothing to do skips a step: `staged=False` (nothing was
        written staged), `others=False` (a first version: no other exists)."""
        if not await self.exists(collection):
            return 0
        mine = PointFilter(document_id=document_id, versions=[version])
        # Other versions' live points; staged ones belong to a writer still at work (an
        # import or a rebuild going on in this collection), whose own publish or discard
        # removes them.
        other_versions = PointFilter(document_id=document_id, not_version=version, staged=False)

        def swap() -> int:
            # Unstage first: for a moment both versions answer, rather than neither.
            if staged:
                self.engine.delete_payload(collection, mine, ["staged"])
            return self._delete_matching(collection, other_versions) if others else 0

        return await self._run(swap)

    async def discard_version(
        self, collection: str, document_id: str, version: str, *, staged_only: bool = True
    ) -> int:
        """Delete a version's staged points (with `staged_only`), or all its points (a version
        that was never published: written unstaged because nothing older was searchable)."""
        if not await self.exists(collection):
            return 0
        flt = PointFilter(
            document_id=document_id, versions=[version], staged=True if staged_only else None
        )
        return await self._run(self._delete_matching, collection, flt)

    async def has_version(self, collection: str, document_id: str, versions: set[str]) -> bool:
        """Whether a document has searchable points of one of `versions` in `collection`."""
        if not await self.exists(collection):
            return False
        flt = PointFilter(document_id=document_id, versions=sorted(versions), staged=False)
        return await self._run(self.engine.count, collection, flt) > 0

    async def count(
        self, collection: str, document_id: str | None = None, *, staged: bool = False
    ) -> int:
        """Searchable points (of a document); with `staged`, staged ones too."""
        if not await self.exists(collection):
            return 0
        flt = PointFilter(document_id=document_id, staged=None if staged else False)
        return await self._run(self.engine.count, collection, flt)

    async def delete_document(self, collection: str, document_id: str) -> int:
        """Delete every point of a document (all versions, staged or not)."""
        if not await self.exists(collection):
            return 0
        return await self._run(
            self._delete_matching, collection, PointFilter(document_id=document_id)
        )

    async def stage_document(self, collection: str, document_id: str) -> None:
        """Stage every point of a document: search, which never returns staged points, stops
        finding it at once (a delete task removes the points afterwards)."""
        if await self.exists(collection):
            flt = PointFilter(document_id=document_id)
            await self._run(self.engine.set_payload, collection, flt, {"staged": True})

    async def set_document_fields(
        self, collection: str, document_id: str, owner: str | None, tags: Sequence[str]
    ) -> None:
        """A document's owner and tags on all its points (search filters by them)."""
        if not await self.exists(collection):
            return
        flt = PointFilter(document_id=document_id)

        def write() -> None:
            self.engine.set_payload(collection, flt, {"tags": sorted(set(tags))})
            if owner is None:
                self.engine.delete_payload(collection, flt, ["owner"])
            else:
                self.engine.set_payload(collection, flt, {"owner": owner})

        await self._run(write)

    def _delete_matching(self, collection: str, flt: PointFilter) -> int:
        """Delete the points `flt` matches (on the index's thread); how many there were."""
        n = self.engine.count(collection, flt)
        if n:
            self.engine.delete(collection, flt)
        return n

    async def document_point_counts(self, collection: str, page: int = 2048) -> dict[str, int]:
        """Document id -> its number of points, over the whole collection: a scroll reading
        only the document id, page by page (so the event loop keeps heartbeating)."""
        counts: dict[str, int] = {}
        if not await self.exists(collection):
            return counts
        offset: str | None = None
        while True:
            records, offset = await self._run(
                partial(
                    self.engine.scroll,
                    collection,
                    offset,
                    page,
                    fields=["document_id"],
                    dense=False,
                )
            )
            for r in records:
                doc = str(r.payload.get("document_id"))
                counts[doc] = counts.get(doc, 0) + 1
            if offset is None:
                return counts

    async def search(
        self,
        collection: str,
        limit: int,
        *,
        vector: Sequence[float] | None = None,
        text: str = "",
        mode: SearchMode = SearchMode.HYBRID,
        scope: Scope | None = None,
    ) -> list[Hit]:
        """The `limit` best chunks for the query (`vector`: its embedding, needed by dense and
        hybrid; `text`: the query, needed by keyword and hybrid) among the scope's documents:
        the filter is part of the engine's query, so a scoped search still finds `limit`."""
        scope = scope or Scope()
        if scope.document_ids is not None and not scope.document_ids:
            return []
        if not await self.exists(collection):
            return []
        if mode != SearchMode.DENSE and not await self._run(self.engine.has_sparse, collection):
            raise IndexOutdatedError(
                f"the index {collection} was built before keyword search existed; run "
                "`knowledgeops reindex` to add it (meanwhile search with mode=dense)"
            )
        flt = PointFilter(
            document_id=scope.document_id,
            document_ids=scope.document_ids,
            owner=scope.owner,
            tags=tuple(scope.tags),
            staged=False,
        )
        depth = max(limit, HYBRID_CANDIDATES) if mode == SearchMode.HYBRID else limit
        specs: list[QuerySpec] = []
        if mode != SearchMode.KEYWORD:
            if vector is None:
                raise ValueError(f"a {mode} search needs the query's embedding")
            specs.append(QuerySpec(depth, dense=list(vector)))
        if mode != SearchMode.DENSE:
            sparse = bm25.query_vector(text)
            if sparse.indices:
                specs.append(QuerySpec(depth, sparse=sparse))
            elif mode == SearchMode.KEYWORD:
                return []  # nothing but stop words and punctuation: no keyword matches
        ranked = await self._run(self.engine.query, collection, specs, flt)
        if mode == SearchMode.HYBRID and len(ranked) == 2:
            best: list[Scored] = fuse(ranked[0], ranked[1], self.fusion)[:limit]
        else:
            best = ranked[0][:limit] if ranked else []
        return await self._hits(collection, best)

    async def _hits(self, collection: str, ranked: Sequence[Scored]) -> list[Hit]:
        if not ranked:
            return []
        records = await self._run(
            partial(
                self.engine.retrieve, collection, [s.id for s in ranked], payload=True, dense=False
            )
        )
        by_id = {r.id: r.payload for r in records}
        hits = []
        for s in ranked:
            pl = by_id.get(s.id)
            if pl is None:
                continue  # deleted between the query and this read
            hits.append(
                Hit(
                    score=float(s.score),
                    document_id=str(pl.get("document_id")),
                    chunk_index=int(pl.get("chunk_index", -1)),
                    text=str(pl.get("text", "")),
                    page=pl.get("page"),
                    heading=pl.get("heading"),
                )
            )
        return hits

    # -- the embedding cache (vectors by id) ------------------------------------------------

    async def retrieve_vectors(self, collection: str, ids: Sequence[str]) -> dict[str, list[float]]:
        """Point id -> vector, for the ids that exist."""
        if not ids or not await self.exists(collection):
            return {}
        records = await self._run(
            partial(self.engine.retrieve, collection, list(ids), payload=False, dense=True)
        )
        return {r.id: r.dense for r in records if r.dense is not None}

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
                        bm25.document_vector(payload_text(p.payload)) if chunks else None,
                    )
                    for p in points
                ],
            )

        await self._run(write)
