"""How the index's engine-neutral terms map onto Qdrant Edge's types: shard configuration,
filters, and the payload as stored (see edge.py for the engine itself)."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qdrant_edge import (
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HnswIndexConfig,
    MatchAny,
    MatchValue,
    Memory,
    Modifier,
    PayloadSchemaType,
    Point,
    QueryRequest,
    ScalarQuantizationConfig,
    ScalarType,
    SparseVector,
    UpdateOperation,
)

from knowledgeops.index.engine import INDEXED_FIELDS, SPARSE, EnginePoint, Kind, PointFilter

SCHEMA = {
    "keyword": PayloadSchemaType.Keyword,
    "bool": PayloadSchemaType.Bool,
    "integer": PayloadSchemaType.Integer,
}
# Edge's Python binding matches `MatchValue(True)` as the integer 1, so a boolean field never
# matches (qdrant-edge-py 0.9.0, measured): the staged flag is stored as 1 and read back as True.
FLAG = "staged"


@dataclass(frozen=True)
class BuildSettings:
    """When the background builder indexes a collection (see edge_builder.py)."""

    # Unindexed points that start a build at once, or this share of the points already
    # indexed if that is more: a build copies the whole shard, so builds get rarer as the
    # index grows and their cost per point written stays flat.
    points: int = 10_000
    growth: float = 0.1
    # A build of fewer (at least `idle_points`) once nothing was written for this long.
    idle_seconds: float = 30.0
    idle_points: int = 1_000
    # Largest segment the optimizer merges into (points); bounds one build's cost at any size.
    max_segment_points: int = 200_000
    # Segments a shard may keep before the optimizer merges the smallest. Edge's default is the
    # machine's cores: on two, each build merged the points written since the last into a
    # segment of all the others and rebuilt its whole graph (measured at 100,000 + 25,000
    # points: 22-28 s a build, growing with the shard; with 8, 5 s, flat; search alike), so at
    # 1M the builds fell ever further behind an import.
    segments: int = 8
    # Points a build's log of writes holds whole, to replay them as written (edge_collection.
    # Upsert): ~5-7 KB each (a 512-dimension vector, its words, the payload), so ~200 MB at
    # most; writes beyond are replayed by reading their points back, far slower.
    held_points: int = 32_000
    # Unindexed points a partition may hold before bulk writes to it wait for its build
    # (`EdgeEngine.has_room`): search scans them exactly, their full vectors stay mapped, and at
    # 1M an import outran the builds by ~500,000 points, the worker's RSS near 4 GB. A build is
    # due at this many whatever the growth rule says.
    unindexed_limit: int = 40_000
    # Shards a chunks collection is split into once a build finds it holding `split_points`
    # (edge_collection.py): a build holds a copy of one, so more partitions mean a smaller
    # peak, and more work per search.
    partitions: int = 4
    split_points: int = 20_000


def shard_config(kind: Kind, dimension: int, build: BuildSettings) -> EdgeConfig:
    def kb(points: int) -> int:  # the optimizer's sizes are of vector data, in KB
        return max(1, points * dimension * 4 // 1024)

    if kind == Kind.VECTORS:
        # Looked up by id, never searched: no HNSW (m=0), nothing for an optimizer to do, and
        # the vectors stay on disk (read a batch at a time by the upsert step).
        return EdgeConfig(
            vectors=EdgeVectorParams(size=dimension, distance=Distance.Cosine, memory=Memory.Cold),
            hnsw_config=HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000),
            payload_memory=Memory.Cold,
        )
    # Memory, measured at 1M points (docs/benchmarks.md, "The index at scale"): the full
    # vectors stay on disk (read only to rescore a search's best candidates), their int8
    # quantization (a quarter of the size) is what HNSW and scans compare in memory.
    return EdgeConfig(
        vectors=EdgeVectorParams(
            size=dimension,
            distance=Distance.Cosine,
            memory=Memory.Cold,
            quantization_config=ScalarQuantizationConfig(
                ScalarType.Int8, quantile=0.99, memory=Memory.Pinned
            ),
        ),
        sparse_vectors={SPARSE: EdgeSparseVectorParams(modifier=Modifier.Idf)},
        hnsw_config=HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=10_000),
        payload_memory=Memory.Cold,
        optimizers=EdgeOptimizersConfig(
            # optimize() runs only when the builder decided a build is due: it should then
            # index whatever is unindexed, down to the idle build's size.
            indexing_threshold=kb(build.idle_points),
            max_segment_size=kb(build.max_segment_points),
            default_segment_number=build.segments,
        ),
    )


def new_shard(folder: Path, kind: Kind, config: EdgeConfig) -> EdgeShard:
    """An empty shard, with the payload indexes search and maintenance filter by."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    shard = EdgeShard.create(str(folder), config)
    if kind == Kind.CHUNKS:
        for key, schema in INDEXED_FIELDS.items():
            typed = SCHEMA["integer" if key == FLAG else schema]
            shard.update(UpdateOperation.create_field_index(key, typed))
    return shard


