"""DOCUMENT_BATCH_IMPORT's contract: many stored files imported as one task (a folder).

The submission's list of files is a *manifest* kept in storage (`batches/<manifest id>.jsonl`,
one `ManifestEntry` a line), never in Temporal: the workflow gets the manifest's id and its
length, and each group activity reads its own range of it. Every document stays a document
(its own catalogue row, status, chunks, points, version); the task is what an operator
follows and cancels. Nothing here carries document text: ids, counts, file names and error
messages only.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from knowledgeops.contracts.base import ActivityRef, Checkpoint
from knowledgeops.contracts.document_import import (
    DOCUMENT_ID_PATTERN,
    ChunkingOptions,
    DocumentMetadata,
)

MANIFEST_ID_PATTERN = r"^[0-9a-f]{64}$"
# Failures a batch lists by name (its progress and result); more are counted, not listed, and
# each failed document's own catalogue row keeps its reason either way.
MAX_LISTED_FAILURES = 1000


def import_task_name(document_id: str) -> str:
    """The one task id of a document's own imports (before the deployment prefix): the
    service starts them under it, and a batch starts a bigger file's import under it too."""
    return f"import-{document_id}"


class ManifestEntry(BaseModel):
    """One file of a submission (a line of the manifest)."""

    document_id: str = Field(pattern=DOCUMENT_ID_PATTERN)
    filename: str = Field(max_length=500)
    size: int = Field(ge=0)
    # Content hash + extension; for a refused file (`error`), the id it would have had.
    file_id: str
    # Refused when it was submitted (too large to store): the document fails with this.
    error: str | None = None


class BatchFailure(BaseModel):
    document_id: str
    filename: str
    error: str


class BatchState(BaseModel):
    """What a batch has done so far: its progress, and what a continued run starts from."""

    next: int = Field(default=0, ge=0)  # first manifest position not handed to a group yet
    imported: int = 0
    failed: int = 0
    embedded: int = 0
    reused: int = 0
    chunks: int = 0
    failures: list[BatchFailure] = Field(default_factory=list)


class DocumentBatchPayload(BaseModel):
    manifest_id: str = Field(pattern=MANIFEST_ID_PATTERN)
    total: int = Field(ge=0)
    # Every document of the submission gets these (a batch has no per-file title).
    metadata: DocumentMetadata = Field(default_factory=DocumentMetadata)
    chunking: ChunkingOptions | None = None
    embed_batch_size: int = Field(default=64, ge=1, le=2048)
    # Documents per group activity, and group activities running at once.
    group_size: int = Field(default=100, ge=1, le=1000)
    groups_at_once: int = Field(default=2, ge=1, le=16)
    # Files above this size are imported by their own DOCUMENT_IMPORT (a child task).
    small_bytes: int = Field(default=32 * 1024, ge=0)
    # Where a run continued as new picks up (None: from the start).
    resume: BatchState | None = None


class ImportGroupRequest(BaseModel):
    task_id: str  # the batch's: each document's catalogue row names it
    manifest_id: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    version: str
    metadata: DocumentMetadata = Field(default_factory=DocumentMetadata)
    chunking: ChunkingOptions | None = None
    embed_batch_size: int = Field(default=64, ge=1, le=2048)
    small_bytes: int = Field(ge=0)
    # For the progress a heartbeat shows: documents of the batch finished before this group.
    counted_before: int = 0
    batch_total: int = 0


class GroupCheckpoint(Checkpoint):
    """`done` / `total` in the batch's documents (for progress); `stage` is where the group
    is. A retry starts the group over: its chunk files are written again identically, the
    embedding cache holds what was embedded, and points are overwritten by their ids."""

    stage: str = "starting"


class DeferredDocument(BaseModel):
    """A document the group does not import itself (bigger than the small-document size, or a
    scan or an image that needs OCR): the batch starts its own DOCUMENT_IMPORT."""

    document_id: str
    file_id: str
    filename: str
    size: int
    # The Temporal priority its import starts at (by size, as the service's imports).
    priority: int


class ImportGroupResult(BaseModel):
    imported: int
    failures: list[BatchFailure]
    deferred: list[DeferredDocument]
    embedded: int
    reused: int
    chunks: int


class SettleBatchRequest(BaseModel):
    """A failed or cancelled batch's documents still `importing`: their unpublished versions
    are removed and their rows say how the batch ended."""

    task_id: str
    version: str
    status: str  # "failed" or "cancelled"
    error: str | None = None


class SettleBatchResult(BaseModel):
    documents: int


class DocumentBatchResult(BaseModel):
    total: int
    imported: int
    failed: int
    failures: list[BatchFailure]
    embedded: int
    reused: int
    chunks: int
    version: str


class BatchProgress(BaseModel):
    """The `batch_progress` query: where a running batch is."""

    total: int
    imported: int
    failed: int
    # Manifest positions handed to groups so far ([0, next)), and those still running.
    next: int = 0
    running_groups: list[tuple[int, int]]
    running_imports: int
    waiting_imports: int
    failures: list[BatchFailure]


# The workflow's query answering a BatchProgress.
BATCH_PROGRESS_QUERY = "batch_progress"

IMPORT_GROUP: ActivityRef[ImportGroupRequest, ImportGroupResult] = ActivityRef(
    "import_document_group", ImportGroupRequest, ImportGroupResult
)
SETTLE_BATCH: ActivityRef[SettleBatchRequest, SettleBatchResult] = ActivityRef(
    "settle_document_batch", SettleBatchRequest, SettleBatchResult
)
