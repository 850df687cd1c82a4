"""The OpenAPI document as clients and gateways read it: every error response of every
operation is a problem (`application/problem+json`, the `Problem` schema)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from starter.http.errors import PROBLEM_JSON, PROBLEM_SCHEMA_REF, Problem, problem_responses

# What can answer any route, whatever it declares: BrowserGuard's refusal of a foreign Host
# (400) and an unhandled exception (500).
ANY_ROUTE = problem_responses(400, 500)
# FastAPI's own 422 schemas: only its 422 responses use them, and those are problems now.
_FASTAPI_ERRORS = ("HTTPValidationError", "ValidationError")


def _with_problems(doc: dict[str, Any]) -> dict[str, Any]:
    problem = {PROBLEM_JSON: {"schema": {"$ref": PROBLEM_SCHEMA_REF}}}
    for path_item in doc.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.setdefault("responses", {})
            for status, response in ANY_ROUTE.items():
                responses.setdefault(str(status), copy.deepcopy(response))
            for status, response in responses.items():
                if status[0] in "45":  # an error answered by the handlers of errors.py
                    response["content"] = copy.deepcopy(problem)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(schema.pop("$defs", {}))
    schemas["Problem"] = schema
    for name in _FASTAPI_ERRORS:
        schemas.pop(name, None)
    return doc


def install_openapi(app: FastAPI) -> None:
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        # Built once, as FastAPI's own is (it caches in app.openapi_schema).
        if app.openapi_schema is None:
            app.openapi_schema = _with_problems(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
