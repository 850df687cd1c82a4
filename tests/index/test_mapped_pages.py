"""The embedded index hands back its cold mapped pages (knowledgeops/index/mapped_pages.py):
the process's resident memory of those files drops, and nothing written is lost: searches,
reads by id and later writes see every point as before."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from knowledgeops.contracts.search import SearchMode
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.index.edge import EdgeEngine
from knowledgeops.index.embedding_cache import EmbeddingCache
from knowledgeops.index.mapped_pages import GATE, cold_mappings
from knowledgeops.index.vector_index import VectorIndex
from tests.helpers.vectors import vec

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="mapped pages are read from Linux's /proc"
)


def _resident_kb(root: Path) -> dict[str, int]:
    """Resident KB of this process's mappings of files under `root`, by file kind."""
    out: dict[str, int] = {}
    kind = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
            path = fields[5] if len(fields) > 5 else ""
            kind = _kind(path) if path.startswith(f"{root.resolve()}/") else None
        elif kind is not None and fields[0] == "Rss:":
            out[kind] = out.get(kind, 0) + int(fields[1])
    return out


def _kind(path: str) -> str:
    if "/embeddings_" in path:
        return "cache"
    if "/wal/" in path:
        return "wal"
    if "vector_storage/vectors/" in path:
        return "vectors"
    if "payload_storage/" in path:
        return "payloads"
    return "other"


async def test_cold_pages_are_released_and_nothing_is_lost(tmp_path: Path) -> None:
    engine = EdgeEngine(tmp_path / "index")
    index = VectorIndex(engine)
    cache = EmbeddingCache(index, "m")
    c = "chunks_pages"
    try:
        for d in range(8):
            chunks = [Chunk(i, f"chunk {i} of document {d} " * 40, f"h{d}-{i}") for i in range(250)]
            vectors = [vec(1000 * d + i) for i in range(250)]
            await index.upsert(c, f"doc{d}", chunks, vectors)
            await cache.put([ch.content_hash for ch in chunks], vectors)
        engine.flush()
        before = _resident_kb(tmp_path / "index")
        # (measured: cache 540, vectors 68, wal 2,256, payloads 292 KB; 8-dimensional vectors)
        assert min(before.get(k, 0) for k in ("cache", "vectors", "wal", "payloads")) >= 50

        assert engine.release_cold_pages() > 0
        after = _resident_kb(tmp_path / "index")
        for kind in ("vectors", "cache", "wal", "payloads"):
            assert after.get(kind, 0) < before[kind] / 4, (kind, before, after)

        # Everything is still there, read back through the dropped mappings.
        hits = await index.search(c, 3, vector=vec(5_123), mode=SearchMode.DENSE)
        assert (hits[0].document_id, hits[0].chunk_index) == ("doc5", 123)
        assert "chunk 123 of document 5" in hits[0].text
        got = await cache.get(["h3-7", "h7-249"])
        assert got["h3-7"] == pytest.approx(vec(3_007), abs=1e-6)
        assert got["h7-249"] == pytest.approx(vec(7_249), abs=1e-6)
        # ... and writes go on into the same files.
        await index.upsert(c, "doc9", [Chunk(0, "a later chunk", "h9-0")], [vec(9_000)])
        assert await index.count(c, None) == 2001
    finally:
        engine.close()

    # Reopened from disk (the write-ahead log and segments): every point, the same vectors.
    engine = EdgeEngine(tmp_path / "index")
    try:
        index = VectorIndex(engine)
        assert await index.count(c, None) == 2001
        got = await EmbeddingCache(index, "m").get(["h0-0"])
        assert got["h0-0"] == pytest.approx(vec(0), abs=1e-6)
    finally:
        engine.close()


def test_only_shared_mappings_of_cold_files_under_the_index_are_picked() -> None:
    root = Path("/data/index")
    seg = "/data/index/collections/chunks_x/p0/shard-1/segments/abc"
    vectors = f"{seg}/vector_storage/vectors"
    maps = [
        f"7f0000000000-7f0000100000 rw-s 00000000 08:01 11 {vectors}/chunk_0.mmap",
        f"7f0000100000-7f0000200000 r--s 00000000 08:01 12 {seg}/vector_index/links_compressed.bin",
        f"7f0000200000-7f0000300000 rw-p 00000000 08:01 13 {seg}/payload_storage/page_0.dat",
        f"7f0000300000-7f0000400000 rw-s 00000000 08:01 14 {seg}/payload_storage/page_3.dat",
        "7f0000400000-7f0000500000 rw-s 00000000 08:01 15 /data/index/collections/chunks_x/p0/"
        "shard-1/wal/open-2",
        "7f0000500000-7f0000600000 rw-s 00000000 08:01 16 /data/index/collections/embeddings_m/"
        "p0/shard-0/segments/abc/id_tracker.versions",
        f"7f0000600000-7f0000700000 rw-s 00000000 08:01 17 {seg}/payload_storage/page_4.dat "
        "(deleted)",
        "7f0000700000-7f0000800000 rw-s 00000000 08:01 18 /elsewhere/wal/open-1",
        "7f0000800000-7f0000900000 rw-p 00000000 00:00 0 ",
        f"7f0000900000-7f0000a00000 r--s 00000000 08:01 19 {seg}/vector_storage/matrix.dat",
    ]
    picked = cold_mappings(maps, root, [root / "collections" / "embeddings_m"])
    assert [p[2].rsplit("/", 2)[-2:] for p in picked] == [
        ["vectors", "chunk_0.mmap"],
        ["payload_storage", "page_3.dat"],
        ["wal", "open-2"],
        ["abc", "id_tracker.versions"],
    ]
    assert picked[0][:2] == (0x7F0000000000, 0x100000)


def test_a_release_waits_for_writes_and_writes_wait_for_it() -> None:
    with GATE.sharing(), GATE.alone(0.05) as held:
        assert not held, "a write under way keeps a release out"
    with GATE.alone(0.05) as held:
        assert held
    with GATE.sharing():
        pass  # and the gate is free again
