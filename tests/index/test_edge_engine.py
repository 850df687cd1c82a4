"""The embedded engine's own behaviour, beyond the contract every engine meets
(test_vector_index.py): a large collection split into partitions, one process at a time, and
the background HNSW build and split going on while writes and searches continue."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from knowledgeops.contracts.search import SearchMode
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.index.edge import EdgeEngine
from knowledgeops.index.edge_mapping import BuildSettings
from knowledgeops.index.engine import IndexLockedError, Kind
from knowledgeops.index.vector_index import VectorIndex
from tests.helpers.vectors import vec


async def _documents(index: VectorIndex, c: str, documents: int, chunks_each: int) -> None:
    """doc0, doc1, ...; chunk i of document d has the vector vec(1000 * d + i)."""
    for d in range(documents):
        batch = [Chunk(i, f"chunk {i} of document {d}", f"h{d}-{i}") for i in range(chunks_each)]
        await index.upsert(c, f"doc{d}", batch, [vec(1000 * d + i) for i in range(chunks_each)])


async def test_pages_of_a_partitioned_collection_cover_every_point_once(tmp_path: Path) -> None:
    """A large collection is split into partitions by document: a document's points are in
    one, a scroll merges their pages in the engine's id order, a search their hits by score,
    and a document's count and delete reach only its partition."""
    from knowledgeops.index.edge_builder import Builder

    engine = EdgeEngine(tmp_path / "index", BuildSettings(split_points=300))
    index = VectorIndex(engine)
    c = "chunks_pages"
    try:
        await _documents(index, c, 12, 25)
        assert len(engine.collection(c).parts) == 1, "one partition until it is large"
        assert Builder(engine).split(engine.collection(c).parts[0])
        parts = engine.collection(c).parts
        counts = [part.points() for part in parts]
        assert len(counts) > 1 and min(counts) > 0 and sum(counts) == 300, counts
        assert all(n % 25 == 0 for n in counts), "a document is in one partition"
        seen, offset = [], None
        while True:
            page, offset = await index.export_points(c, offset, 7)
            seen += [p.id for p in page]
            if offset is None:
                break
        assert len(seen) == len(set(seen)) == 300
        hits = await index.search(c, 5, vector=vec(11_023), mode=SearchMode.DENSE)
        assert (hits[0].document_id, hits[0].chunk_index) == ("doc11", 23)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert await index.count(c, "doc5") == 25
        assert await index.delete_document(c, "doc5") == 25
        assert sum(part.points() for part in parts) == 275
    finally:
        index.close()


def test_embedded_index_is_one_process_at_a_time(tmp_path: Path) -> None:
    first = EdgeEngine(tmp_path / "index")
    try:
        with pytest.raises(IndexLockedError, match="held by another process"):
            EdgeEngine(tmp_path / "index")
    finally:
        first.close()
    EdgeEngine(tmp_path / "index").close()  # released on close


def test_aliases_are_kept_on_disk_and_read_from_memory(tmp_path: Path) -> None:
    """Searches read the alias table from memory; each change is on disk before it is seen,
    so a restart finds the aliases as they were."""
    engine = EdgeEngine(tmp_path / "index")
    try:
        engine.create("chunks_a", Kind.CHUNKS, 4, {"model": "m"})
        engine.create("chunks_b", Kind.CHUNKS, 4, {"model": "n"})
        engine.set_alias("live", "chunks_a")
        engine.set_alias("live", "chunks_b")
        engine.set_alias("gone", "chunks_a")
        engine.set_alias("gone", None)
        assert engine.aliased("live") == ("chunks_b", {"model": "n"})
    finally:
        engine.close()
    again = EdgeEngine(tmp_path / "index")
    try:
        assert again.alias("live") == "chunks_b" and again.alias("gone") is None
        assert again.aliased("live") == ("chunks_b", {"model": "n"})
        assert again.drop("chunks_b")
        assert again.aliased("live") is None and again.alias("live") == "chunks_b"
    finally:
        again.close()


