"""What the index holds and answers, in the terms the rest of the code uses: point ids, hits,
exported points, a search's scope, and which kind of collection a name is."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from knowledgeops.files.chunk_store import Chunk, index_text_of
from knowledgeops.index.engine import Kind

_POINT_NAMESPACE = uuid.UUID("5b0a6f5e-8d1c-4a53-9a3e-6f1f0c2d7e11")
# Every index collection's name starts so (the embedding cache's `embeddings_` does not).
INDEX_PREFIX = "chunks_"


def point_id(document_id: str, chunk_index: int, version: str | None = None) -> str:
    key = f"{document_id}\x00{chunk_index}"
    if version is not None:
        key = f"{document_id}\x00{version}\x00{chunk_index}"
    return str(uuid.uuid5(_POINT_NAMESPACE, key))


def kind_of(collection: str) -> Kind:
    return Kind.CHUNKS if collection.startswith(INDEX_PREFIX) else Kind.VECTORS


@dataclass(frozen=True)
class Hit:
    score: float
    document_id: str
    chunk_index: int
    text: str
    page: int | None
    heading: str | None


@dataclass(frozen=True)
class StoredPoint:
    """A point as exported for a backup and imported by a restore: no embedding needed (the
    sparse vector is made again from the text)."""

    id: int | str
    vector: list[float]
    payload: dict[str, Any]


@dataclass(frozen=True)
class Scope:
    """Which documents a search looks in; None / empty: no restriction."""

    document_id: str | None = None
    document_ids: Sequence[str] | None = None
    owner: str | None = None
    tags: Sequence[str] = ()


def payload_text(payload: dict[str, Any]) -> str:
    return index_text_of(str(payload.get("text", "")), payload.get("context"))


@dataclass(frozen=True)
class PointFields:
    """What every point of one version of a document carries besides its chunk."""

    document_id: str
    version: str | None = None
    staged: bool = False
    owner: str | None = None
    tags: tuple[str, ...] = ()

    def payload(self, c: Chunk) -> dict[str, Any]:
        p: dict[str, Any] = {
            "document_id": self.document_id,
            "chunk_index": c.index,
            "text": c.text,
            "page": c.page,
            "heading": c.heading,
            "h": c.content_hash,
            "tags": sorted(set(self.tags)),
        }
        if c.context:
            p["context"] = c.context
        if self.version is not None:
            p["version"] = self.version
        if self.staged:
            p["staged"] = True
        if self.owner is not None:
            p["owner"] = self.owner
        return p
