"""EMBEDDING_GENERATE and INDEXING_UPSERT: the import's embed and upsert steps as task types.

EMBEDDING_GENERATE embeds a stored document's chunks (a range of them, or every document's)
with a named model into the embedding cache; INDEXING_UPSERT writes stored chunks with their
cached vectors into a named collection. Both run the very activities DOCUMENT_IMPORT runs
(EMBED_CHUNKS, UPSERT_CHUNKS), so they resume from the same checkpoints and never pay twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from knowledgeops.contracts.base import ActivityRef
from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN, ChunkingOptions

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


class ReindexOptions(BaseModel):
    """Rebuild every document into a new collection, then switch the live index to it."""

    chunk_tokens: int | None = Field(
        default=None,
        ge=64,
        le=8000,
        description="split every document again with this many tokens per chunk; default: "
        "keep the chunks (only the vectors are made again)",
    )
    concurrency: int = Field(default=4, ge=1, le=32, description="documents rebuilt at once")
    grace_seconds: int = Field(
        default=3600,
        ge=0,
        le=7 * 86400,
        description="how long the previous collection is kept after the switch",
    )


class RebuildTarget(BaseModel):
    """A re-index's child: rebuild one document into the re-index's collection."""

    collection: str = Field(pattern=COLLECTION_PATTERN)
    # Names the rebuilt version of a re-chunked document (`rebuilt_version`).
    tag: str = Field(pattern=r"^[a-z0-9]{1,32}$")
    chunking: ChunkingOptions | None = None
    # The build round (not a catch-up): the collection has nothing of the document yet.
    first: bool = False


class ReindexState(BaseModel):
    """Where a re-index is (carried when it continues as new)."""

    collection: str
    model: str
    # The live index when the re-index began: dropped after the grace period.
    previous: str
    tag: str
    phase: Literal["build", "catch_up"] = "build"
    # Catalogue changes at or after this time are rebuilt again (imports meanwhile).
    since: datetime | None = None
    done: int = 0
    points: int = 0
    # Rebuilds of documents an import changed during the re-index.
    rebuilt_again: int = 0
    # Documents whose rebuild failed (tried again in the next catch-up round).
    failed: list[str] = Field(default_factory=list)


class IndexingUpsertPayload(_Scope):
    collection: str | None = Field(
        default=None,
        pattern=COLLECTION_PATTERN,
        description="target collection; default: the live collection of the model",
    )
    batch_size: int = Field(default=256, ge=1, le=4096)
    reindex: ReindexOptions | None = Field(
        default=None,
        description="re-index: rebuild every document (with `model`, default the live "
        "index's) into a new collection, switch the live index to it, drop the old one "
        "after the grace period",
    )
    # Set by the workflow, not by callers: a re-index's child, and a re-index's state.
    rebuild: RebuildTarget | None = None
    state: ReindexState | None = None

    @model_validator(mode="after")
    def _modes(self) -> IndexingUpsertPayload:
        if self.reindex is not None and (self.document_id or self.collection):
            raise ValueError(
                "a re-index rebuilds every document into its own collection: "
                "give neither document_id nor collection"
            )
        if self.rebuild is not None and not self.document_id:
            raise ValueError("a rebuild needs a document_id")
        return self


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
    # A re-index: the collection search answered from before (dropped after the grace
    # period), rebuilds of documents imports changed meanwhile, and documents whose last
    # rebuild (after the switch) failed: re-import them.
    previous: str | None = None
    rebuilt_again: int = 0
    failed: list[str] = Field(default_factory=list)


class ListDocumentsRequest(BaseModel):
    after: str = ""
    limit: int = PAGE


class DocumentPage(BaseModel):
    document_ids: list[str]
    # Documents with a published version, in all (for progress).
    total: int
    # When the listing was read (a re-index rebuilds what changed after it).
    as_of: datetime | None = None
    # Where the next page starts, when the listing filters ids out (None: the last id).
    next_after: str | None = None


class ChangedDocumentsRequest(BaseModel):
    """Documents changed since `since` whose live version is not in the re-index's collection
    yet (neither rebuilt there nor published there by an import)."""

    since: datetime
    target: RebuildTarget
    after: str = ""
    limit: int = PAGE
    # Documents whose rebuild failed: listed again if they still exist.
    failed: list[str] = Field(default_factory=list, max_length=10_000)
    # After the switch: leave out documents being imported (their import writes into the new
    # live index by itself, going again if it had chosen the previous one).
    skip_importing: bool = False


class PrepareRebuildRequest(BaseModel):
    document_id: str
    target: RebuildTarget


class PrepareRebuildResult(BaseModel):
    # The version to rebuild from (its chunks), and the version the rebuild writes (the same
    # unless the document is split again).
    source: str
    version: str
    # Split again: parse the stored file into `version` first.
    rechunk: bool
    file_id: str = ""
    filename: str = ""
    owner: str | None = None


class PrepareReindexRequest(BaseModel):
    model: str | None = None
    tag: str


class PrepareReindexResult(BaseModel):
    model: str
    collection: str
    previous: str


class SwitchRequest(BaseModel):
    collection: str
    model: str
    chunking: ChunkingOptions | None = None


class AdoptRequest(BaseModel):
    tag: str
    after: str = ""
    limit: int = PAGE


class AdoptResult(BaseModel):
    adopted: int
    next_after: str | None


class SwitchResult(BaseModel):
    # The live index's collection before (the same on a retry of a done switch).
    before: str


class DropRequest(BaseModel):
    collection: str


class DropResult(BaseModel):
    dropped: bool


LIST_INDEXED_DOCUMENTS: ActivityRef[ListDocumentsRequest, DocumentPage] = ActivityRef(
    "list_indexed_documents", ListDocumentsRequest, DocumentPage
)
LIST_CHANGED_DOCUMENTS: ActivityRef[ChangedDocumentsRequest, DocumentPage] = ActivityRef(
    "list_changed_documents", ChangedDocumentsRequest, DocumentPage
)
PREPARE_REINDEX: ActivityRef[PrepareReindexRequest, PrepareReindexResult] = ActivityRef(
    "prepare_reindex", PrepareReindexRequest, PrepareReindexResult
)
PREPARE_REBUILD: ActivityRef[PrepareRebuildRequest, PrepareRebuildResult] = ActivityRef(
    "prepare_rebuild", PrepareRebuildRequest, PrepareRebuildResult
)
SWITCH_LIVE_INDEX: ActivityRef[SwitchRequest, SwitchResult] = ActivityRef(
    "switch_live_index", SwitchRequest, SwitchResult
)
ADOPT_REBUILT: ActivityRef[AdoptRequest, AdoptResult] = ActivityRef(
    "adopt_rebuilt", AdoptRequest, AdoptResult
)
DROP_INDEX: ActivityRef[DropRequest, DropResult] = ActivityRef(
    "drop_index", DropRequest, DropResult
)
