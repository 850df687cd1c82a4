"""One JSON error shape for every failure: {"error": {"code", "message"}}."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.service import RPCError

from knowledgeops.errors import validation_text
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


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorBody


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = {"error": {"code": code, "message": message}}
    return JSONResponse(status_code=status, content=body, headers=headers)


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

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse}
    for code in (400, 401, 403, 404, 409, 413, 415, 422, 429, 501, 503)
}


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
            raise e  # a real server error: let it be a 500 with its traceback in the log
        return error_response(
            503,
            "temporal_unavailable",
            f"Temporal is unreachable ({e.message}); task state lives there, so this cannot be "
            "answered now. Search and the document list still work. Retry shortly.",
            {"Retry-After": "5"},
        )

    @app.exception_handler(BacklogFullError)
    async def _backlog_full(_: Request, e: BacklogFullError) -> JSONResponse:
        return error_response(429, "backlog_full", str(e), {"Retry-After": str(e.retry_after)})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_request", validation_text(e.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        return error_response(e.status_code, code, str(e.detail))
