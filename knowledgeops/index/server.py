"""A Qdrant server (QDRANT_URL) through qdrant-client: any number of workers, API processes and
CLIs share it. The server builds its indexes itself, in the background.

Collections made here have the same layout as the embedded engine's: an unnamed dense vector
(cosine) and, for chunks, the sparse vector `bm25` with the IDF modifier, plus payload indexes.
A chunks collection made before sparse vectors existed (one unnamed vector only) still answers
dense searches; `knowledgeops reindex` rebuilds it with both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from knowledgeops.index.engine import (
    INDEXED_FIELDS,
    SPARSE,
    Engine,
    EnginePoint,
    IndexOutdatedError,
    Kind,
    PointFilter,
    PointId,
    QuerySpec,
    Record,
    Scored,
)

_SCHEMA = {
    "keyword": models.PayloadSchemaType.KEYWORD,
    "bool": models.PayloadSchemaType.BOOL,
    "integer": models.PayloadSchemaType.INTEGER,
}


def server_filter(f: PointFilter | None) -> models.Filter:
    if f is None:
        return models.Filter()
    must: list[models.Condition] = []
    must_not: list[models.Condition] = []

    def field(key: str, match: Any) -> models.FieldCondition:
        return models.FieldCondition(key=key, match=match)

    if f.document_id is not None:
        must.append(field("document_id", models.MatchValue(value=f.document_id)))
    if f.document_ids is not None:
        must.append(field("document_id", models.MatchAny(any=sorted(set(f.document_ids)))))
    if f.versions is not None:
        must.append(field("version", models.MatchAny(any=sorted(set(f.versions)))))
    if f.not_version is not None:
        must_not.append(field("version", models.MatchValue(value=f.not_version)))
    if f.staged is True:
        must.append(field("staged", models.MatchValue(value=True)))
    elif f.staged is False:
        must_not.append(field("staged", models.MatchValue(value=True)))
    if f.owner is not None:
        must.append(field("owner", models.MatchValue(value=f.owner)))
    must.extend(field("tags", models.MatchValue(value=t)) for t in f.tags)
    return models.Filter(must=must or None, must_not=must_not or None)


QDRANT_ERRORS: tuple[type[Exception], ...] = (ResponseHandlingException, UnexpectedResponse)


def qdrant_unreachable(exc: BaseException) -> bool:
    """Whether the Qdrant server did not answer (or answered that it cannot, 502-504): an
    outage to wait out. qdrant-client wraps the transport's error."""
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code in (502, 503, 504)
    if isinstance(exc, ResponseHandlingException):
        exc = exc.source
    return isinstance(exc, httpx.TransportError)


def _dense_of(vector: Any) -> list[float] | None:
    if isinstance(vector, dict):
        vector = vector.get("")
    return [float(x) for x in vector] if isinstance(vector, list) else None


