"""Building HNSW for the embedded engine in the background, off the worker's interpreter, one
partition (shard) of a collection at a time.

Edge's `optimize()` holds the Python interpreter lock until it is done (measured: 12 s for
30,000 points, 69 s for 100,000, during which no other thread of the process ran): run in the
worker it would stop every search, heartbeat and Temporal poll. So a build works on a copy:

1. With the partition's writes paused (only for the copy), flush its shard and copy the
   folder; from then on every write to it is also kept in the partition's log.
2. A child process (edge_build_process.py; lower CPU priority, dies with the worker) loads
   the copy, optimizes it (HNSW, merged segments, vacuum) and exits. Search and writes go on
   against the live shard.
3. The built shard is loaded here, the logged writes are replayed onto it (most of them while
   writes go on; the rest with writes paused), and it becomes the collection's shard in one
   step (meta.json names it); the old one closes once the searches still using it end. The
   log holds the first `BuildSettings.held_points` upserted points whole, replayed as written;
   beyond, ids only, and the points are read back, far slower. Should a round of the replay
   fall behind the writes, they are paced below its rate until the swap, or the build would
   chase them for as long as an import lasts.

The copy and the built shard are one partition's: the memory a build adds (the built shard
loaded beside the live one, and the writes replayed onto it) is a partition's, not the index's.

A collection is one partition until a build finds it holding `BuildSettings.split_points`;
that build splits it instead: the child writes the copy's points into new shards, one per
partition (by document, as writes route them), and builds each; the logged writes are replayed
onto them by the same routing, and the new partitions replace the old one in one step.

A crash anywhere leaves the live shard complete (its WAL has every write) and the copy behind,
which the next start removes. Builds start when enough points are unindexed, or a smaller
number once nothing was written for a while (`BuildSettings`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from uuid import UUID

from qdrant_edge import EdgeShard, UpdateOperation

from knowledgeops.index.edge import EdgeEngine
from knowledgeops.index.edge_build_process import READ_BATCH, upsert_routed
from knowledgeops.index.edge_collection import Handle, Partition, Upsert, route
from knowledgeops.index.edge_mapping import new_shard, shard_config
from knowledgeops.index.engine import Kind
from knowledgeops.index.mapped_pages import GATE

log = logging.getLogger(__name__)

# How often the builder looks at the collections (and flushes written ones).
CHECK_SECONDS = 5.0
# A failed build is not tried again for this long.
FAILED_BACKOFF_SECONDS = 300.0


class Builder:
    """The background thread of one engine."""

    def __init__(self, engine: EdgeEngine) -> None:
        self.engine = engine
        self._stop = threading.Event()
        self._child: subprocess.Popen[bytes] | None = None
        self._failed: dict[str, float] = {}  # partition name -> when to try again
        self.builds = 0  # completed builds (tests and benchmarks read it)
        self._thread = threading.Thread(target=self._loop, name="index-builder", daemon=True)
        # Apart from the builds, which can take minutes at a million points while writes go on.
        self._releaser = threading.Thread(target=self._release, name="index-pages", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._releaser.start()

    def stop(self) -> None:
        self._stop.set()
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()
        for thread in (self._thread, self._releaser):
            if thread.is_alive():
                thread.join()

    def _release(self) -> None:
        """Every few seconds, hand back the mapped pages of what searches seldom read
        (mapped_pages.py): the worker's resident memory stays what it uses."""
        while not self._stop.wait(CHECK_SECONDS):
            try:
                self.engine.release_cold_pages()
            except Exception:
                # Only memory is at stake: say so and look again later.
                log.exception("releasing the index's mapped pages failed; retrying")

    def _loop(self) -> None:
        while not self._stop.wait(CHECK_SECONDS):
            try:
                self.engine.flush()
                for part in self.engine.partitions():
                    if self._stop.is_set():
                        return
                    if part.collection.kind != Kind.CHUNKS or not self._due(part):
                        continue
                    if self._splits(part):
                        self.split(part)
                    else:
                        self.build(part)
            except Exception:
                # The builder must outlive a bad pass (a collection dropped mid-look, a full
                # disk): the index works unindexed meanwhile; say so and look again later.
                log.exception("index builder pass failed; retrying in %.0f s", CHECK_SECONDS)

    def _due(self, part: Partition) -> bool:
        if part.dropped or part.moved or time.monotonic() < self._failed.get(part.name, 0.0):
            return False
        unindexed, total = part.counts()
        settings = self.engine.build
        if self._splits(part, total) or unindexed >= min(
            settings.unindexed_limit, max(settings.points, settings.growth * (total - unindexed))
        ):
            return True
        idle = time.monotonic() - part.last_write >= settings.idle_seconds
        return idle and unindexed >= settings.idle_points

    def _splits(self, part: Partition, total: int | None = None) -> bool:
        settings = self.engine.build
        if settings.partitions < 2 or len(part.collection.parts) > 1:
            return False
        return (part.points() if total is None else total) >= settings.split_points

    def build(self, part: Partition) -> bool:
        """Build `part`'s indexes on a copy and swap it in; False if it was not swapped in
        (dropped meanwhile, stopped, or failed: the live shard serves on unchanged)."""
        started = time.monotonic()
        folder = part.next_folder()
        root = part.collection.path
        target = root / folder
        with part.lock:
            if part.dropped:
                return False
            with GATE.sharing():
                part.handle.shard.flush()
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(root / part.handle.folder, target)
            part.start_log(self.engine.build.held_points)
        copied = child_done = time.monotonic()
        try:
            if not self._optimize_in_child(target, part.collection.dimension):
                return False
            child_done = time.monotonic()
            with GATE.sharing():
                built = EdgeShard.load(str(target))
            swapped = self._replay_and_swap(part, built, folder)
        except Exception:
            self._failed[part.name] = time.monotonic() + FAILED_BACKOFF_SECONDS
            log.exception("building the index of %s failed; search goes on unindexed", part.name)
            swapped = False
        finally:
            part.end_log()
        if not swapped:
            shutil.rmtree(target, ignore_errors=True)
            return False
        self.builds += 1
        log.info(
            "built the index of %s in %.1f s (%s)",
            part.name,
            time.monotonic() - started,
            _phases(started, copied, child_done),
        )
        return True

    def split(self, part: Partition) -> bool:
        """Split a one-partition collection into `BuildSettings.partitions`, built; False if
        not swapped in (the old partition serves on unchanged)."""
        started = time.monotonic()
        coll = part.collection
        root = coll.path
        number = int(part.handle.folder.rsplit("-", 1)[-1]) + 1
        copy = f"split-{number}"
        folders = [f"p{i}/shard-{number}" for i in range(self.engine.build.partitions)]
        config = shard_config(coll.kind, coll.dimension, self.engine.build)
        for folder in [copy, *folders]:
            shutil.rmtree(root / folder, ignore_errors=True)
        with GATE.sharing():
            for folder in folders:
                new_shard(root / folder, coll.kind, config).close()
        copying = time.monotonic()
        with part.lock:
            if part.dropped:
                return False
            with GATE.sharing():
                part.handle.shard.flush()
            shutil.copytree(root / part.handle.folder, root / copy)
            part.start_log(self.engine.build.held_points)
        copied = child_done = time.monotonic()
        built: list[EdgeShard] = []
        swapped = False
        try:
            if self._optimize_in_child(root / copy, coll.dimension, [root / f for f in folders]):
                child_done = time.monotonic()
                with GATE.sharing():
                    built = [EdgeShard.load(str(root / f)) for f in folders]
                swapped = self._replay_and_replace(part, built, folders)
        except Exception:
            self._failed[part.name] = time.monotonic() + FAILED_BACKOFF_SECONDS
            log.exception("splitting %s failed; it serves on as one partition", part.name)
        finally:
            part.end_log()
            shutil.rmtree(root / copy, ignore_errors=True)
        if not swapped:
            with GATE.sharing():
                for shard in built:
                    shard.close()
            for folder in folders:
                shutil.rmtree(root / folder, ignore_errors=True)
            return False
        self.builds += 1
        log.info(
            "split %s into %d partitions, built, in %.1f s (%s)",
            coll.name,
            len(folders),
            time.monotonic() - started,
            _phases(copying, copied, child_done),
        )
        return True

    def _replay_and_replace(
        self, part: Partition, built: list[EdgeShard], folders: list[str]
    ) -> bool:
        coll = part.collection
        parts = [
            Partition(coll, i, Handle(shard, folder))
            for i, (shard, folder) in enumerate(zip(built, folders, strict=True))
        ]
        replaced: list[list[Partition]] = []
        if not self._catch_up(part, built, lambda: replaced.append(coll.replace_parts(parts))):
            return False
        # Operations that began before the swap finish on the old shard; then it goes.
        coll.wait_unused(replaced[0])
        part.retire(part.handle)
        shutil.rmtree(coll.path / part.handle.folder, ignore_errors=True)
        _release_freed_memory()
        return True

    def _catch_up(
        self, part: Partition, built: list[EdgeShard], swap: Callable[[], object]
    ) -> bool:
        """Replay the logged writes onto `built` while writes go on, then the short tail with
        writes paused, and `swap` before they resume; False if the partition was dropped or
        the builder stopped meanwhile.

        A round that leaves at least half as many points behind as it replayed is not
        converging (a bulk import writes faster than a replay that reads points back):
        from then on writes are admitted at half the replay's rate, so each round's backlog
        halves, until the swap."""
        applied = 0
        try:
            while True:
                with part.lock:
                    assert part.oplog is not None
                    pending = part.oplog[applied:]
                    if part.dropped or self._stop.is_set():
                        return False
                    if len(pending) <= 16:
                        _replay(pending, part.handle.shard, built)
                        swap()
                        return True
                started = time.monotonic()
                _replay(pending, part.handle.shard, built)
                applied += len(pending)
                replayed = _points(pending)
                speed = replayed / max(time.monotonic() - started, 1e-3)  # points a second
                behind = _points(part.oplog[applied:])
                if behind * 2 >= replayed:
                    if part.admit_rate is None:
                        log.info(
                            "the build of %s lags the writes (%d points behind, replaying "
                            "%.0f a second): admitting writes at %.0f points a second until "
                            "it is in",
                            part.name,
                            behind,
                            speed,
                            speed / 2,
                        )
                    part.admit_rate = speed / 2
        finally:
            part.admit_rate = None

    def _optimize_in_child(
        self, target: Path, dimension: int, split_into: Sequence[Path] = ()
    ) -> bool:
        spec = {"dimension": dimension, **asdict(self.engine.build)}
        self._child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "knowledgeops.index.edge_build_process",
                json.dumps(spec),
                str(target),
                *map(str, split_into),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _, err = self._child.communicate()
        finally:
            code, self._child = self._child.returncode, None
        if self._stop.is_set():
            return False
        said = err.decode(errors="replace").strip()
        if code != 0:
            tail = said.splitlines()[-5:]
            raise RuntimeError(f"index build process exited with {code}: {' | '.join(tail)}")
        if said:
            log.warning("the index build of %s said: %s", target.name, said)
        return True

    def _replay_and_swap(self, part: Partition, built: EdgeShard, folder: str) -> bool:
        old = part.handle
        if not self._catch_up(part, [built], lambda: part.swap(Handle(built, folder))):
            with GATE.sharing():
                built.close()
            return False
        part.retire(old)
        shutil.rmtree(part.collection.path / old.folder, ignore_errors=True)
        _release_freed_memory()
        return True


