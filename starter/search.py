"""Semantic search over imported documents (the query path)."""

from __future__ import annotations

from pydantic import BaseModel

from activities.embedding import Embedder
from activities.vector_store import VectorStore


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
) -> list[SearchHit]:
    if not query.strip():
        raise ValueError("The search query is empty")
    [vector] = await embedder.embed([query])
    collection = VectorStore.collection_name(embedder.model_id)
    hits = await store.search(collection, vector, k, document_id)
    return [
        SearchHit(
            score=round(h.score, 4),
            document_id=h.document_id,
            chunk_index=h.chunk_index,
            title=h.title,
            filename=h.filename,
            page=h.page,
            heading=h.heading,
            text=h.text,
        )
        for h in hits
    ]
