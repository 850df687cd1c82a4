"""The embed step and the upsert step over a stored version's chunks, batch by batch.

Embed: each batch's texts are looked up in the embedding cache by content hash; only the
missing ones (each distinct text once) are sent to the model, and their vectors are written to
the cache before the checkpoint moves on, so a crash pays at most for the batch in flight.
Upsert: each batch's vectors are read back from the cache and written as index points with
deterministic ids. Used by DOCUMENT_IMPORT, EMBEDDING_GENERATE, INDEXING_UPSERT and the
in-process benchmark path. Points carry only what search needs per chunk; document metadata
(title, tags, owner) lives in the document catalogue, so a metadata change never rewrites
points and points stay small (the embedded index keeps every point in the worker's memory).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from knowledgeops.contracts.document_import import (
    EmbedCheckpoint,
    EmbedRequest,
    EmbedResult,
    UpsertCheckpoint,
    UpsertRequest,
    UpsertResult,
)
from knowledgeops.embedding import Embedder, OnWait
from knowledgeops.stores.chunk_store import ChunkReader
from knowledgeops.stores.embedding_cache import EmbeddingCache
from knowledgeops.stores.vector_store import VectorStore


class VectorsMissingError(LookupError):
    """Chunks to upsert have no cached vector for the model: the embed step must run first."""


def _range(reader: ChunkReader, start: int, end: int | None) -> tuple[int, int]:
    stop = reader.count if end is None else min(end, reader.count)
    return min(start, stop), stop


async def embed_chunks(
    store: VectorStore,
    embedder: Embedder,
    chunks_dir: Path,
    req: EmbedRequest,
    checkpoint: EmbedCheckpoint,
    on_batch: Callable[[EmbedCheckpoint], None],
    on_wait: OnWait = None,
) -> EmbedResult:
    reader = ChunkReader(chunks_dir, req.document_id, req.version)
    start, stop = _range(reader, req.start, req.end)
    cache = EmbeddingCache(store, embedder.model_id)
    cp = checkpoint if checkpoint.done >= start else EmbedCheckpoint(done=start, total=stop)
    for batch in reader.iter_batches(cp.done, req.batch_size):
        batch = [c for c in batch if c.index < stop]
        if not batch:
            break
        texts = {c.content_hash: c.text for c in batch}
        found = await cache.get(list(texts))
        missing = [h for h in texts if h not in found]
        if missing:
            vectors = await embedder.embed([texts[h] for h in missing], on_wait)
            await cache.put(missing, vectors)
        # A text repeated within the batch is billed once; its other chunks count as reused.
        cp = EmbedCheckpoint(
            done=batch[-1].index + 1,
            total=stop,
            embedded=cp.embedded + len(missing),
            reused=cp.reused + len(batch) - len(missing),
        )
        on_batch(cp)
    reader.close()
    return EmbedResult(
        total=stop - start, embedded=cp.embedded, reused=cp.reused, model=embedder.model_id
    )


async def upsert_chunks(
    store: VectorStore,
    model_id: str,
    chunks_dir: Path,
    req: UpsertRequest,
    checkpoint: UpsertCheckpoint,
    on_batch: Callable[[UpsertCheckpoint], None],
) -> UpsertResult:
    reader = ChunkReader(chunks_dir, req.document_id, req.version)
    collection = req.collection or VectorStore.collection_name(model_id)
    cache = EmbeddingCache(store, model_id)
    cp = checkpoint
    for batch in reader.iter_batches(cp.done, req.batch_size):
        vectors = await cache.get([c.content_hash for c in batch])
        absent = [c.index for c in batch if c.content_hash not in vectors]
        if absent:
            raise VectorsMissingError(
                f"{len(absent)} chunks of {req.document_id} (first: {absent[0]}) have no "
                f"vector for {model_id}; run the embed step (EMBEDDING_GENERATE) first"
            )
        await store.upsert(
            collection,
            req.document_id,
            batch,
            [vectors[c.content_hash] for c in batch],
            version=reader.version,
            staged=req.staged,
        )
        cp = UpsertCheckpoint(done=batch[-1].index + 1, total=reader.count)
        on_batch(cp)
    reader.close()
    return UpsertResult(total=reader.count, collection=collection, staged=req.staged)