async def test_background_build_keeps_writes_and_search_going(tmp_path: Path) -> None:
    """A build on a copy in a child process: writes made during it survive the swap, search
    answers throughout, and afterwards the points are in the HNSW graph."""
    from knowledgeops.index.edge_builder import Builder

    build = BuildSettings(points=1_000, idle_seconds=3600, idle_points=1_000)
    engine = EdgeEngine(tmp_path / "index", build)
    index = VectorIndex(engine)
    c = "chunks_build"
    n = 3_000
    try:
        for start in range(0, n, 500):
            batch = [
                Chunk(i, f"chunk number {i} about topic {i % 7}", f"h{i}")
                for i in range(start, start + 500)
            ]
            await index.upsert(c, "doc", batch, [vec(i) for i in range(start, start + 500)])
        assert (await index.unindexed())[c] == n
        builder = Builder(engine)
        parts = engine.collection(c).parts
        assert len(parts) == 1  # below BuildSettings.split_points

        def build_all() -> list[bool]:
            return [builder.build(part) for part in parts]

        build_task = asyncio.create_task(asyncio.to_thread(build_all))
        # Writes and searches while the child builds: all must land in the swapped-in shards.
        written = 0
        while not build_task.done():
            i = n + written
            await index.upsert(c, "late", [Chunk(written, f"late chunk {i}", f"l{i}")], [vec(i)])
            written += 1
            hits = await index.search(c, 3, vector=vec(7), mode=SearchMode.DENSE)
            assert hits and hits[0].chunk_index == 7
            await asyncio.sleep(0.05)
        assert await build_task == [True] * len(parts)
        assert written > 0
        assert await index.count(c, "doc") == n
        assert await index.count(c, "late") == written
        # Only what was written after the copy is outside the graph.
        assert (await index.unindexed())[c] <= written
        hits = await index.search(c, 1, vector=vec(1234), mode=SearchMode.DENSE)
        assert hits[0].chunk_index == 1234
    finally:
        index.close()
    # The swapped-in shard is the one a restart opens, with the same points.
    again = VectorIndex(EdgeEngine(tmp_path / "index"))
    try:
        assert await again.count(c, "doc") == n
        folder = tmp_path / "index/collections/chunks_build"
        shards = sorted(str(p.relative_to(folder)) for p in folder.glob("p*/shard-*"))
        assert shards == ["p0/shard-1"]
    finally:
        again.close()


async def test_a_growing_collection_is_split_while_writes_and_search_go_on(
    tmp_path: Path,
) -> None:
    """One partition while small (BM25's statistics are then the whole collection's); once
    large, the builder splits it by document: writes, deletes and searches made during the
    split all hold afterwards, and a restart opens the partitions."""
    from knowledgeops.index.edge_builder import Builder

    engine = EdgeEngine(tmp_path / "index", BuildSettings(split_points=2_000, idle_points=200))
    index = VectorIndex(engine)
    c = "chunks_split"
    try:
        await _documents(index, c, 20, 150)
        builder = Builder(engine)
        (part,) = engine.collection(c).parts
        assert builder._due(part), "3,000 points is past split_points: a split is due"
        split = asyncio.create_task(asyncio.to_thread(builder.split, part))
        written = 0
        while not split.done():
            i = 100_000 + written
            await index.upsert(
                c, f"late{written % 5}", [Chunk(written, f"late {i}", f"l{i}")], [vec(i)]
            )
            written += 1
            if written == 3:
                assert await index.delete_document(c, "doc3") == 150
            hits = await index.search(c, 3, vector=vec(1007), mode=SearchMode.DENSE)
            assert (hits[0].document_id, hits[0].chunk_index) == ("doc1", 7)
            await asyncio.sleep(0.02)
        assert await split
        assert written > 3, "the split must have overlapped the writes"
        parts = engine.collection(c).parts
        assert len(parts) == BuildSettings().partitions
        assert part.moved and not (tmp_path / "index/collections" / c / part.handle.folder).exists()
        counts = [p.points() for p in parts]
        assert min(counts) > 0 and sum(counts) == 19 * 150 + written, counts
        for d in (0, 7, 19):
            assert await index.count(c, f"doc{d}") == 150
        assert await index.count(c, "doc3") == 0
        assert sum([await index.count(c, f"late{k}") for k in range(5)]) == written
        hits = await index.search(c, 1, vector=vec(19_042), mode=SearchMode.DENSE)
        assert (hits[0].document_id, hits[0].chunk_index) == ("doc19", 42)
        assert (await index.unindexed())[c] <= written
    finally:
        index.close()
    again = EdgeEngine(tmp_path / "index")
    try:
        assert len(again.collection(c).parts) == BuildSettings().partitions
        assert await VectorIndex(again).count(c, "doc7") == 150
    finally:
        again.close()


