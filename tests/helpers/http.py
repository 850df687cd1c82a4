"""The HTTP API as tests see it: its routes."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, cast

from fastapi.routing import APIRoute
from starlette.routing import Route

from knowledgeops.config.settings import Settings
from starter.http.app import create_app
from starter.http.runtime import Runtime

# Routes anyone may call: health and the API's own documentation.
OPEN_ROUTES = {"/healthz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}


def app_routes(settings: Settings, *, fill: str | None = "doc-x") -> list[tuple[str, str]]:
    """(method, path) of every route the application serves but the open ones, path
    parameters filled in with `fill` (None: as templated): a route added later is checked
    without anyone listing it in a test."""
    app = create_app(cast(Runtime, SimpleNamespace(settings=settings)))
    routes: list[Any] = list(app.routes)
    found = []
    while routes:
        route = routes.pop(0)
        # An included router (FastAPI wraps each one): its own routes carry their full paths.
        routes += list(getattr(getattr(route, "original_router", None), "routes", []))
        if isinstance(route, APIRoute | Route) and route.path not in OPEN_ROUTES:
            path = route.path if fill is None else re.sub(r"\{[^}]+\}", fill, route.path)
            found += [(m, path) for m in sorted(route.methods or ()) if m != "HEAD"]
    return found
