"""The index contract, run on every engine available: the embedded Qdrant Edge always, in this
process and in a child of its own (INDEX_PROCESS); the server
engine always over qdrant-client's local mode (the same client calls, answered in process), and
on a real Qdrant server when QDRANT_URL is set. Real engines, real vectors (small, deterministic
ones)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from knowledgeops.contracts.search import SearchMode
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.index.bm25 import LEGACY_SPARSE_MODEL, SPARSE_MODEL, SPARSE_MODEL_KEY
from knowledgeops.index.edge import EdgeEngine
from knowledgeops.index.engine import Engine, IndexOutdatedError, Kind
from knowledgeops.index.engine_client import EngineClient
from knowledgeops.index.vector_index import Scope, VectorIndex
from tests.helpers.vectors import DIM, vec

QDRANT_URL = os.environ.get("QDRANT_URL", "")


def _engine(kind: str, tmp: Path) -> Engine:
    if kind == "edge":
        return EdgeEngine(tmp / "index")
    if kind == "edge-process":
        return EngineClient(tmp / "index")
    from qdrant_client import QdrantClient

    from knowledgeops.index.server import ServerEngine

    if kind == "local":
        # The server engine's own calls, answered by qdrant-client's local mode: it runs
        # everywhere, with nothing to download.
        return ServerEngine.over(QdrantClient(location=":memory:"))
    if not QDRANT_URL:
        pytest.skip("no Qdrant server here: set QDRANT_URL to run the contract on one")
    return ServerEngine(QDRANT_URL)


# Local mode ignores payload indexes and says so; on a server they are what the filters use.
LOCAL = pytest.param(
    "local",
    marks=pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
)


@pytest.fixture(params=["edge", "edge-process", LOCAL, "server"])
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorIndex]:
    ix = VectorIndex(_engine(request.param, tmp_path))
    yield ix
    if request.param == "server":  # a server outlives the test: leave nothing of this test behind
        for name in await ix.collections():
            if name.startswith(PREFIXES):
                await ix.drop_collection(name)
    ix.close()


RUN = uuid.uuid4().hex[:8]
PREFIXES = (f"chunks_t{RUN}", f"embeddings_t{RUN}")


def new_collection() -> str:
    return f"chunks_t{RUN}_{uuid.uuid4().hex[:8]}"


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


async def test_keyword_scores_weigh_a_rare_word_above_a_common_one(index: VectorIndex) -> None:
    # The sparse vector's IDF modifier: without it "cat" twice would outscore "zebra" once.
    c = new_collection()
    texts = ["zebra", "cat cat", "cat dog", "cat bird", "cat fish"]
    await index.upsert(c, "d", chunks(texts), [vec(i) for i in range(len(texts))])
    hits = await index.search(c, 2, text="zebra cat", mode=SearchMode.KEYWORD)
    assert [h.text for h in hits] == ["zebra", "cat cat"]


async def test_a_collection_keeps_the_keyword_tokenization_it_was_made_with(
    index: VectorIndex,
) -> None:
    texts = ["苹果公司于2023年9月发布了新手机。", "地下水在含水层中缓慢流动。"]
    # A new collection records the current tokenization, whatever metadata is written later.
    c = new_collection()
    await index.upsert(c, "d", chunks(texts), [vec(0), vec(1)])
    assert (await index.metadata(c))[SPARSE_MODEL_KEY] == SPARSE_MODEL
    await index.set_metadata(c, {"model": "m", SPARSE_MODEL_KEY: "another"})
    assert await index.metadata(c) == {"model": "m", SPARSE_MODEL_KEY: SPARSE_MODEL}
    assert await index.keyword_tokenization(c) == SPARSE_MODEL
    hits = await index.search(c, 2, text="2023年", mode=SearchMode.KEYWORD)
    assert [h.text for h in hits][:1] == [texts[0]]
    # One an earlier version made (recording nothing): its texts and its queries are tokenized
    # as before, so its vectors and queries still match; never a mix of the two.
    old = new_collection()
    await asyncio.to_thread(index.engine.create, old, Kind.CHUNKS, DIM)
    await index.upsert(old, "d", chunks(texts), [vec(0), vec(1)])
    assert await index.keyword_tokenization(old) == LEGACY_SPARSE_MODEL
    hits = await index.search(old, 2, text="含水层", mode=SearchMode.KEYWORD)
    assert [h.text for h in hits][:1] == [texts[1]]
    # The earlier tokenization dropped the digits of a Chinese text: a re-index fixes that.
    assert await index.search(old, 2, text="2023", mode=SearchMode.KEYWORD) == []
    await index.set_metadata(old, {"model": "m"})
    assert await index.keyword_tokenization(old) == LEGACY_SPARSE_MODEL
    # One a newer version made: refused, not guessed at.
    newer = new_collection()
    await asyncio.to_thread(
        index.engine.create, newer, Kind.CHUNKS, DIM, {SPARSE_MODEL_KEY: "bm25/newer/9"}
    )
    with pytest.raises(IndexOutdatedError, match="reindex"):
        await index.search(newer, 2, text="含水层", mode=SearchMode.KEYWORD)


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
    # The keyword tokenization a chunks collection was made with stays recorded.
    recorded = {SPARSE_MODEL_KEY: SPARSE_MODEL}
    assert await index.metadata(c) == {"model": "m", "chunk_tokens": 128} | recorded
    # Replaced, not merged: a key the new metadata lacks is gone.
    await index.set_metadata(c, {"model": "n"})
    assert await index.metadata(c) == {"model": "n"} | recorded
    # What a search asks first: the collection behind the alias, with its current metadata.
    assert await index.aliased(alias) == (c, {"model": "n"} | recorded)
    await index.set_alias(alias, None)
    assert await index.alias_target(alias) is None
    assert await index.aliased(alias) is None
    cache = f"embeddings_t{RUN}_{uuid.uuid4().hex[:8]}"
    ids = [str(uuid.uuid4()) for _ in range(3)]
    await index.upsert_vectors(cache, ids, [vec(i) for i in range(3)], [{"h": i} for i in ids])
    got = await index.retrieve_vectors(cache, [*ids[:2], str(uuid.uuid4())])
    assert set(got) == set(ids[:2])
    assert await index.existing_ids(cache, [*ids[:2], str(uuid.uuid4())]) == set(ids[:2])
    assert await index.existing_ids(f"{cache}_none", ids) == set()
    assert all(abs(a - b) < 1e-5 for a, b in zip(got[ids[1]], vec(1), strict=True))
    await index.set_alias(alias, c)
    assert await index.drop_collection(c) and not await index.exists(c)
    # An alias left naming a dropped collection names no existing one.
    assert await index.aliased(alias) is None
    await index.set_alias(alias, None)
