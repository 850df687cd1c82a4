"""Activities of DOCUMENT_IMPORT: parse, embed + upsert, delete a document's points."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import file_store
from activities.embedding import Embedder
from activities.errors import DocumentError, EmbeddingRejectedError
from activities.heartbeat import Heartbeater
from activities.indexing import index_document
from activities.parse_runner import run_parse
from activities.vector_store import VectorStore
from knowledgeops.models import (
    DeleteDocumentRequest,
    EmbedCheckpoint,
    EmbedRequest,
    EmbedResult,
    ParseRequest,
    ParseResult,
)
from knowledgeops.settings import Settings


def _bad_input(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


class ImportActivities:
    """Holds the process-wide resources (index client, embedding model) the activities share."""

    def __init__(self, settings: Settings, store: VectorStore, embedder: Embedder) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder

    @activity.defn(name="parse_document")
    async def parse_document(self, req: ParseRequest) -> ParseResult:
        try:
            path = file_store.path_for(self.settings.files_dir, req.file_id)
        except ValueError as e:
            raise _bad_input("InvalidFileId", str(e)) from None
        if not path.is_file():
            raise _bad_input(
                "FileNotFound",
                f"stored file {req.file_id} does not exist in {self.settings.files_dir}; "
                "upload it again",
            )
        size = path.stat().st_size
        if size > self.settings.max_file_bytes:
            raise _bad_input(
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
                )
        except DocumentError as e:
            raise _bad_input(e.kind, e.message) from None

    @activity.defn(name="embed_and_upsert")
    async def embed_and_upsert(self, req: EmbedRequest) -> EmbedResult:
        info = activity.info()
        checkpoint = EmbedCheckpoint(next_index=0, total=req.total_chunks)
        if info.heartbeat_details:
            # Heartbeat details come back as plain dicts: validate before trusting them.
            try:
                checkpoint = EmbedCheckpoint.model_validate(info.heartbeat_details[0])
            except ValidationError as e:
                activity.logger.warning("ignoring invalid checkpoint, starting over: %s", e)
            if checkpoint.total != req.total_chunks or checkpoint.next_index > req.total_chunks:
                checkpoint = EmbedCheckpoint(next_index=0, total=req.total_chunks)
        hb = Heartbeater(checkpoint.model_dump())

        async def on_wait() -> None:
            hb.beat()

        try:
            async with hb:
                return await index_document(
                    self.store,
                    self.embedder,
                    self.settings.chunks_dir,
                    req,
                    checkpoint,
                    lambda cp: hb.update(cp.model_dump()),
                    on_wait,
                )
        except EmbeddingRejectedError as e:
            raise _bad_input("EmbeddingRejected", str(e)) from None
        except FileNotFoundError as e:
            raise _bad_input("ChunksMissing", str(e)) from None

    @activity.defn(name="delete_document_points")
    async def delete_document_points(self, req: DeleteDocumentRequest) -> int:
        async with Heartbeater():
            collection = VectorStore.collection_name(self.embedder.model_id)
            return await self.store.delete_document(collection, req.document_id)

    def all(self) -> list[Callable[..., Any]]:
        return [self.parse_document, self.embed_and_upsert, self.delete_document_points]
