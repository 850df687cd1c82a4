"""One collection of the embedded engine: its partitions, their shards, and its meta.json.

A chunks collection starts as one Edge shard and, once large, is split into partitions by
document (a stable hash of its id), each one Edge shard. The split is for the background build
(edge_builder.py), which indexes a copy of one shard at a time and holds it beside the live one
until it is swapped in: with one shard per collection, a build at 1M points held two copies of
the whole index (3.6 GB of anonymous memory at its peak, measured); with four it holds a
quarter more, and the writes it must replay are a quarter of those made meanwhile. A search
asks every partition and merges by score.

Small collections stay one shard because BM25 weighs a term by its rarity in the shard that
scores it: spread over four shards, a collection of a few documents ranked by four different
IDFs (a test's Chinese query found another document first). Measured on the retrieval sets
(256-1,000 documents), four partitions cost 0.002 nDCG@10; the split comes at 20,000 points
(`BuildSettings.split_points`), where each partition's statistics are closer still to the
whole's. Not later: writes made while the split runs are held twice until it swaps in, and a
split at 100,000 points under a full-speed import took the writer's memory back to one shard's
peak (3.7 GB at 1M points, measured).

Layout: `collections/<name>/meta.json` names the current shard folder of each partition
(`p0/shard-3`, ...). Collections made before partitions name one folder (`"shard"`) and load
as a single partition.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qdrant_edge import EdgeShard, UpdateOperation

from knowledgeops.index.engine import Kind, PointId
from knowledgeops.index.mapped_pages import GATE

META = "meta.json"


def route(key: str, partitions: int) -> int:
    """The partition of a document's points (`key`: its id; a point without one, its own id).
    By document, so an upsert batch, a publish or a delete of one document is one write to one
    shard: spreading each batch over four shards made upserts 45 % slower (measured: a shard's
    write costs about the same for 64 points as for 256). crc32, not hash(): the same key must
    land in the same partition in every process."""
    return zlib.crc32(key.encode()) % partitions if partitions > 1 else 0


def route_key(point_id: object, payload: dict[str, Any] | None) -> str:
    owner = (payload or {}).get("document_id")
    return str(owner) if owner is not None else str(point_id)


def write_json(path: Path, data: object) -> None:
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
        self.folder = folder  # relative to the collection's folder
        self.readers = 0


@dataclass
class Upsert:
    """An upsert in a build's log of writes. Its points are held (`op`) while the log holds
    fewer than `BuildSettings.held_points`, and replayed as they are: read back from the live
    shard instead, point by point, the replay ran at 300-600 points a second in a busy worker
    (its Python work shares the interpreter lock with every task; 31 a second beside three
    busy threads, measured, against 10,000 for the whole write), so a build fell behind an
    import. Beyond that, only the ids: holding every point of a long build cost gigabytes at
    1M points."""

    ids: list[PointId]
    op: UpdateOperation | None
    # The route key all its points share (one document's), if one: a split replays a held
    # upsert whole into the partition that key routes to.
    key: str | None


@dataclass
class Partition:
    """One shard of a collection, with the state a background build of it needs."""

    collection: Collection
    number: int
    handle: Handle
    # Writes (and swaps) one at a time, so a build's log of writes is in the order applied.
    lock: threading.RLock = field(default_factory=threading.RLock)
    readers: threading.Condition = field(default_factory=threading.Condition)
    # While a build runs: every write since its copy was taken, replayed onto the copy.
    oplog: list[UpdateOperation | Upsert] | None = None
    # Points the log may still hold whole (set with the log, BuildSettings.held_points).
    hold_room: int = 0
    last_write: float = 0.0
    dirty: bool = False
    dropped: bool = False
    # Split into partitions that replaced it: a write that found it before then goes again.
    moved: bool = False
    # Points a second writes are admitted at while a build's catch-up lags behind them (set by
    # the builder, below its replay rate): without it a bulk import outruns the replay and the
    # build never lands, leaving search to scan every point unindexed.
    admit_rate: float | None = None
    _pacing: threading.Lock = field(default_factory=threading.Lock)
    _next_admit: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.collection.name}/p{self.number}"

    def write(
        self, op: UpdateOperation, upserted: list[PointId] | None = None, key: str | None = None
    ) -> bool:
        """Apply a write (an upsert: with its points' ids, and the route key they share if
        one); False if this partition was split meanwhile (route it again)."""
        self._admit(len(upserted) if upserted is not None else 1)
        with self.lock:
            if self.moved:
                return False
            with GATE.sharing():  # a write can map and unmap the shard's files
                self.handle.shard.update(op)
            if self.oplog is not None:
                self.oplog.append(op if upserted is None else self._logged(op, upserted, key))
            self.last_write = time.monotonic()
            self.dirty = True
        return True

    def start_log(self, held_points: int) -> None:
        """Log every write from now on, for a build to replay (the caller holds the lock)."""
        self.oplog, self.hold_room = [], held_points

    def end_log(self) -> None:
        with self.lock:
            self.oplog = None

    def _logged(self, op: UpdateOperation, ids: list[PointId], key: str | None) -> Upsert:
        if len(ids) > self.hold_room:
            return Upsert(ids, None, key)
        self.hold_room -= len(ids)
        return Upsert(ids, op, key)

    def _admit(self, points: int) -> None:
        """Wait for this write's turn while writes are paced (writers run in the index's
        threads, never on an event loop): turns are handed out at `admit_rate` points a second
        across all writers."""
        rate = self.admit_rate
        if rate is None:
            return
        with self._pacing:
            now = time.monotonic()
            start = max(now, self._next_admit)
            self._next_admit = start + points / rate
        if start > now:
            time.sleep(start - now)

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
        with GATE.sharing():
            old.shard.close()

    def swap(self, built: Handle) -> Handle:
        """Make `built` this partition's shard (the caller holds the lock); the old one."""
        old, self.handle = self.handle, built
        self.collection.save()
        return old

    def next_folder(self) -> str:
        parent, _, last = self.handle.folder.rpartition("/")
        number = int(last.rsplit("-", 1)[-1]) + 1
        return f"{parent}/shard-{number}" if parent else f"shard-{number}"

    def counts(self) -> tuple[int, int]:
        """(points whose dense vector is not in an HNSW graph yet, points), from one look at
        the shard. Edge counts indexed vectors of both kinds, and the sparse one is indexed as
        it is written."""
        with self.reading() as shard:
            info = shard.info()
        return max(0, 2 * info.points_count - info.indexed_vectors_count), info.points_count

    def unindexed(self) -> int:
        return self.counts()[0]

    def points(self) -> int:
        return self.counts()[1]


