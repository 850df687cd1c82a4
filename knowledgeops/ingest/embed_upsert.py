"""The embed step and the upsert step over a stored version's chunks, batch by batch.

Embed: each batch's texts are looked up in the embedding cache by content hash; only the
missing ones (each distinct text once) are sent to the model, and their vectors are written to
the cache before the checkpoint moves on, so a crash pays at most for the batch in flight.
Upsert: each batch's vectors are read back from the cache and written as index points with
deterministic ids and a BM25 vector made from the chunk's text. Used by DOCUMENT_IMPORT,
EMBEDDING_GENERATE, INDEXING_UPSERT and the in-process benchmark path. Points carry what search
needs per chunk plus the document's owner and tags (what a scoped search filters by, inside the
engine); the rest of the document's metadata (title, file name) stays in the catalogue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from knowledgeops.contracts.document_import import (
    EmbedCheckpoint,
    EmbedRequest,
    EmbedResult,
    UpsertCheckpoint,
    UpsertRequest,
    UpsertResult,
)
from knowledgeops.files.chunk_store import Chunk, ChunkReader
from knowledgeops.index.base import ROOM_WAIT_SECONDS
from knowledgeops.index.embedding_cache import EmbeddingCache
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.models.embedding import Embedder, OnWait

# A document this large writes in bulk: each batch waits while the index's build is too far
# behind (IndexBase.room_to_write). Smaller ones never wait, so a one-page upload does not
# queue behind a bulk import. A batch import's group of a batch this large (in documents or
# its own chunks) waits too (documents/batch_import.py).
BULK_CHUNKS = 1_000


@dataclass(frozen=True)
class DocumentFields:
    """What every point of a document carries from its catalogue row."""

    owner: str | None = None
    tags: tuple[str, ...] = ()


class VectorsMissingError(LookupError):
    """Chunks to upsert have no cached vector for the model: the embed step must run first."""


def _range(reader: ChunkReader, start: int, end: int | None) -> tuple[int, int]:
    stop = reader.count if end is None else min(end, reader.count)
    return min(start, stop), stop


async def embed_chunks(
    store: VectorIndex,
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
    # A batch's cache write overlaps the next batch's embedding (in local mode a write commits
    # point by point, ~1.3 ms each, measured): the next batch is looked up in the cache before
    # the write is queued on the store's one thread, the checkpoint moves past a batch only
    # once its write has landed, and what this run embedded is remembered, so a text repeated
    # in a batch looked up before the write landed is not paid again.
    writing: tuple[asyncio.Task[None], EmbedCheckpoint] | None = None
    embedded_here: set[str] = set()

    async def landed() -> None:
        nonlocal writing
        if writing is not None:
            task, done = writing
            writing = None
            await task
            on_batch(done)

    async def cached(batch: list[Chunk]) -> set[str]:
        # Only whether each is there: the upsert step reads the vectors.
        return await cache.present([c.content_hash for c in batch])

    batches = (
        [c for c in batch if c.index < stop]
        for batch in reader.iter_batches(cp.done, req.batch_size)
    )
    try:
        batch = next(batches, [])
        found = await cached(batch) if batch else set()
        while batch:
            # What is embedded is the chunk under its heading context: the hash is of exactly it.
            texts = {c.content_hash: c.index_text for c in batch}
            missing = [h for h in texts if h not in found and h not in embedded_here]
            # A text repeated within the batch is billed once; its other chunks count as reused.
            cp = EmbedCheckpoint(
                done=batch[-1].index + 1,
                total=stop,
                embedded=cp.embedded + len(missing),
                reused=cp.reused + len(batch) - len(missing),
            )
            vectors = await embedder.embed([texts[h] for h in missing], on_wait) if missing else []
            batch = next(batches, [])
            found = await cached(batch) if batch else set()
            await landed()
            if not missing:
                on_batch(cp)
                continue
            writing = (asyncio.ensure_future(cache.put(missing, vectors)), cp)
            embedded_here.update(missing)
        await landed()
    finally:
        if writing is not None:
            # Failed or cancelled meanwhile: the write in flight lands before cleanup runs, and
            # if it landed, the checkpoint a retry resumes from (and its counts) includes it.
            task, done = writing
            await asyncio.wait([task])
            if not task.cancelled() and task.exception() is None:
                on_batch(done)
        reader.close()
    return EmbedResult(
        total=stop - start, embedded=cp.embedded, reused=cp.reused, model=embedder.model_id
    )


async def upsert_chunks(
    store: VectorIndex,
    model_id: str,
    chunks_dir: Path,
    req: UpsertRequest,
    checkpoint: UpsertCheckpoint,
    on_batch: Callable[[UpsertCheckpoint], None],
    fields: DocumentFields = DocumentFields(),
    most_wait: float = ROOM_WAIT_SECONDS,
) -> UpsertResult:
    reader = ChunkReader(chunks_dir, req.document_id, req.version)
    collection = req.collection or VectorIndex.collection_name(model_id)
    cache = EmbeddingCache(store, model_id)
    cp = checkpoint
    # What the document may still wait in all: a build that keeps failing must not hold each
    # of its batches for the longest wait.
    patience = most_wait if reader.count >= BULK_CHUNKS else 0.0
    for batch in reader.iter_batches(cp.done, req.batch_size):
        if patience > 0:
            patience -= await store.room_to_write(collection, req.document_id, most=patience)
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
            owner=fields.owner,
            tags=fields.tags,
        )
        cp = UpsertCheckpoint(done=batch[-1].index + 1, total=reader.count)
        on_batch(cp)
    reader.close()
    return UpsertResult(total=reader.count, collection=collection, staged=req.staged)
