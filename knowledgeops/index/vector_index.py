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

The engine's threads, collections and the calls that treat a collection as plain vectors by
id (the embedding cache, backup and restore) are in base.py (`IndexBase`); this module adds
what knows about documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from knowledgeops.contracts.search import SearchMode
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.index.base import IndexBase
from knowledgeops.index.engine import (
    Engine,
    EnginePoint,
    IndexOutdatedError,
    PointFilter,
    QuerySpec,
    Scored,
)
from knowledgeops.index.fusion import FusionConfig, fuse
from knowledgeops.index.points import Hit, PointFields, Scope, point_id

# Candidates each list contributes to a hybrid ranking: enough for Recall@100, and the
# normalisation of scores needs a list deep enough that its lowest score means "unrelated".
HYBRID_CANDIDATES = 100


class VectorIndex(IndexBase):
    """The interface the rest of the code uses: `IndexBase` plus documents' chunks, their
    versions, and search."""

    def __init__(
        self, engine: Engine, *, fusion: FusionConfig | None = None, threads: int = 4
    ) -> None:
        super().__init__(engine, threads=threads)
        self.fusion = fusion or FusionConfig()

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
                    self.document_vector(collection, c.index_text),
                )
                for c, v in zip(chunks, vectors, strict=True)
            ]
            self.engine.upsert(collection, points)

        await self._run(write)

    async def upsert_documents(
        self,
        collection: str,
        documents: Sequence[tuple[PointFields, Sequence[Chunk], Sequence[Sequence[float]]]],
    ) -> None:
        """Many documents' chunks in one engine write (a batch import's group: one write
        instead of one per document, each with its fixed cost; measured ~50 ms a write)."""
        documents = [d for d in documents if d[1]]
        if not documents:
            return
        await self.ensure(collection, len(documents[0][2][0]))

        def write() -> None:
            points = [
                EnginePoint(
                    point_id(fields.document_id, c.index, fields.version),
                    list(v),
                    fields.payload(c),
                    self.document_vector(collection, c.index_text),
                )
                for fields, chunks, vectors in documents
                for c, v in zip(chunks, vectors, strict=True)
            ]
            self.engine.upsert(collection, points)

        await self._run(write)

    async def publish_documents(
        self, collection: str, version: str, document_ids: Sequence[str], staged: Sequence[str]
    ) -> int:
        """`publish` for many documents sharing one version (a batch import's group), in two
        engine calls whatever their number: unstage the `staged` ones' points of `version`,
        then delete the documents' searchable points of every other version. Returns points
        deleted."""
        if not document_ids or not await self.exists(collection):
            return 0
        mine = PointFilter(document_ids=sorted(staged), versions=[version])
        others = PointFilter(document_ids=sorted(document_ids), not_version=version, staged=False)

        def swap() -> int:
            if staged:  # unstage first: for a moment both versions answer, rather than neither
                self.engine.delete_payload(collection, mine, ["staged"])
            return self._delete_matching(collection, others)

        return await self._run(swap)

    async def discard_documents(
        self, collection: str, version: str, document_ids: Sequence[str]
    ) -> int:
        """Every point of `version` of these documents (a batch's versions it never
        published, or did not get to keep)."""
        if not document_ids or not await self.exists(collection):
            return 0
        flt = PointFilter(document_ids=sorted(document_ids), versions=[version])
        return await self._run(self._delete_matching, collection, flt)

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
        # One trip to a query thread for all of it: each trip is a thread hop and a wake-up of
        # the event loop, which cost more than the checks they ran (bench.search_latency).
        return await self._query(self._search, collection, limit, vector, text, mode, scope)

    def _search(
        self,
        collection: str,
        limit: int,
        vector: Sequence[float] | None,
        text: str,
        mode: SearchMode,
        scope: Scope,
    ) -> list[Hit]:
        if not self.engine.exists(collection):
            return []
        if mode != SearchMode.DENSE and not self.engine.has_sparse(collection):
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
            sparse = self.query_vector(collection, text)
            if sparse.indices:
                specs.append(QuerySpec(depth, sparse=sparse))
            elif mode == SearchMode.KEYWORD:
                return []  # nothing but stop words and punctuation: no keyword matches
        ranked = self.engine.query(collection, specs, flt)
        if mode == SearchMode.HYBRID and len(ranked) == 2:
            best: list[Scored] = fuse(ranked[0], ranked[1], self.fusion, limit)
        else:
            best = ranked[0][:limit] if ranked else []
        return self._hits(collection, best)

    def _hits(self, collection: str, ranked: Sequence[Scored]) -> list[Hit]:
        if not ranked:
            return []
        records = self.engine.retrieve(
            collection, [s.id for s in ranked], payload=True, dense=False
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
