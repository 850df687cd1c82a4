"""Every error answer is an RFC 9457 problem, whoever answers it (a route, a service exception,
request validation, the router, a middleware, an unhandled exception), and the OpenAPI
document says so: problem responses on every operation, the bearer schemes declared."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from knowledgeops.config.settings import Settings
from starter.dev_server import free_port
from starter.http.app import create_app
from starter.http.runtime import Runtime
from tests.helpers.environment import running_api
from tests.helpers.problems import PROBLEM_JSON, problem
from tests.helpers.waiting import eventually

SECRET = "secret-internal-state-7f3a"


async def test_every_error_is_a_problem(settings: Settings) -> None:
    small = settings.model_copy(update={"request_max_bytes": 1024})
    async with running_api(small, workers=False) as api:
        http = api.http
        # The routes' own errors (ApiError), with the headers they carry.
        r = await http.get("/v1/documents", headers={"Authorization": ""})
        problem(r, 401, "unauthenticated")
        assert r.headers["www-authenticate"] == "Bearer"
        r = await http.get("/v1/documents", headers={"Authorization": "Bearer not-a-token"})
        problem(r, 403, "forbidden")
        r = await http.post("/v1/tasks", json={"type": "NOPE", "payload": {}})
        assert "NOPE" in problem(r, 400, "unknown_task_type")["detail"]
        # A service exception, mapped to its status.
        problem(await http.get("/v1/tasks/nope"), 404, "not_found")
        # Request validation: the field errors ride along as an extension member.
        body = problem(await http.get("/v1/search", params={"q": ""}), 422, "invalid_request")
        assert [e["loc"] for e in body["errors"]] == [["query", "q"]], body
        assert body["errors"][0]["msg"] and "query.q" in body["detail"]
        # The router: an unknown route, a method the route does not take (Allow kept).
        problem(await http.get("/v1/no-such-route"), 404, "not_found")
        r = await http.get("/v1/tasks")
        problem(r, 405, "method_not_allowed")
        assert r.headers["allow"] == "POST"
        # Middleware, before any route: a foreign Host, a body over REQUEST_MAX_BYTES.
        r = await http.get("/v1/documents", headers={"Host": "evil.example"})
        problem(r, 400, "host_not_allowed")
        big = {"type": "CLEANUP_EXECUTE", "payload": {"pad": "x" * 4096}}
        problem(await http.post("/v1/tasks", json=big), 413, "request_too_large")


class _Server(uvicorn.Server):
    # The test's process keeps its own signal handlers.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """`app` on a free loopback port over real HTTP. log_config=None: uvicorn's log records
    reach the root logger (and so caplog)."""
    port = free_port()
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    task = asyncio.create_task(server.serve())
    try:

        def started() -> bool:
            assert not task.done(), task.exception()
            return bool(server.started)

        await eventually(started, bool, timeout=30, interval=0.02, what="the server started")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            yield http
    finally:
        server.should_exit = True
        await task


def _bare_app(settings: Settings) -> FastAPI:
    """The application without a worker, Temporal or database behind it (open: no tokens)."""
    return create_app(cast(Runtime, SimpleNamespace(settings=settings)))


async def test_an_unhandled_exception_is_a_500_problem_that_tells_nothing_internal(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    app = _bare_app(settings)

    @app.get("/v1/fails")
    async def fails() -> None:
        raise RuntimeError(f"a bug near {SECRET}")

    async with serving(app) as http:
        r = await http.get("/v1/fails")
        body = problem(r, 500, "internal_error")
        assert SECRET not in r.text and "Traceback" not in r.text and "RuntimeError" not in r.text
        assert set(body) == {"type", "title", "status", "detail", "code"}
        # The server is unharmed, and its log has what the client was not told.
        assert (await http.get("/openapi.json")).status_code == 200
    logged = [r for r in caplog.records if r.exc_info and SECRET in str(r.exc_info[1])]
    assert logged and logged[0].levelno == logging.ERROR


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, m, op) for path, item in doc["paths"].items() for m, op in item.items()]


async def test_openapi_declares_bearer_schemes_and_problem_responses(settings: Settings) -> None:
    async with serving(_bare_app(settings)) as http:
        doc = (await http.get("/openapi.json")).json()
    schemes = doc["components"]["securitySchemes"]
    assert {name: (s["type"], s["scheme"]) for name, s in schemes.items()} == {
        "apiToken": ("http", "bearer"),
        "adminToken": ("http", "bearer"),
    }
    schema = doc["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail", "code"} <= set(schema["required"])
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    problem_content = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    operations = _operations(doc)
    assert len(operations) > 30
    for path, method, op in operations:
        where = f"{method.upper()} {path}"
        headers = [p["name"].lower() for p in op.get("parameters", []) if p["in"] == "header"]
        assert "authorization" not in headers, where
        # A token comes through the declared scheme: the admin one under /v1/admin.
        expected = (
            []
            if path == "/healthz"
            else [{"adminToken": []}]
            if path.startswith("/v1/admin")
            else [{"apiToken": []}]
        )
        assert op.get("security", []) == expected, where
        responses = op["responses"]
        assert {"400", "500"} <= set(responses), where
        for status, response in responses.items():
            if status >= "400":
                assert response["content"] == problem_content, (where, status)
        if "202" in responses:
            assert "Location" in responses["202"]["headers"], where
    # A route lists the errors it answers.
    submit = doc["paths"]["/v1/tasks"]["post"]
    assert {"400", "401", "403", "413", "422", "429", "500", "503"} <= set(submit["responses"])
    assert "Idempotency-Key" in [p["name"] for p in submit["parameters"]]
