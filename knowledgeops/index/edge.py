"""The embedded engine: Qdrant Edge, the Qdrant engine inside this process.

Layout under the index folder (`data/index`):

    LOCK                      held (flock) by the one process that has the index open
    aliases.json              alias -> collection, replaced atomically
    collections/<name>/       one collection: meta.json (kind, dimension, metadata, and the
                              name of its current shard folder) and that shard folder

A collection is one Edge shard: segments on disk, a write-ahead log, payload indexes, HNSW for
the dense vector, an inverted index for the sparse one. Edge builds HNSW only when asked
(`optimize()`), and that call holds the Python interpreter lock for its whole duration (seconds
per 10,000 points), so it never runs here: `edge_builder.py` builds a copy in a child process
and swaps it in, while this process keeps searching and writing the live shard.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from qdrant_edge import (
    CountRequest,
    EdgeShard,
    PayloadSelector,
    Point,
    QuantizationSearchParams,
    Query,
    QueryBatchRequest,
    QueryRequest,
    ScrollRequest,
    SearchParams,
    SparseVector,
    UpdateOperation,
)

from knowledgeops.index.edge_mapping import (
    FLAG,
    SCHEMA,
    BuildSettings,
    dense_of,
    edge_filter,
    read_payload,
    shard_config,
    stored_payload,
)
from knowledgeops.index.engine import (
    INDEXED_FIELDS,
    SPARSE,
    Engine,
    EnginePoint,
    IndexLockedError,
    Kind,
    PointFilter,
    PointId,
    QuerySpec,
    Record,
    Scored,
)

log = logging.getLogger(__name__)

META = "meta.json"
# Dense candidates are found with the int8 quantization in memory, twice as many as asked, then
# ranked by their full vectors (read from disk): the quantization's recall cost, measured, is
# in docs/benchmarks.md ("The index at scale").
_RESCORED = SearchParams(quantization=QuantizationSearchParams(rescore=True, oversampling=2.0))


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with tmp.open("w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Handle:
    """An open shard and the reads still using it: a swapped-out shard closes once they end."""

    def __init__(self, shard: EdgeShard, folder: str) -> None:
        self.shard = shard
        self.folder = folder
        self.readers = 0


@dataclass
class Collection:
    name: str
    kind: Kind
    dimension: int
    path: Path
    handle: Handle
    metadata: dict[str, Any] = field(default_factory=dict)
    # Writes (and swaps) one at a time, so a build's log of writes is in the order applied.
    lock: threading.RLock = field(default_factory=threading.RLock)
    readers: threading.Condition = field(default_factory=threading.Condition)
    # While a build runs: every write since its copy was taken, replayed onto the copy. An
    # upsert is kept as its point ids only (replayed from the points' state in the live shard):
    # holding the points themselves cost gigabytes during a long build at 1M points.
    oplog: list[UpdateOperation | list[PointId]] | None = None
    last_write: float = 0.0
    dirty: bool = False
    dropped: bool = False

    def save(self) -> None:
        _write_json(
            self.path / META,
            {
                "kind": self.kind.value,
                "dimension": self.dimension,
                "metadata": self.metadata,
                "shard": self.handle.folder,
            },
        )

    def write(self, op: UpdateOperation, upserted: list[PointId] | None = None) -> None:
        with self.lock:
            self.handle.shard.update(op)
            if self.oplog is not None:
                self.oplog.append(upserted if upserted is not None else op)
            self.last_write = time.monotonic()
            self.dirty = True

    @contextlib.contextmanager
    def reading(self) -> Iterator[EdgeShard]:
        with self.readers:
            handle = self.handle
            handle.readers += 1
        try:
            yield handle.shard
        finally:
            with self.readers:
                handle.readers -= 1
                self.readers.notify_all()

    def retire(self, old: Handle) -> None:
        """Close a shard no longer current once the reads using it have ended."""
        with self.readers:
            self.readers.wait_for(lambda: old.readers == 0)
        old.shard.close()


class EdgeEngine(Engine):
    local = True

    def __init__(self, root: Path, build: BuildSettings | None = None) -> None:
        self.root = root
        self.build = build or BuildSettings()
        root.mkdir(parents=True, exist_ok=True)
        self._lock_file: IO[str] | None = _lock(root)
        self._dir = root / "collections"
        self._dir.mkdir(exist_ok=True)
        self._aliases_path = root / "aliases.json"
        self._guard = threading.Lock()  # the collection table
        self._collections: dict[str, Collection] = {}
        try:
            for p in sorted(self._dir.iterdir()):
                self._load(p)
        except BaseException:
            self.close()
            raise

    def _load(self, path: Path) -> None:
        meta_path = path / META
        if not path.is_dir() or path.name.startswith("."):
            if path.name.startswith(".") and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)  # a create or drop cut short
            return
        if not meta_path.exists():
            shutil.rmtree(path, ignore_errors=True)  # never finished being created
            return
        meta = json.loads(meta_path.read_text())
        folder = str(meta["shard"])
        for other in path.iterdir():
            if other.is_dir() and other.name != folder:
                shutil.rmtree(other, ignore_errors=True)  # a build that never swapped in
        shard = EdgeShard.load(str(path / folder))
        self._collections[path.name] = Collection(
            name=path.name,
            kind=Kind(meta["kind"]),
            dimension=int(meta["dimension"]),
            path=path,
            handle=Handle(shard, folder),
            metadata=dict(meta.get("metadata") or {}),
        )

    # -- collections ------------------------------------------------------------------------

    def _get(self, name: str) -> Collection:
        with self._guard:
            coll = self._collections.get(name)
        if coll is None:
            raise KeyError(f"no index collection {name!r}")
        return coll

    def collections(self) -> list[str]:
        with self._guard:
            return sorted(self._collections)

    def collection(self, name: str) -> Collection:
        return self._get(name)

    def exists(self, name: str) -> bool:
        with self._guard:
            return name in self._collections

    def create(self, name: str, kind: Kind, dimension: int) -> None:
        if "/" in name or name.startswith(".") or not name:
            raise ValueError(f"invalid collection name {name!r}")
        with self._guard:
            if name in self._collections:
                return
            # Built aside and renamed into place: a crash never leaves half a collection.
            tmp = self._dir / f".new-{name}-{uuid.uuid4().hex[:8]}"
            folder = "shard-0"
            tmp.mkdir()
            shard = EdgeShard.create(str(tmp / folder), shard_config(kind, dimension, self.build))
            if kind == Kind.CHUNKS:
                for key, schema in INDEXED_FIELDS.items():
                    typed = SCHEMA["integer" if key == FLAG else schema]
                    shard.update(UpdateOperation.create_field_index(key, typed))
            shard.close()
            coll = Collection(name, kind, dimension, tmp, Handle(shard, folder))
            coll.save()
            final = self._dir / name
            os.rename(tmp, final)
            coll.path = final
            coll.handle = Handle(EdgeShard.load(str(final / folder)), folder)
            self._collections[name] = coll

    def drop(self, name: str) -> bool:
        with self._guard:
            coll = self._collections.pop(name, None)
        if coll is None:
            return False
        with coll.lock:
            coll.dropped = True  # a build in progress discards its copy
        # Closed before its folder goes: closing flushes into the folder.
        coll.retire(coll.handle)
        trash = self._dir / f".drop-{name}-{uuid.uuid4().hex[:8]}"
        os.rename(coll.path, trash)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def dimension(self, name: str) -> int:
        return self._get(name).dimension

    def has_sparse(self, name: str) -> bool:
        return self._get(name).kind == Kind.CHUNKS

    def metadata(self, name: str) -> dict[str, Any]:
        return dict(self._get(name).metadata)

    def set_metadata(self, name: str, metadata: dict[str, Any]) -> None:
        coll = self._get(name)
        with coll.lock:
            coll.metadata = dict(metadata)
            coll.save()

    def alias(self, alias: str) -> str | None:
        return self._aliases().get(alias)

    def _aliases(self) -> dict[str, str]:
        try:
            return dict(json.loads(self._aliases_path.read_text()))
        except FileNotFoundError:
            return {}

    def set_alias(self, alias: str, collection: str | None) -> None:
        with self._guard:
            aliases = self._aliases()
            if collection is None:
                aliases.pop(alias, None)
            else:
                aliases[alias] = collection
            _write_json(self._aliases_path, aliases)

    # -- points -----------------------------------------------------------------------------

    def upsert(self, name: str, points: Sequence[EnginePoint]) -> None:
        coll = self._get(name)
        if coll.kind == Kind.VECTORS:
            structs = [Point(p.id, p.dense, stored_payload(p.payload)) for p in points]
        else:
            structs = []
            for p in points:
                vectors: dict[str, Any] = {"": p.dense}
                if p.sparse is not None:
                    vectors[SPARSE] = SparseVector(p.sparse.indices, p.sparse.values)
                structs.append(Point(p.id, vectors, stored_payload(p.payload)))
        coll.write(UpdateOperation.upsert_points(structs), [p.id for p in points])

    def retrieve(
        self, name: str, ids: Sequence[PointId], *, payload: bool, dense: bool
    ) -> list[Record]:
        with self._get(name).reading() as shard:
            records = shard.retrieve(list(ids), with_payload=payload, with_vector=dense)
        return [
            Record(str(r.id), read_payload(r.payload), dense_of(r.vector) if dense else None)
            for r in records
        ]

    def count(self, name: str, flt: PointFilter | None) -> int:
        with self._get(name).reading() as shard:
            return int(shard.count(CountRequest(exact=True, filter=edge_filter(flt))))

    def delete(self, name: str, flt: PointFilter) -> None:
        self._get(name).write(UpdateOperation.delete_points_by_filter(edge_filter(flt)))

    def set_payload(self, name: str, flt: PointFilter, payload: dict[str, Any]) -> None:
        self._get(name).write(
            UpdateOperation.set_payload_by_filter(edge_filter(flt), stored_payload(payload))
        )

    def delete_payload(self, name: str, flt: PointFilter, keys: Sequence[str]) -> None:
        op = UpdateOperation.delete_payload_by_filter(edge_filter(flt), list(keys))
        self._get(name).write(op)

    def scroll(
        self,
        name: str,
        offset: PointId | None,
        limit: int,
        *,
        fields: Sequence[str] | None,
        dense: bool,
    ) -> tuple[list[Record], PointId | None]:
        with_payload: Any = True if fields is None else PayloadSelector.Include(list(fields))
        with self._get(name).reading() as shard:
            records, after = shard.scroll(
                ScrollRequest(
                    offset=offset, limit=limit, with_payload=with_payload, with_vector=dense
                )
            )
        out = [
            Record(str(r.id), read_payload(r.payload), dense_of(r.vector) if dense else None)
            for r in records
        ]
        return out, (str(after) if after is not None else None)

    def query(
        self, name: str, specs: Sequence[QuerySpec], flt: PointFilter | None
    ) -> list[list[Scored]]:
        f = edge_filter(flt)
        requests = []
        for spec in specs:
            if spec.sparse is not None:
                query = Query.Nearest(
                    SparseVector(spec.sparse.indices, spec.sparse.values), using=SPARSE
                )
                params = None
            else:
                query, params = Query.Nearest(spec.dense or []), _RESCORED
            requests.append(QueryRequest(limit=spec.limit, query=query, filter=f, params=params))
        with self._get(name).reading() as shard:
            results = shard.query_batch(QueryBatchRequest(requests))
        return [[Scored(str(p.id), float(p.score)) for p in hits] for hits in results]

    # -- lifecycle --------------------------------------------------------------------------

    def flush(self) -> None:
        """Persist written segments (bounds what a restart replays from the WAL). Not under the
        write lock: the engine flushes while writes go on, and a pause here would stall them."""
        for name in self.collections():
            with contextlib.suppress(KeyError):
                coll = self._get(name)
                if coll.dirty:
                    coll.dirty = False
                    with coll.reading() as shard:
                        shard.flush()

    def unindexed(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in self.collections():
            with contextlib.suppress(KeyError):
                coll = self._get(name)
                if coll.kind == Kind.CHUNKS:
                    out[name] = unindexed_points(coll)
        return out

    def close(self) -> None:
        with self._guard:
            collections = list(self._collections.values())
            self._collections.clear()
        for coll in collections:
            with coll.lock:
                coll.dropped = True
                coll.handle.shard.flush()
            coll.retire(coll.handle)
        if self._lock_file is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None


def unindexed_points(coll: Collection) -> int:
    """Points whose dense vector is not in an HNSW graph yet. Edge counts indexed vectors
    of both kinds, and the sparse one is indexed as it is written."""
    with coll.reading() as shard:
        info = shard.info()
    return max(0, 2 * info.points_count - info.indexed_vectors_count)


def points_of(coll: Collection) -> int:
    with coll.reading() as shard:
        return int(shard.info().points_count)


def _lock(root: Path) -> IO[str]:
    f = (root / "LOCK").open("a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise IndexLockedError(
            f"The embedded index at {root} is held by another process (the running worker / "
            "`knowledgeops dev`). Search through that process's API, or set QDRANT_URL to use "
            "a Qdrant server shared by all processes."
        ) from None
    return f