class ServerEngine(Engine):
    local = False

    def __init__(self, url: str, api_key: str = "") -> None:
        self._attach(QdrantClient(url=url, api_key=api_key or None))

    @classmethod
    def over(cls, client: QdrantClient) -> ServerEngine:
        """The engine over a client made elsewhere: the contract tests pass qdrant-client's
        local mode (`QdrantClient(":memory:")`), so this engine runs where no server is."""
        engine = cls.__new__(cls)
        engine._attach(client)
        return engine

    def _attach(self, client: QdrantClient) -> None:
        self._client = client
        self._sparse: dict[str, bool] = {}

    def collections(self) -> list[str]:
        return sorted(c.name for c in self._client.get_collections().collections)

    def exists(self, name: str) -> bool:
        return bool(self._client.collection_exists(name))

    def create(
        self, name: str, kind: Kind, dimension: int, metadata: dict[str, Any] | None = None
    ) -> None:
        if self._client.collection_exists(name):
            return
        dense = models.VectorParams(size=dimension, distance=models.Distance.COSINE)
        if kind == Kind.VECTORS:
            # Looked up by id, never searched: no HNSW graph to build (m=0).
            self._client.create_collection(
                name,
                vectors_config=dense,
                hnsw_config=models.HnswConfigDiff(m=0),
                metadata=metadata or None,
            )
            return
        self._client.create_collection(
            name,
            vectors_config=dense,
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            metadata=metadata or None,
        )
        for key, schema in INDEXED_FIELDS.items():
            self._client.create_payload_index(name, key, _SCHEMA[schema])

    def drop(self, name: str) -> bool:
        self._sparse.pop(name, None)
        if not self._client.collection_exists(name):
            return False
        self._client.delete_collection(name)
        return True

    def _params(self, name: str) -> models.CollectionParams:
        return self._client.get_collection(name).config.params

    def dimension(self, name: str) -> int:
        vectors = self._params(name).vectors
        if isinstance(vectors, dict):
            vectors = vectors.get("")
        if not isinstance(vectors, models.VectorParams):
            raise IndexOutdatedError(f"collection {name} has no unnamed dense vector; not ours")
        return int(vectors.size)

    def has_sparse(self, name: str) -> bool:
        if name not in self._sparse:
            self._sparse[name] = SPARSE in (self._params(name).sparse_vectors or {})
        return self._sparse[name]

    def metadata(self, name: str) -> dict[str, Any]:
        return dict(self._client.get_collection(name).config.metadata or {})

    def set_metadata(self, name: str, metadata: dict[str, Any]) -> None:
        # The server merges what it is sent into what it has (a null removes a key); the
        # contract replaces, so every stored key the new metadata lacks goes as a null.
        stale = {key: None for key in self.metadata(name) if key not in metadata}
        self._client.update_collection(name, metadata=stale | metadata)

    def alias(self, alias: str) -> str | None:
        for a in self._client.get_aliases().aliases:
            if a.alias_name == alias:
                return str(a.collection_name)
        return None

    def set_alias(self, alias: str, collection: str | None) -> None:
        # One aliases call: delete and create are applied together, with no moment between.
        ops: list[models.AliasOperations] = []
        if self.alias(alias) is not None:
            ops.append(
                models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
            )
        if collection is not None:
            ops.append(
                models.CreateAliasOperation(
                    create_alias=models.CreateAlias(collection_name=collection, alias_name=alias)
                )
            )
        if ops:
            self._client.update_collection_aliases(change_aliases_operations=ops)

    def upsert(self, name: str, points: Sequence[EnginePoint]) -> None:
        sparse = self.has_sparse(name)
        structs = []
        for p in points:
            vector: Any = p.dense
            if sparse and p.sparse is not None:
                vector = {
                    "": p.dense,
                    SPARSE: models.SparseVector(indices=p.sparse.indices, values=p.sparse.values),
                }
            structs.append(models.PointStruct(id=p.id, vector=vector, payload=p.payload))
        self._client.upsert(name, structs, wait=True)

    def retrieve(
        self, name: str, ids: Sequence[PointId], *, payload: bool, dense: bool
    ) -> list[Record]:
        records = self._client.retrieve(name, list(ids), with_payload=payload, with_vectors=dense)
        return [
            Record(str(r.id), dict(r.payload or {}), _dense_of(r.vector) if dense else None)
            for r in records
        ]

    def count(self, name: str, flt: PointFilter | None) -> int:
        return int(self._client.count(name, count_filter=server_filter(flt), exact=True).count)

    def delete(self, name: str, flt: PointFilter) -> None:
        selector = models.FilterSelector(filter=server_filter(flt))
        self._client.delete(name, selector, wait=True)

    def set_payload(self, name: str, flt: PointFilter, payload: dict[str, Any]) -> None:
        self._client.set_payload(name, payload, points=server_filter(flt), wait=True)

    def delete_payload(self, name: str, flt: PointFilter, keys: Sequence[str]) -> None:
        self._client.delete_payload(name, keys=list(keys), points=server_filter(flt), wait=True)

    def scroll(
        self,
        name: str,
        offset: PointId | None,
        limit: int,
        *,
        fields: Sequence[str] | None,
        dense: bool,
    ) -> tuple[list[Record], PointId | None]:
        records, after = self._client.scroll(
            name,
            limit=limit,
            offset=offset,
            with_payload=True if fields is None else list(fields),
            with_vectors=[""] if dense and self.has_sparse(name) else dense,
        )
        out = [
            Record(str(r.id), dict(r.payload or {}), _dense_of(r.vector) if dense else None)
            for r in records
        ]
        return out, (str(after) if after is not None else None)

    def query(
        self, name: str, specs: Sequence[QuerySpec], flt: PointFilter | None
    ) -> list[list[Scored]]:
        f = server_filter(flt)
        requests = []
        for spec in specs:
            if spec.sparse is not None:
                query: Any = models.SparseVector(
                    indices=spec.sparse.indices, values=spec.sparse.values
                )
                using: str | None = SPARSE
            else:
                query, using = spec.dense, None
            requests.append(
                models.QueryRequest(
                    query=query, using=using, filter=f, limit=spec.limit, with_payload=False
                )
            )
        responses = self._client.query_batch_points(name, requests)
        return [[Scored(str(p.id), float(p.score)) for p in r.points] for r in responses]

    def close(self) -> None:
        self._client.close()
