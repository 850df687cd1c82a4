"""Activities of DOCUMENT_IMPORT: parse, embed + upsert, delete a document's points."""

from __future__ import annotations

from temporalio import activity

from activities.ingest.indexing import index_document
from activities.ingest.parse_runner import run_parse
from activities.ingest.parser_process import ParserLimits
from activities.support import Heartbeater, bad_input, resume_from
from knowledgeops.contracts.document_import import (
    DELETE_DOCUMENT_POINTS,
    EMBED_AND_UPSERT,
    PARSE_DOCUMENT,
    DeleteDocumentRequest,
    EmbedCheckpoint,
    EmbedRequest,
    EmbedResult,
    ParseRequest,
    ParseResult,
)
from knowledgeops.errors import DocumentError, EmbeddingRejectedError
from knowledgeops.resources import Resources
from knowledgeops.stores import file_store


class ImportActivities:
    """Holds the process-wide resources (index client, embedding model) the activities share."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings

    @activity.defn(name=PARSE_DOCUMENT.name)
    async def parse_document(self, req: ParseRequest) -> ParseResult:
        try:
            path = file_store.path_for(self.settings.files_dir, req.file_id)
        except ValueError as e:
            raise bad_input("InvalidFileId", str(e)) from None
        if not path.is_file():
            raise bad_input(
                "FileNotFound",
                f"stored file {req.file_id} does not exist; upload it again",
            )
        size = path.stat().st_size
        if size > self.settings.max_file_bytes:
            raise bad_input(
                "FileTooLarge",
                f"{req.filename or req.file_id} is {size} bytes; the limit is "
                f"{self.settings.max_file_bytes} (MAX_FILE_BYTES)",
            )
        try:
            async with Heartbeater():
                return await run_parse(
                    path,
                    req.filename or path.name,
                    req.document_id,
                    self.settings.chunks_dir,
                    req.chunking,
                    self.settings.parser_memory_mb,
                    ParserLimits(
                        cpu_seconds=self.settings.parser_cpu_seconds,
                        wall_seconds=self.settings.parser_wall_seconds,
                        max_chunks=self.settings.max_document_chunks,
                        max_characters=self.settings.max_document_characters,
                    ),
                )
        except DocumentError as e:
            raise bad_input(e.kind, e.message) from None

    @activity.defn(name=EMBED_AND_UPSERT.name)
    async def embed_and_upsert(self, req: EmbedRequest) -> EmbedResult:
        checkpoint = resume_from(
            EmbedCheckpoint(total=req.total_chunks),
            # A checkpoint of another parse of the document is worthless.
            lambda cp: cp.total == req.total_chunks and cp.done <= req.total_chunks,
        )
        hb = Heartbeater(checkpoint.model_dump())

        async def on_wait() -> None:
            hb.beat()

        try:
            async with hb:
                return await index_document(
                    self.resources.store,
                    self.resources.embedder,
                    self.settings.chunks_dir,
                    req,
                    checkpoint,
                    lambda cp: hb.update(cp.model_dump()),
                    on_wait,
                )
        except EmbeddingRejectedError as e:
            raise bad_input("EmbeddingRejected", str(e)) from None
        except FileNotFoundError as e:
            raise bad_input("ChunksMissing", str(e)) from None

    @activity.defn(name=DELETE_DOCUMENT_POINTS.name)
    async def delete_document_points(self, req: DeleteDocumentRequest) -> int:
        async with Heartbeater():
            return await self.resources.store.delete_document(
                self.resources.collection, req.document_id
            )
