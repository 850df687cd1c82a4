"""The Qdrant index of chunks: embedded local mode by default, a server when QDRANT_URL is set.

Point ids are derived from (document id, version, chunk index), so writing a chunk twice
overwrites it instead of duplicating it. An import writes its version's points *staged*
(invisible to search) next to the live version's, and publishes them at the end: the staged
flag is removed, then the other versions' points are deleted. So search answers from the
previous version until the new one is complete, and a failed import discards only its own
staged points. Points written before versions existed have neither field and count as live.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from qdrant_client import QdrantClient, models

from knowledgeops.embedding import slug
from knowledgeops.settings import Settings
from knowledgeops.stores.chunk_store import Chunk

T = TypeVar("T")
_POINT_NAMESPACE = uuid.UUID("5b0a6f5e-8d1c-4a53-9a3e-6f1f0c2d7e11")


def point_id(document_id: str, chunk_index: int, version: str | None = None) -> str:
    key = f"{document_id}\x00{chunk_index}"
    if version is not None:
        key = f"{document_id}\x00{version}\x00{chunk_index}"
    return str(uuid.uuid5(_POINT_NAMESPACE, key))


def _of_document(document_id: str) -> models.FieldCondition:
    return models.FieldCondition(key="document_id", match=models.MatchValue(value=document_id))


# Search never sees staged points.
_NOT_STAGED = models.FieldCondition(key="staged", match=models.MatchValue(value=True))


@dataclass(frozen=True)
class Hit:
    score: float
    document_id: str
    chunk_index: int
    text: str
    page: int | None
    heading: str | None


@dataclass(frozen=True)
class StoredPoint:
    """A point as exported for a backup and imported by a restore: no embedding needed."""

    id: int | str
    vector: list[float]
    payload: dict[str, Any]


class QdrantLockedError(RuntimeError):
    pass


class VectorStore:
    """Async facade over the sync client. Calls run on the store's own threads, so the event
    loop keeps heartbeating and a busy index never starves the shared default executor (which
    serves uploads). Local mode is not thread-safe: it gets exactly one thread."""

    def __init__(self, client: QdrantClient, *, local: bool) -> None:
        self._client = client
        self._local = local
        self._threads = ThreadPoolExecutor(
            max_workers=1 if local else 8, thread_name_prefix="qdrant"
        )
        self._ready: set[str] = set()

    @classmethod
    def open(cls, settings: Settings) -> VectorStore:
        if settings.qdrant_url:
            client = QdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key or None)
            return cls(client, local=False)
        path: Path = settings.qdrant_path
        path.mkdir(parents=True, exist_ok=True)
        try:
            client = QdrantClient(path=str(path))
        except RuntimeError as e:
            if "already accessed" in str(e):
                raise QdrantLockedError(
                    f"The local Qdrant index at {path} is held by another process (the running "
                    "worker / `knowledgeops dev`). Search through that process's API, or set "
                    "QDRANT_URL to use a Qdrant server shared by all processes."
                ) from None
            raise
        return cls(client, local=True)

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        self._client.close()

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

    async def run_client(self, fn: Callable[[QdrantClient], T]) -> T:
        """Run `fn(client)` on the store's thread (for modules that extend the store)."""
        return await self._run(fn, self._client)

    @staticmethod
    def collection_name(model_id: str, tag: str = "") -> str:
        # One collection per embedding model (and per re-index): vectors of different models
        # never mix. Without an alias (no re-index yet), this is the live collection.
        return f"chunks_{slug(model_id)}" + (f"_{tag}" if tag else "")

    async def _ensure(self, collection: str, dimension: int, *, indexed: bool = True) -> None:
        if collection in self._ready:
            return

        def create() -> None:
            if not self._client.collection_exists(collection):
                self._client.create_collection(
                    collection,
                    vectors_config=models.VectorParams(
                        size=dimension, distance=models.Distance.COSINE
                    ),
                )
                if indexed and not self._local:  # local mode has no payload indexes
                    for field, schema in (
                        ("document_id", models.PayloadSchemaType.KEYWORD),
                        ("chunk_index", models.PayloadSchemaType.INTEGER),
                        ("version", models.PayloadSchemaType.KEYWORD),
                        ("staged", models.PayloadSchemaType.BOOL),
                    ):
                        self._client.create_payload_index(collection, field, schema)

        await self._run(create)
        self._ready.add(collection)

    async def _exists(self, collection: str) -> bool:
        if collection in self._ready:
            return True
        return await self._run(self._client.collection_exists, collection)

    async def upsert(
        self,
        collection: str,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
        *,
        version: str | None = None,
        staged: bool = False,
    ) -> None:
        if not chunks:
            return
        await self._ensure(collection, len(vectors[0]))
        extra: dict[str, Any] = {}
        if version is not None:
            extra["version"] = version
        if staged:
            extra["staged"] = True
        points = [
            models.PointStruct(
                id=point_id(document_id, c.index, version),
                vector=list(v),
                payload={
                    "document_id": document_id,
                    "chunk_index": c.index,
                    "text": c.text,
                    "page": c.page,
                    "heading": c.heading,
                    "h": c.content_hash,
                    **extra,
                },
            )
            for c, v in zip(chunks, vectors, strict=True)
        ]
        await self._run(self._client.upsert, collection, points, wait=True)

    @staticmethod
    def _version_filter(document_id: str, version: str) -> list[models.Condition]:
        return [
            _of_document(document_id),
            models.FieldCondition(key="version", match=models.MatchValue(value=version)),
        ]

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
        Each step is a filtered scan of the whole collection in local mode, so a caller that
        knows there is nothing to do skips it: `staged=False` (nothing was written staged),
        `others=False` (a first version: no other exists)."""
        if not await self._exists(collection):
            return 0
        mine = self._version_filter(document_id, version)
        # Other versions' live points; staged ones belong to a writer still at work (an
        # import or a rebuild going on in this collection), whose own publish or discard
        # removes them.
        other_versions = models.Filter(
            must=[mine[0]],
            must_not=[
                models.FieldCondition(key="version", match=models.MatchValue(value=version)),
                _NOT_STAGED,
            ],
        )

        def swap() -> int:
            # Unstage first: for a moment both versions answer, rather than neither.
            if staged:
                self._client.delete_payload(
                    collection, keys=["staged"], points=models.Filter(must=mine), wait=True
                )
            return self._delete_matching(collection, other_versions) if others else 0

        return await self._run(swap)

    async def discard_version(
        self, collection: str, document_id: str, version: str, *, staged_only: bool = True
    ) -> int:
        """Delete a version's staged points (with `staged_only`), or all its points (a version
        that was never published: written unstaged because nothing older was searchable)."""
        if not await self._exists(collection):
            return 0
        must = self._version_filter(document_id, version)
        flt = models.Filter(must=[*must, _NOT_STAGED] if staged_only else must)
        return await self._run(self._delete_matching, collection, flt)

    async def has_version(self, collection: str, document_id: str, versions: set[str]) -> bool:
        """Whether a document has searchable points of one of `versions` in `collection`."""
        if not await self._exists(collection):
            return False
        flt = models.Filter(
            must=[
                _of_document(document_id),
                models.FieldCondition(key="version", match=models.MatchAny(any=sorted(versions))),
            ],
            must_not=[_NOT_STAGED],
        )
        res = await self._run(self._client.count, collection, count_filter=flt, exact=False)
        return res.count > 0

    async def retrieve_vectors(self, collection: str, ids: Sequence[str]) -> dict[str, list[float]]:
        """Point id -> vector, for the ids that exist."""
        if not ids or not await self._exists(collection):
            return {}
        records = await self._run(
            self._client.retrieve, collection, list(ids), with_payload=False, with_vectors=True
        )
        out: dict[str, list[float]] = {}
        for r in records:
            if isinstance(r.vector, list):
                out[str(r.id)] = [float(x) for x in r.vector if isinstance(x, float | int)]
        return out

    async def upsert_vectors(
        self,
        collection: str,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        payloads: Sequence[dict[str, Any]],
    ) -> None:
        if not ids:
            return
        await self._ensure(collection, len(vectors[0]), indexed=False)
        points = [
            models.PointStruct(id=i, vector=list(v), payload=p)
            for i, v, p in zip(ids, vectors, payloads, strict=True)
        ]
        await self._run(self._client.upsert, collection, points, wait=True)

    @staticmethod
    def _doc_filter(document_id: str) -> models.Filter:
        return models.Filter(must=[_of_document(document_id)])

    async def count(
        self, collection: str, document_id: str | None = None, *, staged: bool = False
    ) -> int:
        """Searchable points (of a document); with `staged`, staged ones too."""
        if not await self._exists(collection):
            return 0
        flt = self._doc_filter(document_id) if document_id else models.Filter()
        if not staged:
            flt.must_not = [_NOT_STAGED]
        res = await self._run(self._client.count, collection, count_filter=flt, exact=True)
        return int(res.count)

    async def delete_document(self, collection: str, document_id: str) -> int:
        """Delete every point of a document (all versions, staged or not)."""
        if not await self._exists(collection):
            return 0
        return await self._run(self._delete_matching, collection, self._doc_filter(document_id))

    def _delete_matching(self, collection: str, flt: models.Filter) -> int:
        """Delete the points `flt` matches (on the store's thread); how many there were."""
        n = self._client.count(collection, count_filter=flt, exact=True).count
        if n:
            self._client.delete(collection, models.FilterSelector(filter=flt), wait=True)
        return int(n)

    async def collections(self) -> list[str]:
        res = await self._run(self._client.get_collections)
        return [c.name for c in res.collections]

    # Backup and restore: a scroll export and an upsert import. The same calls work on the
    # embedded index and on a server (which has snapshots, but they are per node, tied to
    # its version and unavailable in local mode), so an archive restores into either mode.

    async def vector_params(self, collection: str) -> tuple[int, str]:
        """(vector size, distance name) of a collection with one unnamed vector."""
        info = await self._run(self._client.get_collection, collection)
        params = info.config.params.vectors
        if not isinstance(params, models.VectorParams):
            raise ValueError(f"collection {collection} has named vectors; not one of ours")
        return int(params.size), str(params.distance.value)

    async def export_points(
        self, collection: str, offset: int | str | None, limit: int
    ) -> tuple[list[StoredPoint], int | str | None]:
        """One page of points (id order) with vectors and payloads, and the next offset."""
        records, next_offset = await self._run(
            self._client.scroll,
            collection,
            limit=limit,
            offset=offset,
            with_payload=True,
            with_vectors=True,
        )
        points = []
        for r in records:
            vector = [x for x in r.vector if isinstance(x, float | int)] if r.vector else []
            if not isinstance(r.vector, list) or len(vector) != len(r.vector):
                raise ValueError(f"point {r.id} of {collection} has no single unnamed vector")
            pid = r.id if isinstance(r.id, int) else str(r.id)
            points.append(StoredPoint(pid, [float(x) for x in vector], dict(r.payload or {})))
        return points, (next_offset if isinstance(next_offset, int | str) else None)

    async def import_points(
        self, collection: str, dimension: int, points: Sequence[StoredPoint]
    ) -> None:
        """Upsert exported points as they are (ids, vectors, payloads): nothing is embedded."""
        await self._ensure(collection, dimension)
        structs = [models.PointStruct(id=p.id, vector=p.vector, payload=p.payload) for p in points]
        await self._run(self._client.upsert, collection, structs, wait=True)

    async def drop_collection(self, collection: str) -> bool:
        self._ready.discard(collection)
        if not await self._run(self._client.collection_exists, collection):
            return False
        await self._run(self._client.delete_collection, collection)
        return True

    async def document_point_counts(self, collection: str, page: int = 2048) -> dict[str, int]:
        """Document id -> its number of points, over the whole collection: a scroll reading
        only the document id, page by page (so the event loop keeps heartbeating)."""
        counts: dict[str, int] = {}
        if not await self._exists(collection):
            return counts
        offset: Any = None
        while True:
            records, offset = await self._run(
                self._client.scroll,
                collection,
                limit=page,
                offset=offset,
                with_payload=["document_id"],
                with_vectors=False,
            )
            for r in records:
                doc = str((r.payload or {}).get("document_id"))
                counts[doc] = counts.get(doc, 0) + 1
            if offset is None:
                return counts

    async def search(
        self,
        collection: str,
        vector: Sequence[float],
        limit: int,
        document_id: str | None = None,
        *,
        document_ids: Sequence[str] | None = None,
    ) -> list[Hit]:
        """The `limit` nearest chunks, of `document_id` / among `document_ids` when given:
        the filter is part of the vector query, so a scoped search still finds `limit`."""
        if document_ids is not None and not document_ids:
            return []
        if not await self._exists(collection):
            return []
        must: list[models.Condition] = []
        if document_id:
            must.append(
                models.FieldCondition(key="document_id", match=models.MatchValue(value=document_id))
            )
        if document_ids is not None:
            must.append(
                models.FieldCondition(
                    key="document_id", match=models.MatchAny(any=sorted(set(document_ids)))
                )
            )
        flt = models.Filter(must=must or None, must_not=[_NOT_STAGED])
        res = await self._run(
            partial(
                self._client.query_points,
                collection,
                query=list(vector),
                query_filter=flt,
                limit=limit,
                with_payload=True,
            )
        )
        hits = []
        for p in res.points:
            pl = p.payload or {}
            hits.append(
                Hit(
                    score=float(p.score),
                    document_id=str(pl.get("document_id")),
                    chunk_index=int(pl.get("chunk_index", -1)),
                    text=str(pl.get("text", "")),
                    page=pl.get("page"),
                    heading=pl.get("heading"),
                )
            )
        return hits
