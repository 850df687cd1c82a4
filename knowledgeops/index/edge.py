"""The embedded engine: Qdrant Edge, the Qdrant engine inside this process.

Layout under the index folder (`data/index`):

    LOCK                      held (flock) by the one process that has the index open
    aliases.json              alias -> collection, replaced atomically
    collections/<name>/       one collection: meta.json (kind, dimension, metadata, and the
                              current shard folder of each partition) and those folders

A collection is a few Edge shards, its partitions (edge_collection.py): each has segments on
disk, a write-ahead log, payload indexes, HNSW for the dense vector, an inverted index for the
sparse one. Edge builds HNSW only when asked
(`optimize()`), and that call holds the Python interpreter lock for its whole duration (seconds
per 10,000 points), so it never runs here: `edge_builder.py` builds a copy in a child process
and swaps it in, while this process keeps searching and writing the live shard.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter
from pathlib import Path
from typing import IO, Any

from qdrant_edge import (
    CountRequest,
    PayloadSelector,
    QuantizationSearchParams,
    Query,
    QueryBatchRequest,
    QueryRequest,
    ScrollRequest,
    SearchParams,
    SparseVector,
    UpdateOperation,
)

from knowledgeops.index.edge_collection import (
    Collection,
    Handle,
    Partition,
    load_collection,
    route,
    route_key,
    write_json,
)
from knowledgeops.index.edge_mapping import (
    BuildSettings,
    dense_of,
    edge_filter,
    edge_point,
    id_order,
    new_shard,
    read_payload,
    shard_config,
    stored_payload,
    undersampled,
)
from knowledgeops.index.engine import (
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
from knowledgeops.index.mapped_pages import GATE, release

log = logging.getLogger(__name__)

# Dense candidates are found with the int8 quantization in memory, twice as many as asked, then
# ranked by their full vectors (read from disk): the quantization's recall cost, measured, is
# in docs/benchmarks.md ("The index at scale").
_RESCORED = SearchParams(quantization=QuantizationSearchParams(rescore=True, oversampling=2.0))
# The score of a (score, id) candidate.
_score = itemgetter(0)


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
        # Only this process writes the aliases (it holds the index's lock): the file is read
        # once, and every change replaces this table whole (see `aliased`).
        self._alias_table = self._read_aliases()
        self._collections: dict[str, Collection] = {}
        self._pool = ThreadPoolExecutor(
            max_workers=min(self.build.partitions, os.cpu_count() or 1),
            thread_name_prefix="index-partitions",
        )
        try:
            for p in sorted(self._dir.iterdir()):
                if p.name.startswith("."):
                    if p.is_dir():
                        shutil.rmtree(p, ignore_errors=True)  # a create or drop cut short
                elif p.is_dir() and (coll := load_collection(p)) is not None:
                    self._collections[p.name] = coll
        except BaseException:
            self.close()
            raise

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

    def create(
        self, name: str, kind: Kind, dimension: int, metadata: dict[str, Any] | None = None
    ) -> None:
        if "/" in name or name.startswith(".") or not name:
            raise ValueError(f"invalid collection name {name!r}")
        with self._guard:
            if name in self._collections:
                return
            # meta.json is written last: a folder without one (a crash mid-create) is removed
            # at the next start, so a half-made collection is never loaded.
            path = self._dir / name
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            # One partition until a build splits it (edge_collection.py).
            folder = "p0/shard-0"
            with GATE.sharing():
                shard = new_shard(path / folder, kind, shard_config(kind, dimension, self.build))
            coll = Collection(name, kind, dimension, path, dict(metadata or {}))
            coll.parts = [Partition(coll, 0, Handle(shard, folder))]
            coll.save()
            self._collections[name] = coll

    def drop(self, name: str) -> bool:
        with self._guard:
            coll = self._collections.pop(name, None)
        if coll is None:
            return False
        # Closed before its folder goes: closing flushes into the folder.
        coll.close()
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
        coll.metadata = dict(metadata)
        coll.save()

    def alias(self, alias: str) -> str | None:
        return self._alias_table.get(alias)

    def _read_aliases(self) -> dict[str, str]:
        try:
            return dict(json.loads(self._aliases_path.read_text()))
        except FileNotFoundError:
            return {}

    def set_alias(self, alias: str, collection: str | None) -> None:
        with self._guard:
            aliases = dict(self._alias_table)
            if collection is None:
                aliases.pop(alias, None)
            else:
                aliases[alias] = collection
            write_json(self._aliases_path, aliases)
            self._alias_table = aliases

    def aliased(self, alias: str) -> tuple[str, dict[str, Any]] | None:
        """From memory, taking no lock (a create holds the guard while it makes a shard): each
        read is one dictionary lookup, atomic under the interpreter lock, so every search asks
        it on the event loop, one thread hop fewer."""
        target = self._alias_table.get(alias)
        coll = self._collections.get(target) if target is not None else None
        return None if coll is None else (coll.name, dict(coll.metadata))

    # -- points -----------------------------------------------------------------------------

    def upsert(self, name: str, points: Sequence[EnginePoint]) -> None:
        coll = self._get(name)
        while True:  # again only if a split replaced the partitions meanwhile
            with coll.current() as parts:
                by_part: dict[int, list[EnginePoint]] = {}
                keys: dict[int, set[str]] = {}
                for p in points:
                    key = route_key(p.id, p.payload)
                    number = route(key, len(parts))
                    by_part.setdefault(number, []).append(p)
                    keys.setdefault(number, set()).add(key)
                if all(
                    parts[number].write(
                        UpdateOperation.upsert_points([edge_point(coll.kind, p) for p in batch]),
                        [p.id for p in batch],
                        next(iter(keys[number])) if len(keys[number]) == 1 else None,
                    )
                    for number, batch in by_part.items()
                ):
                    return

    def retrieve(
        self, name: str, ids: Sequence[PointId], *, payload: bool, dense: bool
    ) -> list[Record]:
        wanted: list[int | uuid.UUID | str] = list(ids)
        records = []
        # An id does not say its document, so every partition is asked (a lookup each).
        with self._get(name).current() as parts:
            for part in parts:
                with part.reading() as shard:
                    records.extend(shard.retrieve(wanted, with_payload=payload, with_vector=dense))
        return [
            Record(str(r.id), read_payload(r.payload), dense_of(r.vector) if dense else None)
            for r in records
        ]

    @staticmethod
    def _targets(parts: list[Partition], flt: PointFilter | None) -> list[Partition]:
        """The partitions a filter can match: one document's, or all."""
        if flt is not None and flt.document_id is not None:
            return [parts[route(flt.document_id, len(parts))]]
        return parts

    def count(self, name: str, flt: PointFilter | None) -> int:
        request = CountRequest(exact=True, filter=edge_filter(flt))
        total = 0
        with self._get(name).current() as parts:
            for part in self._targets(parts, flt):
                with part.reading() as shard:
                    total += int(shard.count(request))
        return total

    def _write(self, name: str, flt: PointFilter, op: UpdateOperation) -> None:
        coll = self._get(name)
        while True:  # again only if a split replaced the partitions meanwhile
            with coll.current() as parts:
                if all(part.write(op) for part in self._targets(parts, flt)):
                    return

    def delete(self, name: str, flt: PointFilter) -> None:
        self._write(name, flt, UpdateOperation.delete_points_by_filter(edge_filter(flt)))

    def set_payload(self, name: str, flt: PointFilter, payload: dict[str, Any]) -> None:
        op = UpdateOperation.set_payload_by_filter(edge_filter(flt), stored_payload(payload))
        self._write(name, flt, op)

    def delete_payload(self, name: str, flt: PointFilter, keys: Sequence[str]) -> None:
        op = UpdateOperation.delete_payload_by_filter(edge_filter(flt), list(keys))
        self._write(name, flt, op)

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
        # Every partition's page from the same offset, merged in the engine's id order: the
        # first `limit` are this page, the next one is where the next page starts.
        request = ScrollRequest(
            offset=offset, limit=limit + 1, with_payload=with_payload, with_vector=dense
        )
        merged = []
        with self._get(name).current() as parts:
            for part in parts:
                with part.reading() as shard:
                    merged.extend(shard.scroll(request)[0])
        merged.sort(key=lambda r: id_order(r.id))
        out = [
            Record(str(r.id), read_payload(r.payload), dense_of(r.vector) if dense else None)
            for r in merged[:limit]
        ]
        return out, (str(merged[limit].id) if len(merged) > limit else None)

    def query(
        self, name: str, specs: Sequence[QuerySpec], flt: PointFilter | None
    ) -> list[list[Scored]]:
        f = edge_filter(flt)
        requests: list[QueryRequest] = []
        for spec in specs:
            if spec.sparse is not None:
                query = Query.Nearest(
                    SparseVector(spec.sparse.indices, spec.sparse.values), using=SPARSE
                )
                params = None
            else:
                query, params = Query.Nearest(spec.dense or []), _RESCORED
            requests.append(QueryRequest(limit=spec.limit, query=query, filter=f, params=params))
        with self._get(name).current() as parts:
            if len(parts) > 1:
                requests = [undersampled(r, len(parts)) for r in requests]

            def ask(part: Partition) -> list[list[Any]]:
                with part.reading() as shard:
                    return list(shard.query_batch(QueryBatchRequest(requests)))

            # The partitions answer in parallel: Edge's query releases the interpreter lock.
            answers = list(self._pool.map(ask, parts)) if len(parts) > 1 else [ask(parts[0])]
        merged: list[list[tuple[float, Any]]] = [[] for _ in specs]
        for results in answers:
            for out, hits in zip(merged, results, strict=True):
                out.extend((p.score, p.id) for p in hits)
        # Each partition ranks its own points (BM25's IDF from its own: a collection is split
        # only once large enough for each partition's to be the whole's, within noise). Only
        # the kept ones become Scored: an id's string costs ~1 us, and a hybrid query over four
        # partitions returns ~340 candidates to keep 200.
        return [
            [Scored(str(i), float(s)) for s, i in heapq.nlargest(spec.limit, hits, key=_score)]
            for hits, spec in zip(merged, specs, strict=True)
        ]

    # -- lifecycle --------------------------------------------------------------------------

    def partitions(self) -> list[Partition]:
        out = []
        for name in self.collections():
            with contextlib.suppress(KeyError):
                out.extend(self._get(name).parts)
        return out

    def flush(self) -> None:
        """Persist written segments (bounds what a restart replays from the WAL). Not under the
        write lock: the engine flushes while writes go on, and a pause here would stall them."""
        for part in self.partitions():
            if part.dirty:
                part.dirty = False
                with part.reading() as shard, GATE.sharing():
                    shard.flush()

    def release_cold_pages(self) -> int:
        """Hand back this process's mapped pages of the files searches seldom read, and of the
        embedding cache's collections (read only by id) whole: mapped_pages.py. The number of
        mappings released."""
        with self._guard:
            cold = [c.path for c in self._collections.values() if c.kind == Kind.VECTORS]
        return release(self._dir, cold)

    def has_room(self, collection: str, key: str | None) -> bool:
        try:
            coll = self._get(collection)
        except KeyError:
            return True  # a first write creates it
        if coll.kind != Kind.CHUNKS:
            return True
        with coll.current() as parts:
            where = parts if key is None else [parts[route(key, len(parts))]]
            return all(p.unindexed() <= self.build.unindexed_limit for p in where)

    def unindexed(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in self.collections():
            with contextlib.suppress(KeyError):
                coll = self._get(name)
                if coll.kind == Kind.CHUNKS:
                    out[name] = sum(p.unindexed() for p in coll.parts)
        return out

    def close(self) -> None:
        with self._guard:
            collections = list(self._collections.values())
            self._collections.clear()
        for coll in collections:
            coll.close()
        self._pool.shutdown(wait=False)
        if self._lock_file is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None


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
