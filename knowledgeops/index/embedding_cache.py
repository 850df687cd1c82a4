"""Embeddings by (model, content hash of the text): no text is embedded twice.

One Qdrant collection per model (`embeddings_<model>`), one point per distinct chunk text, its
id derived from the text's content hash. It lives in the same Qdrant as the index (embedded
local mode, or the server at QDRANT_URL), so every worker shares it and it survives restarts:
a retry, a crash resume, a re-import, an edited copy under another document id, the same
paragraph in another document and a re-index that keeps the model all find their vectors here.
The embed step writes it; the upsert step reads it, so vectors pass from one activity to the
next through storage, never through Temporal. The text itself is not stored here (it is in
the chunk store and in the index), only its hash and vector.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.models.embedding import slug

_CACHE_NAMESPACE = uuid.UUID("0c8f3f0e-4f7e-4a8e-8f4c-1d9b2a6c5e77")
CACHE_PREFIX = "embeddings_"


def cache_collection(model_id: str) -> str:
    return f"{CACHE_PREFIX}{slug(model_id)}"


def _id(content_hash: str) -> str:
    return str(uuid.uuid5(_CACHE_NAMESPACE, content_hash))


class EmbeddingCache:
    def __init__(self, store: VectorIndex, model_id: str) -> None:
        self._store = store
        self.collection = cache_collection(model_id)

    async def get(self, hashes: Sequence[str]) -> dict[str, list[float]]:
        """Content hash -> vector, for the hashes already embedded with this model."""
        by_id = {_id(h): h for h in hashes}
        found = await self._store.retrieve_vectors(self.collection, list(by_id))
        return {by_id[i]: v for i, v in found.items()}

    async def present(self, hashes: Sequence[str]) -> set[str]:
        """The hashes already embedded with this model (their vectors are not read)."""
        by_id = {_id(h): h for h in hashes}
        return {by_id[i] for i in await self._store.existing_ids(self.collection, list(by_id))}

    async def put(self, hashes: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        await self._store.upsert_vectors(
            self.collection, [_id(h) for h in hashes], vectors, [{"h": h} for h in hashes]
        )
