"""HTTP API (FastAPI). Served by the process that owns the index: `knowledgeops dev` / worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Query, Request

from activities.embedding import Embedder
from activities.vector_store import VectorStore
from knowledgeops.settings import Settings
from starter.search import SearchHit, search


@dataclass
class Runtime:
    settings: Settings
    store: VectorStore
    embedder: Embedder


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def create_app(runtime: Runtime) -> FastAPI:
    app = FastAPI(title="knowledgeops", version="0.1.0")
    app.state.runtime = runtime

    @app.get("/healthz")
    async def healthz(rt: RuntimeDep) -> dict[str, str]:
        return {"status": "ok", "embedding_model": rt.embedder.model_id}

    @app.get("/v1/search")
    async def search_documents(
        rt: RuntimeDep,
        q: Annotated[str, Query(min_length=1, max_length=2000)],
        k: Annotated[int, Query(ge=1, le=100)] = 5,
        document_id: str | None = None,
    ) -> list[SearchHit]:
        try:
            return await search(rt.store, rt.embedder, q, k, document_id)
        except ValueError as e:
            raise HTTPException(status_code=400, detail=str(e)) from None

    return app
