"""Search over imported documents (the query path): hybrid, dense or keyword."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from knowledgeops.contracts.search import SearchMode
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.db.database import Database
from knowledgeops.index.live import nearest
from knowledgeops.index.points import Scope
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.models.embedding import Embedder
from knowledgeops.models.rerank import Reranker


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

    @property
    def reranker(self) -> Reranker | None: ...


# Control characters other than tab and newlines are no part of a question; refusing them keeps
# a pasted binary blob from becoming a "query".
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
MAX_QUERY_CHARACTERS = 2000


def check_query(query: str) -> str:
    """The query to search for, or ValueError saying what is wrong with it."""
    if not query.strip():
        raise ValueError("The search query is empty")
    if len(query) > MAX_QUERY_CHARACTERS:
        raise ValueError(
            f"The search query has {len(query)} characters; the limit is {MAX_QUERY_CHARACTERS}"
        )
    if _CONTROL.search(query):
        raise ValueError("The search query contains control characters; send plain text")
    return query.strip()


async def search(
    store: VectorIndex,
    embedder: Embedder | EmbedderSource,
    query: str,
    k: int = 5,
    document_id: str | None = None,
    db: Database | None = None,
    *,
    mode: SearchMode = SearchMode.HYBRID,
    owner: str | None = None,
    tags: Sequence[str] = (),
    document_ids: Sequence[str] = (),
) -> list[SearchHit]:
    """The k best chunks, among the documents of `owner` with all of `tags` and (when given)
    among `document_ids`, all conditions of the engine's query (points carry owner and tags),
    so a scoped search still returns k hits. Titles and file names come from the catalogue."""
    query = check_query(query)
    scope = Scope(
        document_id=document_id,
        document_ids=list(document_ids) if document_ids else None,
        owner=owner,
        tags=tuple(tags),
    )
    embedder_for: Callable[[str], Embedder]
    reranker = None
    if isinstance(embedder, EmbedderSource):
        embedder_for, default_model = embedder.embedder_for, embedder.embedder.model_id
        reranker = embedder.reranker
    else:
        embedder_for, default_model = _only(embedder), embedder.model_id
    hits = await nearest(
        store, embedder_for, default_model, query, k, scope, mode=mode, reranker=reranker
    )
    labels: dict[str, tuple[str | None, str]] = {}
    if db is not None and hits:
        labels = await DocumentCatalogue(db).labels({h.document_id for h in hits})
    out = []
    for h in hits:
        title, filename = labels.get(h.document_id, (None, None))
        out.append(
            SearchHit(
                score=round(h.score, 4),
                document_id=h.document_id,
                chunk_index=h.chunk_index,
                title=title,
                filename=filename,
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