@dataclass
class Collection:
    name: str
    kind: Kind
    dimension: int
    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    parts: list[Partition] = field(default_factory=list)
    _meta_lock: threading.Lock = field(default_factory=threading.Lock)
    # Operations using each list of partitions (by the list's id): a split closes the shard
    # it replaced once none still uses it.
    _users: threading.Condition = field(default_factory=threading.Condition)
    _in_use: dict[int, int] = field(default_factory=dict)

    def attach(self, folders: list[str]) -> None:
        self.parts = [
            Partition(self, i, Handle(EdgeShard.load(str(self.path / f)), f))
            for i, f in enumerate(folders)
        ]

    @contextlib.contextmanager
    def current(self) -> Iterator[list[Partition]]:
        """The partitions as they are now, for one operation: a split replaces them, and
        closes the shard it replaced only once the operations that saw it have ended."""
        with self._users:
            parts = self.parts
            self._in_use[id(parts)] = self._in_use.get(id(parts), 0) + 1
        try:
            yield parts
        finally:
            with self._users:
                left = self._in_use.pop(id(parts)) - 1
                if left:
                    self._in_use[id(parts)] = left
                self._users.notify_all()

    def replace_parts(self, new: list[Partition]) -> list[Partition]:
        """Make `new` the partitions (the caller holds the lock of every current one) and
        name them in meta.json; the ones replaced, for `wait_unused`."""
        with self._users:
            old, self.parts = self.parts, new
        for part in old:
            part.moved = True
        self.save()
        return old

    def wait_unused(self, parts: list[Partition]) -> None:
        with self._users:
            self._users.wait_for(lambda: id(parts) not in self._in_use)

    @property
    def dropped(self) -> bool:
        return any(p.dropped for p in self.parts)

    def save(self) -> None:
        with self._meta_lock:
            write_json(
                self.path / META,
                {
                    "kind": self.kind.value,
                    "dimension": self.dimension,
                    "metadata": self.metadata,
                    "shards": [p.handle.folder for p in self.parts],
                },
            )

    def close(self) -> None:
        for part in self.parts:
            with part.lock:
                part.dropped = True  # a build in progress discards its copy
                with GATE.sharing():
                    part.handle.shard.flush()
            part.retire(part.handle)


def load_collection(path: Path) -> Collection | None:
    """Open a collection folder; None (and the folder removed) if it was never finished."""
    meta_path = path / META
    if not meta_path.exists():
        shutil.rmtree(path, ignore_errors=True)  # never finished being created
        return None
    meta = json.loads(meta_path.read_text())
    folders = [str(f) for f in meta["shards"]] if "shards" in meta else [str(meta["shard"])]
    _remove_unlisted(path, folders)
    coll = Collection(
        name=path.name,
        kind=Kind(meta["kind"]),
        dimension=int(meta["dimension"]),
        path=path,
        metadata=dict(meta.get("metadata") or {}),
    )
    coll.attach(folders)
    return coll


def _remove_unlisted(path: Path, folders: list[str]) -> None:
    """Shard folders meta.json does not name are builds that never swapped in."""
    keep = {path / f for f in folders}
    parents = {p.parent for p in keep}
    for d in [path, *sorted(p for p in parents if p != path)]:
        for other in d.iterdir():
            if other.is_dir() and other not in keep and other not in parents:
                shutil.rmtree(other, ignore_errors=True)


def read_alias(root: Path, alias: str) -> tuple[str, dict[str, Any]] | None:
    """The collection an alias names and its metadata, read from the files of an embedded
    index another process has open (both are replaced atomically, so never read half
    written): what a worker that does not own the index needs of it. None: no such alias."""
    try:
        name = json.loads((root / "aliases.json").read_text()).get(alias)
        if name is None:
            return None
        meta = json.loads((root / "collections" / name / META).read_text())
    except FileNotFoundError:
        return None
    return str(name), dict(meta.get("metadata") or {})
