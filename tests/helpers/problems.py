"""What every error answer of the API is: an RFC 9457 problem (docs/api.md, "Errors")."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import httpx

PROBLEM_JSON = "application/problem+json"


def problem(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The problem `r` answers, checked to be one of `status` and `code`."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM_JSON, (r.headers, r.text)
    body: dict[str, Any] = r.json()
    assert body["type"] == f"/problems/{code}" and body["code"] == code, body
    assert body["status"] == status and body["title"] == HTTPStatus(status).phrase, body
    assert isinstance(body["detail"], str) and body["detail"], body
    return body


def code(r: httpx.Response) -> str:
    """The error code of a problem answer."""
    assert r.headers["content-type"] == PROBLEM_JSON, (r.headers, r.text)
    return str(r.json()["code"])