def edge_filter(f: PointFilter | None) -> Filter:
    if f is None:
        return Filter()
    must: list[Any] = []
    must_not: list[Any] = []
    if f.document_id is not None:
        must.append(FieldCondition("document_id", match=MatchValue(f.document_id)))
    if f.document_ids is not None:
        must.append(FieldCondition("document_id", match=MatchAny(sorted(set(f.document_ids)))))
    if f.versions is not None:
        must.append(FieldCondition("version", match=MatchAny(sorted(set(f.versions)))))
    if f.not_version is not None:
        must_not.append(FieldCondition("version", match=MatchValue(f.not_version)))
    if f.staged is True:
        must.append(FieldCondition(FLAG, match=MatchValue(1)))
    elif f.staged is False:
        must_not.append(FieldCondition(FLAG, match=MatchValue(1)))
    if f.owner is not None:
        must.append(FieldCondition("owner", match=MatchValue(f.owner)))
    must.extend(FieldCondition("tags", match=MatchValue(t)) for t in f.tags)
    return Filter(must=must or None, must_not=must_not or None)


def stored_payload(payload: dict[str, Any]) -> dict[str, Any]:
    return payload | {FLAG: 1} if payload.get(FLAG) is True else payload


def read_payload(payload: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(payload or {})
    if out.get(FLAG) == 1:
        out[FLAG] = True
    return out


def dense_of(vector: Any) -> list[float] | None:
    if isinstance(vector, dict):
        vector = vector.get("")
    # The binding gives a new list of Python floats: taken as it is (converting each of 512
    # floats again cost ~15 us a vector, on every point the upsert step reads from the cache).
    return vector if isinstance(vector, list) else None


def undersampled(request: QueryRequest, partitions: int) -> QueryRequest:
    """Each partition asked for fewer than the whole query's limit: were the best `limit`
    points spread independently, how many one partition holds would be binomial, and the mean
    plus four standard deviations would miss one of them about once in 30,000 queries. Points
    are spread by document, so one document's chunks crowding the top of a list can exceed
    that: what is lost is the tail of a partition's list below rank `wanted` (43 of 100 for
    four partitions), candidates for fusion, never a hit in the top `wanted`. Asking every
    partition for all of them made a hybrid search (100 candidates a side, each rescored
    from disk) 3x slower."""
    k, share = request.limit, 1 / partitions
    wanted = math.ceil(k * share + 4 * math.sqrt(k * share * (1 - share))) + 1
    if wanted >= k:
        return request
    return QueryRequest(
        limit=wanted, query=request.query, filter=request.filter, params=request.params
    )


def edge_point(kind: Kind, p: EnginePoint) -> Point:
    if kind == Kind.VECTORS:
        return Point(p.id, p.dense, stored_payload(p.payload))
    vectors: dict[str, Any] = {"": p.dense}
    if p.sparse is not None:
        vectors[SPARSE] = SparseVector(p.sparse.indices, p.sparse.values)
    return Point(p.id, vectors, stored_payload(p.payload))


def id_order(point_id: object) -> tuple[int, int]:
    """The engine's order of point ids (numbers first, then UUIDs by value), which its scroll
    pages follow."""
    if isinstance(point_id, int):
        return (0, point_id)
    return (1, uuid.UUID(str(point_id)).int)
