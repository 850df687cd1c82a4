"""The upsert step of a large document waits for the embedded index's build
(`IndexBase.room_to_write`); a small one never does, and a document's waits have one budget,
so a build that never lands cannot hold each of its batches for the longest wait."""

from __future__ import annotations

import time
from pathlib import Path

from knowledgeops.contracts.document_import import UpsertCheckpoint, UpsertRequest
from knowledgeops.files.chunk_store import Chunk, ChunkWriter
from knowledgeops.index.edge import EdgeEngine
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
