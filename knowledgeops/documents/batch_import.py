"""One group of a batch import (DOCUMENT_BATCH_IMPORT): many small documents through the same
steps as a single import, each step done for the whole group at once.

    list the rows -> parse + chunk (one parser job) -> embed (the cache first; only missing
    texts, in requests of the batch size) -> upsert (one index write) -> publish (two index
    calls, one database transaction)

Per document a single small import costs a workflow start, a workflow task, a parser round
trip, an embedding request, an index write and three database transactions; here a group of
a hundred shares each of them (docs/benchmarks.md, "A folder of small documents"). Each
document is still a document: its own version (the batch's version id; point ids are
`uuid5(document, version, chunk)`), chunk files, catalogue row, status and reason. A file's own
problem fails that document alone; a bigger file, or a scan or an image (OCR), is handed back
to the workflow, which starts its own import.

A retry starts the group over and costs little: the chunk files are written again with the
same content, what was embedded is in the embedding cache, points are overwritten by id, and
rows taken over meanwhile (a delete, a newer import) are left alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_batch import (
    BatchFailure,
    DeferredDocument,
    ImportGroupRequest,
    ImportGroupResult,
    ManifestEntry,
)
from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.db.batch_catalogue import BatchCatalogue, Listed, Published
from knowledgeops.documents.import_priority import import_priority
from knowledgeops.errors import EmbeddingRejectedError
from knowledgeops.files import chunk_store, file_store
from knowledgeops.files.chunk_store import Chunk, ChunkReader
from knowledgeops.files.data_files import DataFiles
from knowledgeops.index.base import ROOM_WAIT_SECONDS
from knowledgeops.index.embedding_cache import EmbeddingCache
from knowledgeops.index.points import PointFields
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.ingest.embed_upsert import BULK_CHUNKS
from knowledgeops.ingest.parse_runner import run_parse_chunk_group
from knowledgeops.ingest.parser_process import BatchParseItem, ParserLimits
from knowledgeops.models.embedding import Embedder


@dataclass
class GroupContext:
    """What a group import works with (the activity builds it from the worker's resources)."""

    settings: Settings
    store: VectorIndex
    files: DataFiles
    catalogue: BatchCatalogue
    embedder: Embedder
    collection: str
    chunking: ChunkingOptions
    # One group parses at a time per worker (the batch's own parser, as small documents
    # have theirs): a batch never takes more than one parser from bigger files' imports.
    parser: asyncio.Semaphore
    # Where the group is (a heartbeat): its stage, and how many of its documents are done.
    report: Callable[[str, int], None] = lambda stage, done: None


@dataclass
class Doc:
    """A document of the group, filled in as the group's steps go."""

    entry: ManifestEntry
    chunks: list[Chunk] = field(default_factory=list)
    title: str | None = None
    previous: str | None = None  # its live version before this import


async def import_group(
    ctx: GroupContext, req: ImportGroupRequest, entries: Sequence[ManifestEntry]
) -> ImportGroupResult:
    failed: dict[str, BatchFailure] = {}
    deferred: list[DeferredDocument] = []

    def fail(e: ManifestEntry, error: str) -> None:
        failed[e.document_id] = BatchFailure(
            document_id=e.document_id, filename=e.filename, error=error
        )

    ctx.report("listing", 0)
    here = [e for e in entries if e.error or e.size <= req.small_bytes]
    deferred += [
        _deferred(e, req.small_bytes) for e in entries if not (e.error or e.size <= req.small_bytes)
    ]
    owned = await ctx.catalogue.list_documents(
        req.task_id,
        [Listed(e.document_id, e.filename, e.file_id) for e in here],
        req.metadata.owner,
        req.metadata.tags,
    )
    docs: list[Doc] = []
    for e in here:
        if e.document_id not in owned:
            fail(e, "DocumentBeingDeleted: its delete was asked for during the import")
        elif e.error:
            fail(e, e.error)
        else:
            docs.append(Doc(e))

    ctx.report("parsing", 0)
    docs = await _parse(ctx, req, docs, fail, deferred)
    previous = await ctx.catalogue.live_versions([d.entry.document_id for d in docs])
    # Off the event loop: two opens per document (and one for an earlier pointer file).
    await asyncio.to_thread(_read_chunks, ctx.settings.chunks_dir, req.version, docs, previous)

    ctx.report("embedding", 0)
    vectors, embedded = await _embed(ctx, docs, req.embed_batch_size, fail)
    for d in [d for d in docs if d.entry.document_id in failed]:
        # A text the model refused: its chunk files go, its live version stays.
        await ctx.files.discard(d.entry.document_id, req.version, d.previous)
    docs = [d for d in docs if d.entry.document_id not in failed]

    ctx.report("indexing", 0)
    staged = {d.entry.document_id for d in docs if d.previous not in (None, req.version)}
    await write_group(ctx.store, ctx.collection, req, docs, staged, vectors)

    ctx.report("publishing", 0)
    published = await _publish(ctx, req, docs, staged, failed)
    chunks = sum(len(d.chunks) for d in docs)
    ctx.report("published", len(entries))
    return ImportGroupResult(
        imported=len(published),
        failures=list(failed.values()),
        deferred=deferred,
        embedded=embedded,
        reused=chunks - embedded,
        chunks=chunks,
    )


async def write_group(
    store: VectorIndex,
    collection: str,
    req: ImportGroupRequest,
    docs: Sequence[Doc],
    staged: set[str],
    vectors: Mapping[str, Sequence[float]],
    most_wait: float = ROOM_WAIT_SECONDS,
) -> None:
    """The group's points in one index write (`staged`: the documents whose live version
    stays searchable until publish)."""
    if req.batch_total >= BULK_CHUNKS or sum(len(d.chunks) for d in docs) >= BULK_CHUNKS:
        # A bulk write (each document is a chunk at least) waits while the index's build is
        # too far behind, as a large document's batches do; its documents route to every
        # partition, so it waits for all of them.
        await store.room_to_write(
            collection, None, most_wait, writer=f"group {req.start}-{req.end} of {req.task_id}"
        )
    await store.upsert_documents(
        collection,
        [
            (
                PointFields(
                    d.entry.document_id,
                    req.version,
                    d.entry.document_id in staged,
                    req.metadata.owner,
                    tuple(req.metadata.tags),
                ),
                d.chunks,
                [vectors[c.content_hash] for c in d.chunks],
            )
            for d in docs
        ],
    )


def _read_chunks(chunks_dir: Path, version: str, docs: list[Doc], live: dict[str, str]) -> None:
    for d in docs:
        doc = d.entry.document_id
        d.previous = live.get(doc) or chunk_store.legacy_live_version(chunks_dir, doc)
        reader = ChunkReader(chunks_dir, doc, version)
        try:
            d.chunks = reader.read(0, reader.count)
        finally:
            reader.close()


def _deferred(e: ManifestEntry, small_bytes: int) -> DeferredDocument:
    return DeferredDocument(
        document_id=e.document_id,
        file_id=e.file_id,
        filename=e.filename,
        size=e.size,
        priority=import_priority(e.size, small_bytes),
    )


async def _parse(
    ctx: GroupContext,
    req: ImportGroupRequest,
    docs: list[Doc],
    fail: Callable[[ManifestEntry, str], None],
    deferred: list[DeferredDocument],
) -> list[Doc]:
    """Parse and chunk the documents into their versions' chunk files; those parsed."""
    s = ctx.settings
    paths = [file_store.path_for(s.files_dir, d.entry.file_id) for d in docs]
    # From the store, when another machine took the upload (STORAGE_URL).
    missing = set(await ctx.files.fetch_all(paths))
    present = []
    for d, path in zip(docs, paths, strict=True):
        if path in missing:
            fail(d.entry, f"FileNotFound: stored file {d.entry.file_id} does not exist")
        else:
            present.append((d, path))
    items = [
        BatchParseItem(path=str(p), filename=d.entry.filename, document_id=d.entry.document_id)
        for d, p in present
    ]
    limits = ParserLimits(
        cpu_seconds=s.parser_cpu_seconds,
        wall_seconds=s.parser_wall_seconds,
        max_characters=s.max_document_characters,
    )
    async with ctx.parser:
        outcomes = await run_parse_chunk_group(
            items,
            s.chunks_dir,
            req.version,
            ctx.chunking,
            s.parser_memory_mb,
            limits,
            s.max_document_chunks,
        )
    parsed = []
    for (d, _), out in zip(present, outcomes, strict=True):
        if out.error is not None:
            fail(d.entry, f"{out.error.kind}: {out.error.message}")
        elif out.ocr:
            deferred.append(_deferred(d.entry, req.small_bytes))
        else:
            d.title = out.title
            parsed.append(d)
    for d in parsed:  # the index's owner may be on another machine than the next step
        await ctx.files.send_version(d.entry.document_id, req.version)
    return parsed


async def _embed(
    ctx: GroupContext,
    docs: list[Doc],
    batch_size: int,
    fail: Callable[[ManifestEntry, str], None],
) -> tuple[dict[str, list[float]], int]:
    """Every chunk's vector, from the embedding cache or the model (each missing text once);
    the number of texts embedded. A text the model refuses fails its document alone."""
    cache = EmbeddingCache(ctx.store, ctx.embedder.model_id)
    texts = {c.content_hash: c.index_text for d in docs for c in d.chunks}
    vectors = await cache.get(list(texts))
    missing = [h for h in texts if h not in vectors]
    try:
        await _embed_into(cache, ctx.embedder, texts, missing, batch_size, vectors, ctx.report)
    except EmbeddingRejectedError:
        # One document's text spoils the request: each document on its own, to find which.
        for d in docs:
            own = [c.content_hash for c in d.chunks if c.content_hash not in vectors]
            try:
                await _embed_into(cache, ctx.embedder, texts, own, batch_size, vectors, ctx.report)
            except EmbeddingRejectedError as e:
                fail(d.entry, f"EmbeddingRejected: {e}")
    return vectors, sum(1 for h in missing if h in vectors)


async def _embed_into(
    cache: EmbeddingCache,
    embedder: Embedder,
    texts: dict[str, str],
    hashes: Sequence[str],
    batch_size: int,
    vectors: dict[str, list[float]],
    report: Callable[[str, int], None],
) -> None:
    for at in range(0, len(hashes), batch_size):
        part = list(dict.fromkeys(hashes[at : at + batch_size]))
        got = await embedder.embed([texts[h] for h in part])
        # Cached before the next request: a crash pays at most for the request in flight.
        await cache.put(part, got)
        vectors.update(zip(part, got, strict=True))
        report("embedding", 0)


async def _publish(
    ctx: GroupContext,
    req: ImportGroupRequest,
    docs: list[Doc],
    staged: set[str],
    failed: dict[str, BatchFailure],
) -> set[str]:
    """Search switches to this version of each document still the batch's; their pointers
    and rows move in one transaction; what others took over meanwhile is discarded."""
    ids = [d.entry.document_id for d in docs]
    owned = await ctx.catalogue.owned(req.task_id, ids)
    await ctx.store.publish_documents(
        ctx.collection, req.version, sorted(owned), sorted(staged & owned)
    )
    published = await ctx.catalogue.finish(
        req.task_id,
        req.version,
        {
            d.entry.document_id: Published(len(d.chunks), d.title)
            for d in docs
            if d.entry.document_id in owned
        },
        {doc: f.error for doc, f in failed.items()},
    )
    lost = [d for d in docs if d.entry.document_id not in published]
    await ctx.store.discard_documents(
        ctx.collection, req.version, [d.entry.document_id for d in lost]
    )
    for d in lost:
        await ctx.files.discard(d.entry.document_id, req.version, d.previous)
    for d in docs:
        if d.entry.document_id in published and d.previous not in (None, req.version):
            # The version it replaces (its points went with the publish above).
            await ctx.files.remove_other_versions(
                d.entry.document_id, req.version, d.previous, previous_only=True
            )
    return published


async def discard_versions(
    store: VectorIndex,
    files: DataFiles,
    collections: Sequence[str],
    version: str,
    document_ids: Sequence[str],
    live: Callable[[Sequence[str]], Awaitable[dict[str, str]]],
) -> None:
    """Remove what a batch wrote of `version` for documents it never published (a failed or
    cancelled batch's documents still importing); a version that is live stays."""
    pointers = await live(document_ids)
    unpublished = [d for d in document_ids if pointers.get(d) != version]
    for collection in collections:
        await store.discard_documents(collection, version, unpublished)
    for d in unpublished:
        await files.discard(d, version, pointers.get(d))
