"""DOCUMENT_IMPORT's contract: payload, activity requests / results / checkpoint, result.

Everything here is small by construction: files travel as ids in the storage directory, chunks
as a document id plus an index range. Never put document text into these models.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from knowledgeops.contracts.base import ActivityRef, Checkpoint

DOCUMENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"


class DocumentMetadata(BaseModel):
    title: str | None = Field(default=None, max_length=500)
    tags: list[str] = Field(default_factory=list, max_length=50)
    owner: str | None = Field(default=None, max_length=200)


class ChunkingOptions(BaseModel):
    chunk_tokens: int = Field(default=512, ge=16, le=8000)
    overlap_tokens: int = Field(default=64, ge=0)


class DocumentImportPayload(BaseModel):
    """Input of DOCUMENT_IMPORT: a stored file, never its bytes."""

    file_id: str = Field(pattern=r"^[0-9a-f]{64}(\.[a-z0-9]{1,10})?$")
    document_id: str = Field(pattern=DOCUMENT_ID_PATTERN)
    filename: str = Field(default="", max_length=500)
    metadata: DocumentMetadata = Field(default_factory=DocumentMetadata)
    chunking: ChunkingOptions = Field(default_factory=ChunkingOptions)
    embed_batch_size: int = Field(default=64, ge=1, le=2048)


class ParseRequest(BaseModel):
    file_id: str
    document_id: str
    filename: str = ""
    chunking: ChunkingOptions = Field(default_factory=ChunkingOptions)


class ParseResult(BaseModel):
    document_id: str
    format: str
    total_chunks: int
    pages: int | None = None
    title: str | None = None
    characters: int = 0


class EmbedRequest(BaseModel):
    document_id: str
    total_chunks: int
    batch_size: int


class EmbedCheckpoint(Checkpoint):
    """Heartbeat details of the embed activity; a retry resumes at chunk index `done`."""

    embedded: int = Field(default=0, ge=0)
    reused: int = Field(default=0, ge=0)


class EmbedResult(BaseModel):
    total: int
    # Chunks embedded by this activity (all attempts); `reused` were already in the index.
    embedded: int
    reused: int
    stale_removed: int = 0


class DeleteDocumentRequest(BaseModel):
    document_id: str


class DocumentImportResult(BaseModel):
    document_id: str
    format: str
    total_chunks: int
    embedded: int
    reused: int
    stale_removed: int
    pages: int | None = None
    title: str | None = None


PARSE_DOCUMENT: ActivityRef[ParseRequest, ParseResult] = ActivityRef(
    "parse_document", ParseRequest, ParseResult
)
EMBED_AND_UPSERT: ActivityRef[EmbedRequest, EmbedResult] = ActivityRef(
    "embed_and_upsert", EmbedRequest, EmbedResult
)
DELETE_DOCUMENT_POINTS: ActivityRef[DeleteDocumentRequest, int] = ActivityRef(
    "delete_document_points", DeleteDocumentRequest, int
)