async def test_a_build_lands_while_writes_outpace_its_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bulk import writes faster than a build's catch-up replays (it reads each point back):
    writes are then paced below the replay's rate, so the build is swapped in while they go
    on, instead of chasing them until the import ends and search scanning unindexed points."""
    import threading

    from knowledgeops.index import edge_builder
    from knowledgeops.index.edge_builder import Builder

    replay, catching_up = edge_builder._replay, threading.Event()

    def slow_replay(ops: list[object], live: object, built: object) -> None:
        # A replay of 50 writes a second: below what the writer below makes.
        catching_up.set()
        time.sleep(0.02 * len(ops))
        replay(ops, live, built)  # type: ignore[arg-type]

    optimize = Builder._optimize_in_child

    def optimize_until_written(
        self: Builder, target: Path, dimension: int, split_into: object = ()
    ) -> bool:
        # The build ends after 20 writes were logged: a catch-up with rounds, on any machine.
        done = optimize(self, target, dimension)
        while len(part.oplog or ()) < 20:
            time.sleep(0.01)
        return done

    monkeypatch.setattr(edge_builder, "_replay", slow_replay)
    monkeypatch.setattr(Builder, "_optimize_in_child", optimize_until_written)
    engine = EdgeEngine(tmp_path / "index", BuildSettings(idle_seconds=3600))
    index = VectorIndex(engine)
    c = "chunks_paced"
    try:
        await _documents(index, c, 3, 500)
        (part,) = engine.collection(c).parts
        caplog.set_level(logging.INFO, logger="knowledgeops.index.edge_builder")
        build = asyncio.create_task(asyncio.to_thread(Builder(engine).build, part))
        written, deadline = 0, time.monotonic() + 60
        while not build.done() and time.monotonic() < deadline:
            i = 100_000 + written
            await index.upsert(c, "late", [Chunk(written, f"late {i}", f"l{i}")], [vec(i)])
            written += 1
            # One write every 20 ms while the child builds, then as fast as ~200 a second.
            await asyncio.sleep(0.005 if catching_up.is_set() else 0.02)
        assert build.done(), f"the build never caught up with {written} writes in 60 s"
        assert await build
        assert "lags the writes" in caplog.text
        assert part.admit_rate is None, "writes are no longer paced once the build is in"
        assert await index.count(c, "late") == written
        assert (await index.unindexed())[c] <= written
        hits = await index.search(c, 1, vector=vec(1_042), mode=SearchMode.DENSE)
        assert (hits[0].document_id, hits[0].chunk_index) == ("doc1", 42)
    finally:
        index.close()


async def test_a_build_indexes_what_was_written_since_the_last_one(tmp_path: Path) -> None:
    """A build keeps the segments earlier builds made (up to `BuildSettings.segments`) and
    indexes only the points written since: merged, every build rebuilt the graph of the whole
    shard. A collection made with other settings (an earlier version's) builds with the
    current ones."""
    from knowledgeops.index.edge_builder import Builder

    c = "chunks_segments"

    async def build_after(engine: EdgeEngine, first: int) -> int:
        index = VectorIndex(engine)
        batch = [Chunk(i, f"chunk {i}", f"h{i}") for i in range(first, first + 1_500)]
        await index.upsert(c, f"doc{first}", batch, [vec(i) for i in range(first, first + 1_500)])
        (part,) = engine.collection(c).parts
        assert Builder(engine).build(part)
        with part.reading() as shard:
            return int(shard.info().segments_count)

    # Merged: one setting of one segment, as an earlier version's shard on a small machine.
    merged = EdgeEngine(tmp_path / "index", BuildSettings(segments=1, idle_points=200))
    try:
        assert await build_after(merged, 0) <= 2
        assert await build_after(merged, 1_500) <= 2, "segments=1 merges every build"
    finally:
        merged.close()
    engine = EdgeEngine(tmp_path / "index", BuildSettings(idle_points=200))
    index = VectorIndex(engine)
    try:
        before = await build_after(engine, 3_000)
        after = await build_after(engine, 4_500)
        assert after > before, (before, after)
        assert await index.count(c) == 6_000
        hits = await index.search(c, 1, vector=vec(123), mode=SearchMode.DENSE)
        assert hits[0].chunk_index == 123
    finally:
        index.close()


@pytest.mark.parametrize("splits", [False, True], ids=["build", "split"])
async def test_a_catch_up_replays_held_writes_as_written_and_reads_back_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, splits: bool
) -> None:
    """The writes a build's log holds whole (up to `BuildSettings.held_points`) are replayed
    as written, into the partition their document routes to when it splits; only those beyond
    are read back from the live shard. Either way, in order: a document deleted after it was
    written stays deleted."""
    from knowledgeops.index import edge_builder
    from knowledgeops.index.edge_builder import Builder

    loop = asyncio.get_running_loop()
    engine = EdgeEngine(
        tmp_path / "index", BuildSettings(idle_seconds=3600, held_points=300, split_points=900)
    )
    index = VectorIndex(engine)
    c = "chunks_held"
    read_back: list[int] = []
    upsert_routed = edge_builder.upsert_routed

    def counting(records: list[object], shards: list[object]) -> None:
        read_back.append(len(records))
        upsert_routed(records, shards)  # type: ignore[arg-type]

    async def write_late() -> None:
        # 150 points a document, one write each: late0 and late1 are held, late2 and late3
        # are past the 300 held points.
        for d in range(4):
            batch = [Chunk(i, f"late {i} of {d}", f"late{d}-{i}") for i in range(150)]
            await index.upsert(
                c, f"late{d}", batch, [vec(50_000 + 1000 * d + i) for i in range(150)]
            )
        assert await index.delete_document(c, "late0") == 150

    optimize = Builder._optimize_in_child

    def optimize_then_write(
        self: Builder, target: Path, dimension: int, split_into: object = ()
    ) -> bool:
        done = optimize(self, target, dimension, split_into)  # type: ignore[arg-type]
        asyncio.run_coroutine_threadsafe(write_late(), loop).result()
        return done

    monkeypatch.setattr(edge_builder, "upsert_routed", counting)
    monkeypatch.setattr(Builder, "_optimize_in_child", optimize_then_write)
    try:
        await _documents(index, c, 6 if splits else 2, 200)
        (part,) = engine.collection(c).parts
        builder = Builder(engine)
        assert await asyncio.to_thread(builder.split if splits else builder.build, part)
        assert len(engine.collection(c).parts) == (BuildSettings().partitions if splits else 1)
        assert sum(read_back) == 300, read_back
        # Counted in the partition each document routes to: a held write replayed into
        # another one would be missing here.
        assert [await index.count(c, f"late{d}") for d in range(4)] == [0, 150, 150, 150]
        assert await index.count(c, "doc1") == 200
        for d, i in ((1, 7), (3, 149)):
            hits = await index.search(
                c, 1, vector=vec(50_000 + 1000 * d + i), mode=SearchMode.DENSE
            )
            assert (hits[0].document_id, hits[0].chunk_index) == (f"late{d}", i)
    finally:
        index.close()


async def test_bulk_writes_wait_while_a_partition_holds_too_many_unindexed_points(
    tmp_path: Path,
) -> None:
    """Past `BuildSettings.unindexed_limit` unindexed points a bulk writer waits until the
    build lands (the builder finds the partition due at that many, whatever the growth rule
    says); after it, writes go ahead at once."""
    from knowledgeops.index.edge_builder import Builder

    # The growth rule alone would build only at 100,000 points.
    engine = EdgeEngine(
        tmp_path / "index", BuildSettings(points=100_000, unindexed_limit=500, idle_points=200)
    )
    index = VectorIndex(engine)
    c = "chunks_room"
    try:
        await _documents(index, c, 1, 400)
        assert await index.room_to_write(c, "doc9") < 0.5, "400 unindexed: room"
        await _documents(index, c, 2, 150)  # doc0 again (overwritten) and doc1: 550 points
        (part,) = engine.collection(c).parts
        assert part.unindexed() == 550 and not engine.has_room(c, "doc9")
        builder = Builder(engine)
        assert builder._due(part), "due at the limit"
        waiting = asyncio.create_task(index.room_to_write(c, "doc9"))
        await asyncio.sleep(1.5)
        assert not waiting.done(), "a bulk writer waits while the build is behind"
        assert await asyncio.to_thread(builder.build, part)
        waited = await asyncio.wait_for(waiting, 10)
        assert waited >= 1.5 and part.unindexed() == 0 and engine.has_room(c, "doc9")
        # A build that never lands holds a writer for `most` seconds, not for ever.
        more = [Chunk(i, f"chunk {i} of more", f"m{i}") for i in range(600)]
        await index.upsert(c, "more", more, [vec(50_000 + i) for i in range(600)])
        assert not engine.has_room(c, "doc9")
        assert 0.9 <= await asyncio.wait_for(index.room_to_write(c, "doc9", most=1.0), 5) < 3
    finally:
        index.close()
