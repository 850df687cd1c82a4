"""FastAPI application factory."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from starter.http import admin, documents, reports, tasks
from starter.http.errors import error_response, install_error_handlers
from starter.http.runtime import Runtime, RuntimeDep

# Multipart framing on top of the file itself.
UPLOAD_OVERHEAD = 64 * 1024


class UploadLimit:
    """Refuse oversized uploads with 413 before FastAPI spools them: by Content-Length when
    given, and by counting the body as it streams in when it is not."""

    def __init__(self, app: ASGIApp, max_bytes: int, path: str = "/v1/documents") -> None:
        self.app = app
        self.max_bytes = max_bytes + UPLOAD_OVERHEAD
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and int(declared) > self.max_bytes:
            await self._reject(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._reject(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.max_bytes - UPLOAD_OVERHEAD
        response = error_response(
            413, "file_too_large", f"Uploads are limited to {limit} bytes (UPLOAD_MAX_BYTES)"
        )
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass


def create_app(runtime: Runtime) -> FastAPI:
    app = FastAPI(
        title="knowledgeops",
        version="0.1.0",
        description="Asynchronous task backbone of a knowledge-base app, on Temporal.",
    )
    app.state.runtime = runtime
    install_error_handlers(app)
    app.include_router(documents.router)
    app.include_router(tasks.router)
    app.include_router(admin.router)
    app.include_router(reports.router)
    limit = min(runtime.settings.upload_max_bytes, runtime.settings.max_file_bytes)
    app.add_middleware(UploadLimit, max_bytes=limit)

    @app.get("/healthz")
    async def healthz(rt: RuntimeDep) -> dict[str, str]:
        return {"status": "ok", "embedding_model": rt.embedder.model_id}

    return app
