"""The index contract, run on every engine available: the embedded Qdrant Edge always, a Qdrant
server when QDRANT_URL is set. Real engines, real vectors (small, deterministic ones)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from knowledgeops.contracts.search import SearchMode
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.index.edge import EdgeEngine
from knowledgeops.index.edge_mapping import BuildSettings
from knowledgeops.index.engine import Engine, IndexLockedError
from knowledgeops.index.vector_index import Scope, VectorIndex

QDRANT_URL = os.environ.get("QDRANT_URL", "")
DIM = 8


def _engine(kind: str, tmp: Path) -> Engine:
    if kind == "edge":
        return EdgeEngine(tmp / "index")
    if not QDRANT_URL:
        pytest.skip("no Qdrant server here: set QDRANT_URL to run the contract on one")
    from knowledgeops.index.server import ServerEngine

    return ServerEngine(QDRANT_URL)


@pytest.fixture(params=["edge", "server"])
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorIndex]:
    ix = VectorIndex(_engine(request.param, tmp_path))
    yield ix
    if not ix.local:  # a server outlives the test: leave nothing of this test behind
        for name in await ix.collections():
            if name.startswith(PREFIXES):
                await ix.drop_collection(name)
    ix.close()


RUN = uuid.uuid4().hex[:8]
PREFIXES = (f"chunks_t{RUN}", f"embeddings_t{RUN}")


def new_collection() -> str:
    return f"chunks_t{RUN}_{uuid.uuid4().hex[:8]}"


def vec(i: int) -> list[float]:
    """A unit vector per i, pseudo-random: vec(i) is nearest to itself and to nothing else."""
    v = np.random.default_rng(i).standard_normal(DIM)
    return [float(x) for x in v / np.linalg.norm(v)]


def chunks(texts: list[str], heading: str | None = None) -> list[Chunk]:
    return [Chunk(i, t, f"h{i}-{t[:8]}", page=None, heading=heading) for i, t in enumerate(texts)]


DOCS = {
    "geo": ["Groundwater moves slowly through aquifers.", "Rivers carry water to the sea."],
    "bio": ["Photosynthesis turns light into sugar.", "Chlorophyll absorbs red and blue light."],
    "zh": ["向量检索需要把长文档切分成块。", "地下水在含水层中缓慢流动。"],
}


async def _fill(ix: VectorIndex, c: str) -> None:
    base = 0
    for doc, texts in DOCS.items():
        owner = "ann" if doc != "zh" else "bo"
        await ix.upsert(
            c,
            doc,
            chunks(texts),
            [vec(base + i) for i in range(len(texts))],
            version="v1",
            owner=owner,
            tags=[doc, "all"],
        )
        base += 10


async def test_versions_are_staged_published_and_discarded(index: VectorIndex) -> None:
    c = new_collection()
    await index.upsert(
        c, "d", chunks(["one a", "one b", "one c"]), [vec(i) for i in range(3)], version="v1"
    )
    assert await index.count(c, "d") == 3
    await index.upsert(
        c, "d", chunks(["two a", "two b"]), [vec(i) for i in range(2)], version="v2", staged=True
    )
    # Staged points are invisible to search and to the default count.
    assert await index.count(c, "d") == 3
    assert await index.count(c, "d", staged=True) == 5
    hits = await index.search(c, 10, vector=vec(0), mode=SearchMode.DENSE)
    assert {h.text for h in hits} == {"one a", "one b", "one c"}
    assert await index.has_version(c, "d", {"v1"}) and not await index.has_version(c, "d", {"v2"})
    removed = await index.publish(c, "d", "v2")
    assert removed == 3
    assert await index.count(c, "d", staged=True) == 2
    hits = await index.search(c, 10, vector=vec(0), text="two", mode=SearchMode.HYBRID)
    assert {h.text for h in hits} == {"two a", "two b"}
    # Idempotent: a retried publish finds nothing more to do.
    assert await index.publish(c, "d", "v2") == 0
    await index.upsert(c, "d", chunks(["three"]), [vec(5)], version="v3", staged=True)
    assert await index.discard_version(c, "d", "v3") == 1
    assert await index.count(c, "d", staged=True) == 2
    # Rewriting the same chunk overwrites it (deterministic ids): no duplicates.
    await index.upsert(c, "d", chunks(["two a", "two b"]), [vec(0), vec(1)], version="v2")
    assert await index.count(c, "d") == 2
    assert await index.delete_document(c, "d") == 2
    assert await index.count(c) == 0


async def test_search_modes_rank_by_meaning_words_or_both(index: VectorIndex) -> None:
    c = new_collection()
    await _fill(index, c)
    # Keyword: the exact (stemmed) word, whatever the vectors say.
    kw = await index.search(c, 3, text="aquifer", mode=SearchMode.KEYWORD)
    assert [h.text for h in kw][:1] == [DOCS["geo"][0]]
    # Chinese is segmented: a word inside a sentence matches.
    zh = await index.search(c, 3, text="含水层", mode=SearchMode.KEYWORD)
    assert [h.text for h in zh][:1] == [DOCS["zh"][1]]
    # Dense: the nearest vector, whatever the words.
    dense = await index.search(c, 1, vector=vec(10), mode=SearchMode.DENSE)
    assert [h.document_id for h in dense] == ["bio"]
    # Hybrid: a chunk both lists agree on outranks one only the vector likes.
    hybrid = await index.search(c, 3, vector=vec(1), text="chlorophyll absorbs light")
    assert hybrid[0].text == DOCS["bio"][1]
    assert {h.document_id for h in hybrid} >= {"bio", "geo"}
    # Stop words only: no keyword match, but no error either.
    assert await index.search(c, 3, text="the of and", mode=SearchMode.KEYWORD) == []


async def test_scope_filters_inside_the_engine(index: VectorIndex) -> None:
    c = new_collection()
    await _fill(index, c)
    everything = 6
    hits = await index.search(c, 10, vector=vec(0), text="light water", scope=Scope(owner="bo"))
    assert {h.document_id for h in hits} == {"zh"}
    hits = await index.search(
        c, 10, vector=vec(0), scope=Scope(tags=["bio", "all"]), mode=SearchMode.DENSE
    )
    assert {h.document_id for h in hits} == {"bio"} and len(hits) == 2
    hits = await index.search(
        c, 10, vector=vec(0), scope=Scope(tags=["bio", "geo"]), mode=SearchMode.DENSE
    )
    assert hits == []
    hits = await index.search(
        c, 10, vector=vec(0), scope=Scope(document_ids=["geo", "zh"]), mode=SearchMode.DENSE
    )
    assert {h.document_id for h in hits} == {"geo", "zh"}
    assert await index.search(c, 10, vector=vec(0), scope=Scope(document_ids=[])) == []
    assert len(await index.search(c, 10, vector=vec(0), mode=SearchMode.DENSE)) == everything
    # Owner and tags change on the points, so the next search sees the change.
    await index.set_document_fields(c, "geo", "bo", ["moved"])
    hits = await index.search(c, 10, vector=vec(0), scope=Scope(owner="bo"), mode=SearchMode.DENSE)
    assert {h.document_id for h in hits} == {"geo", "zh"}
    hits = await index.search(
        c, 10, vector=vec(0), scope=Scope(tags=["moved"]), mode=SearchMode.DENSE
    )
    assert {h.document_id for h in hits} == {"geo"}
    await index.set_document_fields(c, "geo", None, [])
    hits = await index.search(c, 10, vector=vec(0), scope=Scope(owner="bo"), mode=SearchMode.DENSE)
    assert {h.document_id for h in hits} == {"zh"}
    assert await index.document_point_counts(c) == {"geo": 2, "bio": 2, "zh": 2}


async def test_export_and_import_keep_points_and_rebuild_keywords(index: VectorIndex) -> None:
    c, d = new_collection(), new_collection()
    await _fill(index, c)
    exported, offset = [], None
    while True:
        page, offset = await index.export_points(c, offset, 4)
        exported += page
        if offset is None:
            break
    assert len({p.id for p in exported}) == len(exported) == 6
    assert all(len(p.vector) == DIM for p in exported)
    assert await index.vector_params(c) == (DIM, "Cosine")
    await index.import_points(d, DIM, exported)
    assert await index.count(d) == 6
    # The keyword vectors were made again from the text: keyword search works on the copy.
    kw = await index.search(d, 1, text="photosynthesis", mode=SearchMode.KEYWORD)
    assert [h.document_id for h in kw] == ["bio"]
    assert [h.text for h in await index.search(d, 1, vector=vec(11), mode=SearchMode.DENSE)] == [
        DOCS["bio"][1]
    ]


async def test_aliases_metadata_and_the_embedding_cache(index: VectorIndex) -> None:
    c = new_collection()
    alias = f"alias_{uuid.uuid4().hex[:6]}"
    await index.ensure(c, DIM)
    assert await index.alias_target(alias) is None
    await index.set_alias(alias, c)
    assert await index.alias_target(alias) == c
    await index.set_metadata(c, {"model": "m", "chunk_tokens": 128})
    assert await index.metadata(c) == {"model": "m", "chunk_tokens": 128}
    await index.set_alias(alias, None)
    assert await index.alias_target(alias) is None
    cache = f"embeddings_t{RUN}_{uuid.uuid4().hex[:8]}"
    ids = [str(uuid.uuid4()) for _ in range(3)]
    await index.upsert_vectors(cache, ids, [vec(i) for i in range(3)], [{"h": i} for i in ids])
    got = await index.retrieve_vectors(cache, [*ids[:2], str(uuid.uuid4())])
    assert set(got) == set(ids[:2])
    assert all(abs(a - b) < 1e-5 for a, b in zip(got[ids[1]], vec(1), strict=True))
    assert await index.drop_collection(c) and not await index.exists(c)


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
