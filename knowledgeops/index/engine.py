"""What an index engine must do, in the engine-neutral terms the rest of the index speaks.

Two engines implement it: Qdrant Edge embedded in the process (`edge.py`, the default) and a
Qdrant server through qdrant-client (`server.py`, with QDRANT_URL). `VectorIndex` builds
everything else (versions, publish, search modes, backups) on these primitives, so the two
behave alike by construction and one contract test suite covers both.

Two kinds of collection: `CHUNKS` (an index of chunks: an unnamed dense vector, a BM25 sparse
vector, payload indexes on what search and maintenance filter by) and `VECTORS` (the embedding
cache: an unnamed dense vector looked up by id, never searched, so never indexed).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PointId = str
# The sparse vector's name (the dense one is unnamed, as in every collection made before
# sparse vectors existed, so those stay readable).
SPARSE = "bm25"


class Kind(enum.StrEnum):
    CHUNKS = "chunks"
    VECTORS = "vectors"


# Payload fields with an index in a chunks collection, and their type.
INDEXED_FIELDS: dict[str, str] = {
    "document_id": "keyword",
    "version": "keyword",
    "staged": "bool",
    "owner": "keyword",
    "tags": "keyword",
    "chunk_index": "integer",
}


@dataclass(frozen=True)
class Sparse:
    indices: list[int]
    values: list[float]


@dataclass(frozen=True)
class EnginePoint:
    id: PointId
    dense: list[float]
    payload: dict[str, Any]
    sparse: Sparse | None = None


@dataclass(frozen=True)
class Record:
    id: PointId
    payload: dict[str, Any]
    dense: list[float] | None = None


@dataclass(frozen=True)
class Scored:
    id: PointId
    score: float


@dataclass(frozen=True)
class PointFilter:
    """A conjunction over the indexed payload fields; None / empty: no condition.

    `staged`: True only staged points, False only searchable ones (points never staged have
    no `staged` field and count as searchable). `tags`: the point carries every one of them.
    `versions`: one of them; `not_version`: any other version (or none)."""

    document_id: str | None = None
    document_ids: Sequence[str] | None = None
    versions: Sequence[str] | None = None
    not_version: str | None = None
    staged: bool | None = None
    owner: str | None = None
    tags: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True)
class QuerySpec:
    """One ranked list: nearest by the dense vector, or by the sparse one (BM25)."""

    limit: int
    dense: list[float] | None = None
    sparse: Sparse | None = None


class IndexLockedError(RuntimeError):
    """The embedded index is held by another process."""


class IndexOutdatedError(RuntimeError):
    """A collection lacks what the operation needs (made by an earlier version)."""


class Engine(ABC):
    """Engine primitives. Blocking; `VectorIndex` calls them on its threads."""

    local: bool

    @abstractmethod
    def collections(self) -> list[str]: ...

    @abstractmethod
    def exists(self, name: str) -> bool: ...

    @abstractmethod
    def create(
        self, name: str, kind: Kind, dimension: int, metadata: dict[str, Any] | None = None
    ) -> None:
        """Create the collection if absent, with `metadata` (an existing one is left as it is,
        metadata included)."""

    @abstractmethod
    def drop(self, name: str) -> bool: ...

    @abstractmethod
    def dimension(self, name: str) -> int: ...

    @abstractmethod
    def has_sparse(self, name: str) -> bool: ...

    @abstractmethod
    def metadata(self, name: str) -> dict[str, Any]: ...

    @abstractmethod
    def set_metadata(self, name: str, metadata: dict[str, Any]) -> None:
        """Replace the collection's metadata."""

    @abstractmethod
    def alias(self, alias: str) -> str | None: ...

    @abstractmethod
    def set_alias(self, alias: str, collection: str | None) -> None:
        """Point `alias` at `collection` in one step (None: remove it)."""

    def aliased(self, alias: str) -> tuple[str, dict[str, Any]] | None:
        """The existing collection `alias` names, and its metadata."""
        target = self.alias(alias)
        if target is None or not self.exists(target):
            return None
        return target, self.metadata(target)

    @abstractmethod
    def upsert(self, name: str, points: Sequence[EnginePoint]) -> None: ...

    @abstractmethod
    def retrieve(
        self, name: str, ids: Sequence[PointId], *, payload: bool, dense: bool
    ) -> list[Record]: ...

    @abstractmethod
    def count(self, name: str, flt: PointFilter | None) -> int: ...

    @abstractmethod
    def delete(self, name: str, flt: PointFilter) -> None: ...

    @abstractmethod
    def set_payload(self, name: str, flt: PointFilter, payload: dict[str, Any]) -> None: ...

    @abstractmethod
    def delete_payload(self, name: str, flt: PointFilter, keys: Sequence[str]) -> None: ...

    @abstractmethod
    def scroll(
        self,
        name: str,
        offset: PointId | None,
        limit: int,
        *,
        fields: Sequence[str] | None,
        dense: bool,
    ) -> tuple[list[Record], PointId | None]:
        """One page in id order; `fields` None: the whole payload."""

    @abstractmethod
    def query(
        self, name: str, specs: Sequence[QuerySpec], flt: PointFilter | None
    ) -> list[list[Scored]]:
        """Several ranked lists under one filter, in one engine call where it has one."""

    @abstractmethod
    def close(self) -> None: ...

    def has_room(self, collection: str, key: str | None) -> bool:
        """Whether a bulk write of the document `key` (None: of documents anywhere in the
        collection) should go ahead now (engines that build indexes in the background say no
        while the build is too far behind)."""
        return True

    def unindexed(self) -> dict[str, int]:
        """Chunks collections' points not yet in a vector index (engines that build indexes
        in the background report them; a server does its own)."""
        return {}
