"""The upsert step of a large document, and a batch import's group of a large batch, wait for
the embedded index's build (`IndexBase.room_to_write`); small ones never do, and a document's
waits have one budget, so a build that never lands cannot hold each of its batches for the
longest wait."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from knowledgeops.contracts.document_batch import ImportGroupRequest, ManifestEntry
from knowledgeops.contracts.document_import import UpsertCheckpoint, UpsertRequest
from knowledgeops.documents.batch_import import Doc, write_group
from knowledgeops.files.chunk_store import Chunk, ChunkWriter
from knowledgeops.index.edge import EdgeEngine
from knowledgeops.index.edge_collection import route
from knowledgeops.index.edge_mapping import BuildSettings
from knowledgeops.index.embedding_cache import EmbeddingCache
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.ingest.embed_upsert import BULK_CHUNKS, upsert_chunks
from tests.helpers.vectors import vec

MODEL = "test:model"


async def _stored(index: VectorIndex, chunks_dir: Path, document_id: str, n: int) -> None:
    """A stored version "v1" of `n` chunks with their vectors in the embedding cache."""
    writer = ChunkWriter(chunks_dir, document_id, "v1")
    hashes = [f"{document_id}-{i}" for i in range(n)]
    for i, h in enumerate(hashes):
        writer.add(f"chunk {i} of {document_id}", h, None, None)
    writer.commit()
    await EmbeddingCache(index, MODEL).put(hashes, [vec(i) for i in range(n)])


async def _upsert_seconds(index: VectorIndex, chunks_dir: Path, c: str, document_id: str) -> float:
    started = time.monotonic()
    await upsert_chunks(
        index,
        MODEL,
        chunks_dir,
        UpsertRequest(document_id=document_id, version="v1", collection=c),
        UpsertCheckpoint(),
        lambda cp: None,
        most_wait=1.0,
    )
    return time.monotonic() - started


async def test_a_bulk_document_waits_once_in_all_for_a_build_that_never_lands(
    tmp_path: Path,
) -> None:
    # No builder runs here and the partition is past its limit from the start.
    engine = EdgeEngine(tmp_path / "index", BuildSettings(points=100_000, unindexed_limit=100))
    index = VectorIndex(engine)
    c = "chunks_bulk"
    try:
        await index.upsert(
            c, "before", [Chunk(i, "x", f"b{i}") for i in range(200)], [vec(i) for i in range(200)]
        )
        assert not engine.has_room(c, "big")
        await _stored(index, tmp_path / "chunks", "small", BULK_CHUNKS - 1)
        await _stored(index, tmp_path / "chunks", "big", BULK_CHUNKS + 200)
        assert await _upsert_seconds(index, tmp_path / "chunks", c, "small") < 0.9
        # Five batches of 256: waiting `most_wait` each would take five seconds.
        assert 0.9 <= await _upsert_seconds(index, tmp_path / "chunks", c, "big") < 2.5
        assert await index.count(c, "small") == BULK_CHUNKS - 1
        assert await index.count(c, "big") == BULK_CHUNKS + 200
    finally:
        index.close()


async def test_a_bulk_batch_group_waits_for_every_partition_a_small_batch_never(
    tmp_path: Path,
) -> None:
    """A batch import's group writes documents routed to every partition in one write: a
    batch of `BULK_CHUNKS` documents or more waits while any partition holds too many
    unindexed points (`Engine.has_room` with no document), once, for `most_wait` at most; a
    small batch never waits."""
    from knowledgeops.index.edge_builder import Builder

    engine = EdgeEngine(
        tmp_path / "index", BuildSettings(points=100_000, split_points=300, unindexed_limit=500)
    )
    index = VectorIndex(engine)
    c = "chunks_groups"
    try:
        await index.upsert(
            c, "seed", [Chunk(i, "x", f"s{i}") for i in range(400)], [vec(i) for i in range(400)]
        )
        assert await asyncio.to_thread(Builder(engine).split, engine.collection(c).parts[0])
        n = len(engine.collection(c).parts)
        crowded = next(d for d in (f"crowd{i}" for i in range(100)) if route(d, n) != 0)
        roomy = next(d for d in (f"roomy{i}" for i in range(100)) if route(d, n) == 0)
        await index.upsert(
            c, crowded, [Chunk(i, "y", f"c{i}") for i in range(600)], [vec(i) for i in range(600)]
        )
        assert not engine.has_room(c, crowded) and engine.has_room(c, roomy)
        assert not engine.has_room(c, None), "one partition past its limit: no room for a group"

        def group(total: int, document_id: str) -> tuple[ImportGroupRequest, list[Doc]]:
            req = ImportGroupRequest(
                task_id="batch",
                manifest_id="m",
                start=0,
                end=1,
                version="v1",
                small_bytes=10_000,
                batch_total=total,
            )
            entry = ManifestEntry(document_id=document_id, filename="a.txt", size=9, file_id="f")
            return req, [Doc(entry, [Chunk(0, f"note {document_id}", f"h-{document_id}")])]

        vectors = {f"h-{d}": vec(900 + i) for i, d in enumerate((roomy, "roomy-bulk"))}
        started = time.monotonic()
        await write_group(index, c, *group(BULK_CHUNKS - 1, roomy), set(), vectors, most_wait=1.0)
        assert time.monotonic() - started < 0.9, "a small batch does not wait"
        started = time.monotonic()
        await write_group(
            index, c, *group(BULK_CHUNKS, "roomy-bulk"), set(), vectors, most_wait=1.0
        )
        assert 0.9 <= time.monotonic() - started < 2.5, "a bulk batch waits (its budget)"
        assert await index.count(c, roomy) == 1 and await index.count(c, "roomy-bulk") == 1
    finally:
        index.close()
