"""Semantic search over imported documents (the query path)."""

from __future__ import annotations

from pydantic import BaseModel

from knowledgeops.embedding import Embedder
from knowledgeops.stores.catalogue import DocumentCatalogue
from knowledgeops.stores.database import Database
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


async def search(
    store: VectorStore,
    embedder: Embedder,
    query: str,
    k: int = 5,
    document_id: str | None = None,
    db: Database | None = None,
) -> list[SearchHit]:
    """Nearest chunks; titles and file names come from the document catalogue when given."""
    if not query.strip():
        raise ValueError("The search query is empty")
    [vector] = await embedder.embed([query])
    collection = VectorStore.collection_name(embedder.model_id)
    hits = await store.search(collection, vector, k, document_id)
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
