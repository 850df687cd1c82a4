"""Which index collection search answers from: the live index.

An alias (`LIVE_ALIAS`, an engine alias on both engines) names the live collection, and that
collection's metadata names the embedding model (and the chunk size) its vectors were made
with, and the tokenization of its keyword vectors (bm25.py). A re-index builds a new collection
next to the live one, with the current tokenization, and then moves the alias in one step, so
search switches from one complete index to the other with no moment in between. Before the
first re-index there is no alias: the live collection is the configured model's
`chunks_<model>`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.contracts.search import SearchMode
from knowledgeops.files.chunk_store import index_text_of
from knowledgeops.index.points import INDEX_PREFIX, Hit, Scope
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.models.embedding import Embedder, OnWait
from knowledgeops.models.rerank import Reranker, RerankError

log = logging.getLogger(__name__)
LIVE_ALIAS = "chunks_live"


@dataclass(frozen=True)
class LiveIndex:
    collection: str
    # The embedding model of its vectors: queries must be embedded with the same one.
    model: str
    # How its documents were split; None: the default chunking.
    chunking: ChunkingOptions | None = None


async def aliased_index(index: VectorIndex) -> tuple[str, dict[str, Any]] | None:
    """The collection the alias names and its metadata; None before the first re-index."""
    return await index.aliased(LIVE_ALIAS)


async def live_index(index: VectorIndex, default_model: str) -> LiveIndex:
    """The live index (read on every call: a switch is seen at once by every process)."""
    found = await aliased_index(index)
    if found is None:
        return LiveIndex(VectorIndex.collection_name(default_model), default_model)
    return index_of(*found, default_model=default_model)


def read_live_index(settings: Settings, default_model: str) -> LiveIndex:
    """The live index of the embedded index at INDEX_PATH, read from its files without opening
    it (another process owns it)."""
    from knowledgeops.index.edge_collection import read_alias

    found = read_alias(settings.index_path, LIVE_ALIAS)
    if found is None:
        return LiveIndex(VectorIndex.collection_name(default_model), default_model)
    return index_of(*found, default_model=default_model)


async def nearest(
    index: VectorIndex,
    embedder_for: Callable[[str], Embedder],
    default_model: str,
    query: str,
    k: int,
    scope: Scope | None = None,
    *,
    mode: SearchMode = SearchMode.HYBRID,
    on_wait: OnWait = None,
    reranker: Reranker | None = None,
) -> list[Hit]:
    """The k best chunks of the live index for `query` (embedded with the live index's model,
    `embedder_for(model)`, unless the mode is keyword only); with a reranker, the k it scores
    best among the index's first RERANK_CANDIDATES."""
    live = await live_index(index, default_model)
    vector = None
    if mode != SearchMode.KEYWORD:
        [vector] = await embedder_for(live.model).embed([query], on_wait)
    depth = max(k, reranker.candidates) if reranker is not None else k
    hits = await index.search(
        live.collection, depth, vector=vector, text=query, mode=mode, scope=scope
    )
    if reranker is None or not hits:
        return hits
    try:
        scores = await reranker.scores(query, [index_text_of(h.text, h.heading) for h in hits])
    except RerankError as e:
        # Search answers without reranking rather than not at all; the log says why.
        log.warning("search answered without reranking: %s", e.message)
        return hits[:k]
    order = sorted(range(len(hits)), key=lambda i: -scores[i])
    return [replace(hits[i], score=scores[i]) for i in order[:k]]


def index_of(collection: str, meta: dict[str, Any], *, default_model: str = "") -> LiveIndex:
    """The live index a collection's metadata describes."""
    chunking = None
    if isinstance(meta.get("chunk_tokens"), int):
        chunking = ChunkingOptions.model_validate(
            {k: meta[k] for k in ("chunk_tokens", "overlap_tokens") if k in meta}
        )
    return LiveIndex(collection, str(meta.get("model") or default_model), chunking)


# Where the index's owner shares the live index with workers that do not open the index (with
# STORAGE_URL; knowledgeops/runtime/resources.py).
LIVE_INDEX_KEY = "index/live.json"


def shared_live_index_record(live: LiveIndex) -> bytes:
    chunking = live.chunking.model_dump() if live.chunking else None
    return json.dumps(
        {"collection": live.collection, "model": live.model, "chunking": chunking}
    ).encode()


def shared_live_index(raw: bytes) -> LiveIndex:
    record = json.loads(raw)
    chunking = record.get("chunking")
    return LiveIndex(
        str(record["collection"]),
        str(record["model"]),
        ChunkingOptions.model_validate(chunking) if chunking else None,
    )


async def switch_live(index: VectorIndex, live: LiveIndex, dimension: int) -> None:
    """Record the index's model and chunking on its collection, then point the alias at it
    (one step: search answers from the old collection up to it, the new one after). Idempotent.
    The collection's keyword tokenization stays as it recorded when it was made (base.py)."""
    # A re-index of an empty corpus: an empty live collection.
    await index.ensure(live.collection, dimension)
    meta: dict[str, object] = {"model": live.model}
    if live.chunking is not None:
        meta |= live.chunking.model_dump()
    await index.set_metadata(live.collection, meta)
    await index.set_alias(LIVE_ALIAS, live.collection)


async def remove_alias(index: VectorIndex) -> None:
    """Back to no alias (the configured model's collection is live): a restore of an archive
    made before any re-index."""
    await index.set_alias(LIVE_ALIAS, None)


async def index_collections(index: VectorIndex) -> list[str]:
    """Every index collection: the live one, one being built, one in its grace period."""
    return [c for c in await index.collections() if c.startswith(INDEX_PREFIX)]


async def delete_document_everywhere(index: VectorIndex, document_id: str) -> int:
    """Delete a document's points from every index collection, so a re-index running or
    finishing later cannot bring a deleted document back. Points deleted."""
    return sum(
        [await index.delete_document(c, document_id) for c in await index_collections(index)]
    )
