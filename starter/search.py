"""Semantic search over imported documents (the query path)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from knowledgeops.embedding import Embedder
from knowledgeops.stores.catalogue import DocumentCatalogue
from knowledgeops.stores.database import Database
from knowledgeops.stores.live_index import nearest
from knowledgeops.stores.vector_store import VectorStore


class SearchHit(BaseModel):
    score: float
    document_id: str
    chunk_index: int
    title: str | None = None
    filename: str | None = None
    page: int | None = None
    heading: str | None = None
    text: str


@runtime_checkable
class EmbedderSource(Protocol):
    """Embedders by model id (the process's Resources): search embeds the query with the
    live index's model, whichever that is."""

    @property
    def embedder(self) -> Embedder: ...

    def embedder_for(self, model: str | None) -> Embedder: ...


async def search(
    store: VectorStore,
    embedder: Embedder | EmbedderSource,
    query: str,
    k: int = 5,
    document_id: str | None = None,
    db: Database | None = None,
    *,
    owner: str | None = None,
    tags: Sequence[str] = (),
    document_ids: Sequence[str] = (),
) -> list[SearchHit]:
    """Nearest chunks, among the documents of `owner` with all of `tags` and (when given)
    among `document_ids`; titles and file names come from the document catalogue."""
    if not query.strip():
        raise ValueError("The search query is empty")
    among: list[str] | None = list(document_ids) if document_ids else None
    if owner or tags:
        if db is None:
            raise ValueError("Searching by owner or tags needs the document catalogue")
        # The allowed documents go into the vector query itself, so a scoped search still
        # returns k hits (dropping other documents' hits afterwards would return fewer).
        among = await DocumentCatalogue(db).matching_ids(
            owner=owner, tags=tags, document_ids=document_ids
        )
    if among is not None and not among:
        return []
    embedder_for: Callable[[str], Embedder]
    if isinstance(embedder, EmbedderSource):
        embedder_for, default_model = embedder.embedder_for, embedder.embedder.model_id
    else:
        embedder_for, default_model = _only(embedder), embedder.model_id
    hits = await nearest(
        store, embedder_for, default_model, query, k, document_id, document_ids=among
    )
    docs = await DocumentCatalogue(db).by_id({h.document_id for h in hits}) if db and hits else {}
    out = []
    for h in hits:
        doc = docs.get(h.document_id)
        out.append(
            SearchHit(
                score=round(h.score, 4),
                document_id=h.document_id,
                chunk_index=h.chunk_index,
                title=doc.title if doc else None,
                filename=doc.filename if doc else None,
                page=h.page,
                heading=h.heading,
                text=h.text,
            )
        )
    return out


def _only(embedder: Embedder) -> Callable[[str], Embedder]:
    """One embedder: it can embed queries only for an index built with its own model."""

    def embedder_for(model: str) -> Embedder:
        if model != embedder.model_id:
            raise ValueError(
                f"the live index was built with {model}; this process embeds with "
                f"{embedder.model_id}: search through the worker's API"
            )
        return embedder

    return embedder_for
