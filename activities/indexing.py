"""The embed and upsert steps (DOCUMENT_IMPORT, EMBEDDING_GENERATE, INDEXING_UPSERT run them)
and the document listing EMBEDDING_GENERATE and INDEXING_UPSERT page through."""

from __future__ import annotations

from typing import TypeVar

from temporalio import activity

from activities.support import Heartbeater, resume_from
from knowledgeops.contracts.document_import import (
    EMBED_CHUNKS,
    UPSERT_CHUNKS,
    EmbedCheckpoint,
    EmbedRequest,
    EmbedResult,
    UpsertCheckpoint,
    UpsertRequest,
    UpsertResult,
)
from knowledgeops.contracts.indexing import (
    LIST_INDEXED_DOCUMENTS,
    DocumentPage,
    ListDocumentsRequest,
)
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.db.sql import now
from knowledgeops.errors import EmbeddingRejectedError, bad_input
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.ingest.embed_upsert import (
    DocumentFields,
    VectorsMissingError,
    embed_chunks,
    upsert_chunks,
)
from knowledgeops.models.embedding import Embedder
from knowledgeops.runtime.resources import Resources

R = TypeVar("R", EmbedRequest, UpsertRequest)


class EmbedActivities:
    """The embed step (through the embedding cache) and the upsert step (cache to index)."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings
        self.catalogue = DocumentCatalogue(resources.db)

    def _embedder(self, model: str) -> Embedder:
        try:
            return self.resources.embedder_for(model)
        except ValueError as e:
            raise bad_input("UnknownModel", str(e)) from None

    async def _versioned(self, req: R) -> R:
        """A request for "the live version" (None: the embedding and indexing types) names it."""
        if req.version is not None:
            return req
        return req.model_copy(
            update={"version": await self.resources.live_versions.get(req.document_id)}
        )

    @activity.defn(name=EMBED_CHUNKS.name)
    async def embed_chunks(self, req: EmbedRequest) -> EmbedResult:
        req = await self._versioned(req)
        collection = ""
        model = req.model
        if model is None:
            # The live index's model, and its collection for the upsert step to write to.
            live = await self.resources.live_index()
            model, collection = live.model, live.collection
        embedder = self._embedder(model)
        checkpoint = resume_from(
            EmbedCheckpoint(done=req.start, total=0),
            lambda cp: cp.done >= req.start and (req.end is None or cp.done <= req.end),
        )
        hb = Heartbeater(checkpoint.model_dump())

        async def on_wait() -> None:
            hb.beat()

        try:
            async with hb:
                # From the store, when another machine chunked it (STORAGE_URL).
                await self.resources.files.fetch_version(req.document_id, req.version)
                out = await embed_chunks(
                    self.resources.store,
                    embedder,
                    self.settings.chunks_dir,
                    req,
                    checkpoint,
                    lambda cp: hb.update(cp.model_dump()),
                    on_wait,
                )
                return out.model_copy(update={"collection": collection})
        except EmbeddingRejectedError as e:
            raise bad_input("EmbeddingRejected", str(e)) from None
        except FileNotFoundError as e:
            await self._still_stored(req.document_id, req.version)
            raise bad_input("ChunksMissing", str(e)) from None

    @activity.defn(name=UPSERT_CHUNKS.name)
    async def upsert_chunks(self, req: UpsertRequest) -> UpsertResult:
        req = await self._versioned(req)
        live = await self.resources.live_index()
        model = req.model or live.model
        # A named model's vectors go to the live collection only if it is that model's.
        collection = req.collection or (
            live.collection if model == live.model else VectorIndex.collection_name(model)
        )
        # Staged only where something of the document is searchable already: otherwise (a
        # first import, a re-index's build) staging would only cost a second write of every
        # point at publish, and discard
        # removes unstaged points of an unpublished version all the same.
        staged = (
            req.staged
            and collection == live.collection
            and await self.resources.live_versions.get(req.document_id) is not None
        )
        checkpoint = resume_from(UpsertCheckpoint(total=0))
        hb = Heartbeater(checkpoint.model_dump())
        # The import listed (or re-listed) the document before its first step, so its row
        # holds the owner and tags this version's points must carry.
        row = await self.catalogue.get(req.document_id)
        fields = DocumentFields(row.owner, tuple(row.tags or ())) if row else DocumentFields()
        try:
            async with hb:
                await self.resources.files.fetch_version(req.document_id, req.version)
                return await upsert_chunks(
                    self.resources.store,
                    model,
                    self.settings.chunks_dir,
                    req.model_copy(update={"collection": collection, "staged": staged}),
                    checkpoint,
                    lambda cp: hb.update(cp.model_dump()),
                    fields,
                )
        except (FileNotFoundError, VectorsMissingError) as e:
            if isinstance(e, FileNotFoundError):
                await self._still_stored(req.document_id, req.version)
            raise bad_input(type(e).__name__.removesuffix("Error"), str(e)) from None

    async def _still_stored(self, document_id: str, version: str | None) -> None:
        """A version's chunk files that went missing here while the store has them: this
        machine's copy was trimmed as it was opened (STORAGE_URL). A retryable error, so the
        next attempt fetches them again."""
        files = self.resources.files
        if files.shared and version is not None and await files.has_version(document_id, version):
            raise RuntimeError(
                f"the working copy of {document_id} version {version} was removed as it was "
                "read; the retry fetches it again"
            )


class DocumentListActivities:
    def __init__(self, resources: Resources) -> None:
        self.catalogue = DocumentCatalogue(resources.db)

    @activity.defn(name=LIST_INDEXED_DOCUMENTS.name)
    async def list_indexed_documents(self, req: ListDocumentsRequest) -> DocumentPage:
        as_of = now()
        ids, total = await self.catalogue.indexed_ids(req.after, req.limit)
        return DocumentPage(document_ids=ids, total=total, as_of=as_of)