def _phases(copying: float, copied: float, child_done: float) -> str:
    """Where a build's time went (monotonic times the phases ended): a slow build says which
    phase to look at."""
    return (
        f"copy with writes paused {copied - copying:.2f} s, child {child_done - copied:.1f} s, "
        f"catch-up {time.monotonic() - child_done:.1f} s"
    )


def _release_freed_memory() -> None:
    """Hand the heap the retired shard freed back to the system: glibc keeps freed memory in
    its arenas (measured at 100,000 points: 400 MB of anonymous memory, 195 MB after this)."""
    if sys.platform == "linux":
        # A libc other than glibc (musl) has no malloc_trim and returns memory itself.
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def _replay(
    ops: Sequence[UpdateOperation | Upsert], live: EdgeShard, built: Sequence[EdgeShard]
) -> None:
    """Apply logged writes to the built copy (or the shards a split makes of it: upserted
    points routed as writes route them, other writes, by filter, to each), in order. A held
    upsert is applied as written (and let go); one logged by its ids only has its points read
    from the live shard as they are now: a later write to one of them is replayed after it
    anyway, and every write is idempotent, so the copy ends as the live shard is."""
    for op in ops:
        if not isinstance(op, Upsert):
            with GATE.sharing():
                for shard in built:
                    shard.update(op)
            continue
        whole = op.op
        if whole is not None and (len(built) == 1 or op.key is not None):
            target = built[route(op.key, len(built))] if op.key is not None else built[0]
            with GATE.sharing():
                target.update(whole)
            op.op = None  # its memory goes as soon as it is replayed
            continue
        for start in range(0, len(op.ids), READ_BATCH):
            ids: list[int | UUID | str] = list(op.ids[start : start + READ_BATCH])
            records = live.retrieve(ids, True, True)
            # Deleted meanwhile: the delete is in the log too.
            upsert_routed(records, built)


def _points(ops: Sequence[UpdateOperation | Upsert]) -> int:
    """Points in logged writes (an upsert's; any other write counts one)."""
    return sum(len(op.ids) if isinstance(op, Upsert) else 1 for op in ops)
