"""Activities of DOCUMENT_IMPORT: parse, chunk, and publish or discard the import's version.
Its embed and upsert steps are in activities/indexing.py (shared with EMBEDDING_GENERATE and
INDEXING_UPSERT)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio import activity

from activities.support import Heartbeater
from knowledgeops.contracts.document_import import (
    CHUNK_DOCUMENT,
    DISCARD_VERSION,
    PARSE_DOCUMENT,
    PUBLISH_VERSION,
    ChunkingOptions,
    ChunkRequest,
    ChunkResult,
    DiscardResult,
    ParseRequest,
    ParseResult,
    PublishResult,
    VersionRequest,
)
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.errors import DocumentError, bad_input
from knowledgeops.files import chunk_store, file_store
from knowledgeops.files.chunk_store import sections_file
from knowledgeops.files.ocr_results import OcrResults
from knowledgeops.ingest.parse_runner import run_chunk, run_parse
from knowledgeops.ingest.parser_process import ParserLimits
from knowledgeops.runtime.resources import Resources


class ImportActivities:
    """Holds the process-wide resources (index client, embedding model) the activities share."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings
        self.catalogue = DocumentCatalogue(resources.db)
        # Small documents' parse and chunk steps run as local activities, outside the parse
        # queue's capacity: they share one parser of their own (the express parser), so a
        # one-page upload never waits for a big file's parse and never adds more than one.
        self._express_parser = asyncio.Semaphore(1)

    def _parser_slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The express parser for a local activity; a queued one already holds a parser slot
        (its queue's worker runs PARSER_CONCURRENCY at once)."""
        return self._express_parser if activity.info().is_local else contextlib.nullcontext()

    def _limits(self) -> ParserLimits:
        return ParserLimits(
            cpu_seconds=self.settings.parser_cpu_seconds,
            wall_seconds=self.settings.parser_wall_seconds,
            max_characters=self.settings.max_document_characters,
        )

    @activity.defn(name=PARSE_DOCUMENT.name)
    async def parse_document(self, req: ParseRequest) -> ParseResult:
        try:
            path = file_store.path_for(self.settings.files_dir, req.file_id)
        except ValueError as e:
            raise bad_input("InvalidFileId", str(e)) from None
        # From the store, when another machine took the upload (STORAGE_URL).
        if not await self.resources.files.fetch(path):
            raise bad_input(
                "FileNotFound",
                f"stored file {req.file_id} does not exist in {self.resources.files.describe()}; "
                "upload it again",
            )
        size = path.stat().st_size
        if size > self.settings.max_file_bytes:
            raise bad_input(
                "FileTooLarge",
                f"{req.filename or req.file_id} is {size} bytes; the limit is "
                f"{self.settings.max_file_bytes} (MAX_FILE_BYTES)",
            )
        sections = sections_file(self.settings.chunks_dir, req.document_id, req.version)
        try:
            async with self._parser_slot(), Heartbeater():
                parsed = await run_parse(
                    path,
                    req.filename or path.name,
                    req.document_id,
                    sections,
                    self.settings.parser_memory_mb,
                    self._limits(),
                )
        except DocumentError as e:
            raise bad_input(e.kind, e.message) from None
        async with Heartbeater():  # the parser's slot is free again meanwhile
            # The chunk step may run on another machine.
            await self.resources.files.send(sections)
        return parsed

    @activity.defn(name=CHUNK_DOCUMENT.name)
    async def chunk_document(self, req: ChunkRequest) -> ChunkResult:
        chunks_dir, files = self.settings.chunks_dir, self.resources.files
        if await files.has_version(req.document_id, req.version):
            # Chunked by an earlier attempt that died before reporting: same input, same chunks
            # (counted from the offset index's size: nothing to read or download).
            index_size = await files.size(files.version_paths(req.document_id, req.version)[1])
            return ChunkResult(total_chunks=chunk_store.chunk_count(index_size or 0))
        sections = sections_file(chunks_dir, req.document_id, req.version)
        if not await files.fetch(sections):
            raise bad_input(
                "SectionsMissing",
                f"the parsed text of {req.document_id} version {req.version} is gone (removed "
                "by a delete or a cleanup); import the document again",
            )
        if req.ocr_file_id and files.shared:
            # Recognised pages are read into the chunks (OCR may have run on another machine).
            ocr = OcrResults(self.settings.ocr_dir)
            missing = await files.fetch_all(ocr.path(req.ocr_file_id, p) for p in req.ocr_pages)
            if missing:  # retryable: the same version must get the same chunks
                raise RuntimeError(
                    f"{len(missing)} recognised pages of {req.ocr_file_id} are not in "
                    f"{files.describe()} (first: {missing[0].name})"
                )
        try:
            async with self._parser_slot(), Heartbeater():
                total = await run_chunk(
                    sections,
                    req.document_id,
                    req.document_id,
                    req.version,
                    chunks_dir,
                    req.chunking or await self._live_chunking(),
                    req.format == "md",
                    self.settings.parser_memory_mb,
                    self._limits(),
                    self.settings.max_document_chunks,
                    (self.settings.ocr_dir, req.ocr_file_id, req.ocr_pages)
                    if req.ocr_file_id
                    else None,
                )
        except DocumentError as e:
            raise bad_input(e.kind, e.message) from None
        async with Heartbeater():
            await files.send_version(req.document_id, req.version)
            if self.resources.index is None:
                # A parse worker: the index's owner reads them (from the store), not this one.
                await files.drop_copies(
                    *files.version_paths(req.document_id, req.version), sections
                )
        return ChunkResult(total_chunks=total)

    async def _live_chunking(self) -> ChunkingOptions:
        """The chunking a re-index chose for the live index, else CHUNK_TOKENS / _OVERLAP."""
        return (await self.resources.live_index()).chunking or ChunkingOptions(
            chunk_tokens=self.settings.chunk_tokens, overlap_tokens=self.settings.chunk_overlap
        )

    @activity.defn(name=PUBLISH_VERSION.name)
    async def publish_version(self, req: VersionRequest) -> PublishResult:
        """Search switches to this version's points; then its chunk files become the live ones
        (the previous version's are removed). How, `req.purpose` says (see VersionPurpose)."""
        data, doc = self.resources.files, req.document_id
        versions = self.resources.live_versions
        async with Heartbeater():
            live = (await self.resources.live_index()).collection
            collection = req.collection or live
            previous = await versions.get(doc)
            if req.purpose == "rebuild":
                assert req.source is not None  # checked by the request's validator
                if (previous or "") != req.source or await self.catalogue.get(doc) is None:
                    # Changed or deleted while it was rebuilt: this rebuild is stale (a
                    # concurrent import publishes its own version; a delete must not be undone).
                    await self.resources.store.discard_version(
                        collection, doc, req.version, staged_only=False
                    )
                    if req.version != req.source:  # not the live version's own files
                        await data.discard(doc, req.version, previous)
                    return PublishResult(stale_removed=0, live=True)
                first = req.first_round
                # Its files once its collection is live, replacing only the version it was
                # built from: an import of the document may be writing its own meanwhile.
                files, previous_only = collection == live, True
            elif req.purpose == "import":
                # The only version the document ever had: no other can have points to delete.
                first = await data.only_version(doc, req.version, previous)
                files, previous_only = True, False
            else:  # "import_again": the new live index may hold a rebuild's version
                first, files, previous_only = False, True, False
            stale = await self.resources.store.publish(
                collection, doc, req.version, staged=req.staged, others=not first
            )
            if files:
                if previous != req.version:
                    if not await data.has_version(doc, req.version):
                        raise FileNotFoundError(f"no chunks stored for {doc} version {req.version}")
                    # The pointer moves in one row write; readers switch to the new files.
                    await versions.put(doc, req.version)
                await data.remove_other_versions(
                    doc,
                    req.version,
                    previous,
                    previous_only=previous_only,
                    # Known: no other version's files to look for (a scan of the whole chunk
                    # folder, 2 % of the worker's CPU at 2,000 documents).
                    only_version=first,
                )
            # Read again after the write: a switch during it must not go unnoticed.
            still_live = collection == (await self.resources.live_index()).collection
        return PublishResult(stale_removed=stale, live=still_live)

    @activity.defn(name=DISCARD_VERSION.name)
    async def discard_version(self, req: VersionRequest) -> DiscardResult:
        """What a failed or cancelled import or rebuild wrote: its staged points, chunk and
        section files. The live version is never touched. The same for every purpose: whether
        the version was published and whether its collection is live say what goes."""
        async with Heartbeater():
            live = (await self.resources.live_index()).collection
            collection = req.collection or live
            # Never published (the live-version pointer is the last step of a publish),
            # or written into a collection that is not live (a re-index's build): points
            # written unstaged go too.
            live_version = await self.resources.live_versions.get(req.document_id)
            published = live_version == req.version
            n = await self.resources.store.discard_version(
                collection,
                req.document_id,
                req.version,
                staged_only=published and collection == live,
            )
            await self.resources.files.discard(req.document_id, req.version, live_version)
            # The import re-listed the document with its owner and tags before it failed:
            # the live version's points take them, so search filters as the catalogue says.
            row = await self.catalogue.get(req.document_id)
            if live_version is not None and row is not None:
                await self.resources.store.set_document_fields(
                    live, req.document_id, row.owner, row.tags or []
                )
        return DiscardResult(points_removed=n)
