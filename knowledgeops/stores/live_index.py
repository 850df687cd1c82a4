"""Which index collection search answers from: the live index.

A Qdrant alias (`LIVE_ALIAS`) names the live collection, and that collection's metadata names
the embedding model (and the chunk size) its vectors were made with. A re-index builds a new
collection next to the live one and then moves the alias in one call, so search switches from
one complete index to the other with no moment in between. Before the first re-index there is
no alias: the live collection is the configured model's `chunks_<model>`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from qdrant_client import QdrantClient, models

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.embedding import Embedder, OnWait
from knowledgeops.stores.vector_store import Hit, VectorStore

LIVE_ALIAS = "chunks_live"
# Every index collection's name starts so (the embedding cache's `embeddings_` does not).
INDEX_PREFIX = "chunks_"
_UNALIAS = models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=LIVE_ALIAS))


@dataclass(frozen=True)
class LiveIndex:
    collection: str
    # The embedding model of its vectors: queries must be embedded with the same one.
    model: str
    # How its documents were split; None: the default chunking.
    chunking: ChunkingOptions | None = None


def _alias_target(client: QdrantClient) -> str | None:
    for a in client.get_aliases().aliases:
        if a.alias_name == LIVE_ALIAS:
            return str(a.collection_name)
    return None


async def aliased_index(store: VectorStore) -> tuple[str, dict[str, Any]] | None:
    """The collection the alias names and its metadata; None before the first re-index."""

    def read(client: QdrantClient) -> tuple[str, dict[str, Any]] | None:
        target = _alias_target(client)
        if target is None:
            return None
        return target, dict(client.get_collection(target).config.metadata or {})

    return await store.run_client(read)


async def live_index(store: VectorStore, default_model: str) -> LiveIndex:
    """The live index (read on every call: a switch is seen at once by every process)."""
    found = await aliased_index(store)
    if found is None:
        return LiveIndex(VectorStore.collection_name(default_model), default_model)
    return index_of(*found, default_model=default_model)


async def nearest(
    store: VectorStore,
    embedder_for: Callable[[str], Embedder],
    default_model: str,
    query: str,
    k: int,
    document_id: str | None = None,
    *,
    document_ids: Sequence[str] | None = None,
    on_wait: OnWait = None,
) -> list[Hit]:
    """The k chunks of the live index nearest to `query`, embedded with the live index's
    model (`embedder_for(model)`)."""
    live = await live_index(store, default_model)
    [vector] = await embedder_for(live.model).embed([query], on_wait)
    return await store.search(live.collection, vector, k, document_id, document_ids=document_ids)


def index_of(collection: str, meta: dict[str, Any], *, default_model: str = "") -> LiveIndex:
    """The live index a collection's metadata describes."""
    chunking = None
    if isinstance(meta.get("chunk_tokens"), int):
        chunking = ChunkingOptions.model_validate(
            {k: meta[k] for k in ("chunk_tokens", "overlap_tokens") if k in meta}
        )
    return LiveIndex(collection, str(meta.get("model") or default_model), chunking)


async def switch_live(store: VectorStore, index: LiveIndex, dimension: int) -> None:
    """Record the index's model and chunking on its collection, then point the alias at it
    (one aliases call: delete and create are applied together). Idempotent."""

    def swap(client: QdrantClient) -> None:
        if not client.collection_exists(index.collection):
            # A re-index of an empty corpus: an empty live collection.
            client.create_collection(
                index.collection,
                vectors_config=models.VectorParams(size=dimension, distance=models.Distance.COSINE),
            )
        meta: dict[str, object] = {"model": index.model}
        if index.chunking is not None:
            meta |= index.chunking.model_dump()
        client.update_collection(index.collection, metadata=meta)
        ops: list[models.AliasOperations] = []
        if _alias_target(client) is not None:
            ops.append(_UNALIAS)
        ops.append(
            models.CreateAliasOperation(
                create_alias=models.CreateAlias(
                    collection_name=index.collection, alias_name=LIVE_ALIAS
                )
            )
        )
        client.update_collection_aliases(change_aliases_operations=ops)

    await store.run_client(swap)


async def remove_alias(store: VectorStore) -> None:
    """Back to no alias (the configured model's collection is live): a restore of an archive
    made before any re-index."""

    def remove(client: QdrantClient) -> None:
        if _alias_target(client) is not None:
            client.update_collection_aliases(change_aliases_operations=[_UNALIAS])

    await store.run_client(remove)


async def index_collections(store: VectorStore) -> list[str]:
    """Every index collection: the live one, one being built, one in its grace period."""
    return [c for c in await store.collections() if c.startswith(INDEX_PREFIX)]


async def delete_document_everywhere(store: VectorStore, document_id: str) -> int:
    """Delete a document's points from every index collection, so a re-index running or
    finishing later cannot bring a deleted document back. Points deleted."""
    return sum(
        [await store.delete_document(c, document_id) for c in await index_collections(store)]
    )
