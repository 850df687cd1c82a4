"""FastAPI application factory."""

from __future__ import annotations

import time

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from knowledgeops.observability import metrics
from starter.http import (
    admin,
    agent,
    cards,
    document_batches,
    documents,
    reports,
    tasks,
    webhooks,
)
from starter.http.access import BrowserGuard, CallerDep
from starter.http.errors import error_response, install_error_handlers, problem_responses
from starter.http.openapi import install_openapi
from starter.http.runtime import Runtime, RuntimeDep

# Multipart framing on top of the file itself.
UPLOAD_OVERHEAD = 64 * 1024


class RequestMetrics:
    """Counts and times every request by method, route (its template: `/v1/tasks/{task_id}`,
    never the id) and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # unless the app answers
        method = scope["method"]

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            # The router puts the matched route in the scope; a refused request has none.
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            metrics.API_REQUESTS.labels(method, route, str(status)).inc()
            metrics.API_SECONDS.labels(method, route).observe(time.perf_counter() - started)


class BodyLimit:
    """One request-size limit for every route, applied while the body is read and before any
    parsing or authentication: uploads (POST to an `upload_paths`: one file, or a batch of
    files) up to `upload_max`, any other body
    up to `request_max`. Refused from Content-Length when declared, else by counting the body as
    it streams in (chunked), always with 413."""

    def __init__(
        self,
        app: ASGIApp,
        upload_max: int,
        request_max: int,
        upload_paths: tuple[str, ...] = ("/v1/documents", "/v1/document-batches"),
    ) -> None:
        self.app = app
        self.upload_max = upload_max
        self.request_max = request_max
        self.upload_paths = upload_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = scope["method"] == "POST" and scope["path"] in self.upload_paths
        limit = self.upload_max + UPLOAD_OVERHEAD if upload else self.request_max
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.strip().isdigit() or not declared.isascii():
                await error_response(400, "bad_request", "Invalid Content-Length header")(
                    scope, receive, send
                )
                return
            if int(declared) > limit:
                await self._reject(upload, scope, receive, send)
                return
        seen = 0
        refused = False
        started = False

        async def counted() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                # Answer now; the app sees a disconnect and whatever it sends is dropped.
                refused = True
                if not started:
                    await self._reject(upload, scope, receive, send)
                return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = True
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not refused:
                raise

    async def _reject(self, upload: bool, scope: Scope, receive: Receive, send: Send) -> None:
        if upload:
            response = error_response(
                413,
                "file_too_large",
                f"Uploads are limited to {self.upload_max} bytes (UPLOAD_MAX_BYTES)",
            )
        else:
            response = error_response(
                413,
                "request_too_large",
                f"Request bodies are limited to {self.request_max} bytes (REQUEST_MAX_BYTES); "
                "send files through POST /v1/documents",
            )
        await response(scope, receive, send)


def create_app(runtime: Runtime) -> FastAPI:
    app = FastAPI(
        title="knowledgeops",
        version="0.1.0",
        description="Asynchronous task backbone of a knowledge-base app, on Temporal.",
    )
    app.state.runtime = runtime
    install_error_handlers(app)
    install_openapi(app)
    app.include_router(documents.router)
    app.include_router(document_batches.router)
    app.include_router(cards.router)
    app.include_router(tasks.router)
    app.include_router(agent.router)
    app.include_router(admin.router)
    app.include_router(reports.router)
    app.include_router(webhooks.router)
    s = runtime.settings
    app.add_middleware(
        BodyLimit,
        upload_max=min(s.upload_max_bytes, s.max_file_bytes),
        request_max=s.request_max_bytes,
    )
    # A foreign Host or a cross-site state change is refused before anything else.
    app.add_middleware(BrowserGuard, settings=s)
    # Outermost: every request is counted, refused ones too.
    app.add_middleware(RequestMetrics)

    @app.get("/healthz")
    async def healthz(rt: RuntimeDep) -> dict[str, str]:
        return {"status": "ok", "embedding_model": rt.embedder.model_id}

    @app.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"},
            **problem_responses(401, 403),
        },
    )
    async def prometheus_metrics(_: CallerDep) -> Response:
        """The platform's Prometheus metrics (knowledgeops.observability.metrics), as allowed."""
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app
