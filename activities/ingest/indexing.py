"""Embed a document's stored chunks and upsert them into the index, batch by batch.

Shared by the DOCUMENT_IMPORT activity and the in-process benchmark path. Before embedding a
batch it asks the index which of those chunks are already stored with the same content: those
are not embedded again (resume after a crash, retry, re-import), so no embedding is paid twice.
Points carry only what search needs per chunk; document metadata (title, tags, owner) lives in
the document catalogue, so a metadata change never rewrites points and points stay small (the
embedded index keeps every point in the worker's memory).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from knowledgeops.contracts.document_import import EmbedCheckpoint, EmbedRequest, EmbedResult
from knowledgeops.embedding import Embedder, OnWait
from knowledgeops.stores.chunk_store import ChunkReader
from knowledgeops.stores.vector_store import VectorStore


async def index_document(
    store: VectorStore,
    embedder: Embedder,
    chunks_dir: Path,
    req: EmbedRequest,
    checkpoint: EmbedCheckpoint,
    on_batch: Callable[[EmbedCheckpoint], None],
    on_wait: OnWait = None,
) -> EmbedResult:
    reader = ChunkReader(chunks_dir, req.document_id)
    if reader.count != req.total_chunks:
        raise RuntimeError(
            f"chunk store has {reader.count} chunks for {req.document_id}, expected "
            f"{req.total_chunks}; it was re-parsed by another run"
        )
    collection = VectorStore.collection_name(embedder.model_id)
    cp = checkpoint.model_copy()
    for batch in reader.iter_batches(cp.done, req.batch_size):
        stored = await store.stored_fingerprints(
            collection, req.document_id, [c.index for c in batch]
        )
        to_embed = [c for c in batch if stored.get(c.index) != c.content_hash]
        if to_embed:
            vectors = await embedder.embed([c.text for c in to_embed], on_wait)
            await store.upsert(collection, req.document_id, to_embed, vectors)
        cp = EmbedCheckpoint(
            done=batch[-1].index + 1,
            total=req.total_chunks,
            embedded=cp.embedded + len(to_embed),
            reused=cp.reused + len(batch) - len(to_embed),
        )
        on_batch(cp)
    # A re-import that yields fewer chunks leaves points past the new end: remove them.
    stale = await store.delete_document(collection, req.document_id, from_index=req.total_chunks)
    return EmbedResult(
        total=req.total_chunks, embedded=cp.embedded, reused=cp.reused, stale_removed=stale
    )
