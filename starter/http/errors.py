"""One error shape for every failure: an RFC 9457 problem (`application/problem+json`) with
`type` (`/problems/<code>`), `title` (the status's phrase), `status`, `detail` and our error
`code` as an extension member; a request validation error adds `errors` (one per field)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.service import RPCError

from knowledgeops.errors import failure_text, validation_text
from knowledgeops.runtime.outages import OUTAGE_ERROR_TYPES, unreachable_service
from knowledgeops.runtime.temporal import is_unreachable
from starter.services.admission import BacklogFullError
from starter.services.document_chunks import ChunksNotPublishedError
from starter.services.document_models import (
    DocumentBeingDeletedError,
    DocumentNotFoundError,
    DocumentOwnedElsewhereError,
)
from starter.services.task_models import (
    PayloadInvalidError,
    PayloadTooLargeError,
    TaskFinishedError,
    TaskNotFoundError,
    TaskNotRetryableError,
)

log = logging.getLogger(__name__)
PROBLEM_JSON = "application/problem+json"
# Seconds a client waits before retrying a request refused by an outage (a 503).
OUTAGE_RETRY_AFTER = 5
PROBLEM_SCHEMA_REF = "#/components/schemas/Problem"


class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """An error (RFC 9457). Members other than these may be added; clients ignore unknown ones."""

    # Extension members beyond the ones declared here are allowed by the RFC.
    model_config = ConfigDict(extra="allow")

    type: str = Field(description="`/problems/<code>`: identifies the problem type")
    title: str = Field(description="the HTTP status's reason phrase")
    status: int
    detail: str = Field(description="what went wrong this time, and what to do about it")
    code: str = Field(description="the error code (machine-readable; same as in `type`)")
    errors: list[FieldError] | None = Field(
        default=None, description="request validation errors (422 invalid_request), per field"
    )


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def _phrase(status: int) -> str:
    # Never fail while answering an error: a status without a registered phrase gets a generic one.
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem(
    status: int, code: str, detail: str, extensions: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "type": f"/problems/{code}",
        "title": _phrase(status),
        "status": status,
        "detail": detail,
        "code": code,
        **(extensions or {}),
    }


def error_response(
    status: int,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> JSONResponse:
    return JSONResponse(
        status_code=status,
        content=problem(status, code, message, extensions),
        headers=headers,
        media_type=PROBLEM_JSON,
    )


# Service exceptions and the status / code each one maps to.
_MAPPED: list[tuple[type[Exception], int, str]] = [
    (TaskNotFoundError, 404, "not_found"),
    (DocumentNotFoundError, 404, "not_found"),
    (DocumentOwnedElsewhereError, 409, "document_id_taken"),
    (DocumentBeingDeletedError, 409, "document_being_deleted"),
    (ChunksNotPublishedError, 409, "chunks_not_published"),
    (TaskFinishedError, 409, "already_finished"),
    (TaskNotRetryableError, 409, "not_retryable"),
    (PayloadTooLargeError, 413, "payload_too_large"),
    (PayloadInvalidError, 422, "invalid_payload"),
]


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries: each status answers a problem."""
    return {
        status: {
            "description": f"{_phrase(status)} (a problem: see `code`)",
            "content": {PROBLEM_JSON: {"schema": {"$ref": PROBLEM_SCHEMA_REF}}},
        }
        for status in statuses
    }


ERROR_RESPONSES = problem_responses(400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 501, 503)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError) -> JSONResponse:
        return error_response(e.status, e.code, e.message, e.headers)

    for exc_type, status, code in _MAPPED:

        async def _mapped(
            _: Request, e: Exception, status: int = status, code: str = code
        ) -> JSONResponse:
            return error_response(status, code, str(e))

        app.add_exception_handler(exc_type, _mapped)

    @app.exception_handler(RPCError)
    async def _temporal(_: Request, e: RPCError) -> JSONResponse:
        if not is_unreachable(e):
            raise e  # a real server error: a 500 (below), its traceback in the log
        return error_response(
            503,
            "temporal_unavailable",
            f"Temporal is unreachable ({e.message}); task state lives there, so this cannot be "
            "answered now. Search and the document list still work. Retry shortly.",
            {"Retry-After": "5"},
        )

    async def _outage(_: Request, e: Exception) -> JSONResponse:
        service = unreachable_service(e)
        if service is None:
            raise e  # not an outage: a 500 (below), its traceback in the log
        log.warning("answering 503: the %s is unreachable: %s", service, failure_text(e))
        return error_response(
            503,
            "service_unavailable",
            f"The {service} is unreachable, so this request cannot be answered now; nothing "
            "was changed. Retry after a few seconds.",
            {"Retry-After": str(OUTAGE_RETRY_AFTER)},
            extensions={"service": service},
        )

    for exc_type in OUTAGE_ERROR_TYPES:
        app.add_exception_handler(exc_type, _outage)

    @app.exception_handler(BacklogFullError)
    async def _backlog_full(_: Request, e: BacklogFullError) -> JSONResponse:
        return error_response(429, "backlog_full", str(e), {"Retry-After": str(e.retry_after)})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        # Only location, message and kind: `input` may echo a large or sensitive value back.
        fields = [{"loc": list(x["loc"]), "msg": x["msg"], "type": x["type"]} for x in e.errors()]
        return error_response(
            422, "invalid_request", validation_text(e.errors()), extensions={"errors": fields}
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        # Its headers too: a 405 names the allowed methods (Allow).
        return error_response(e.status_code, code, str(e.detail), e.headers)

    # Starlette answers this one outermost (ServerErrorMiddleware) and re-raises the exception
    # afterwards, so the server still logs its traceback; the client learns nothing internal.
    @app.exception_handler(Exception)
    async def _unhandled(_: Request, e: Exception) -> JSONResponse:
        return error_response(
            500,
            "internal_error",
            "The server failed to answer this request; the failure is in its log. "
            "Retry, or report it if it persists.",
        )
