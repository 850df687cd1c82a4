"""Who may call the API, and from where: every token check lives here.

- Bearer tokens from API_TOKENS ("token:caller[:owner]"): the caller names the audit actor; a
  token bound to an owner sees and changes only that owner's documents and tasks. With no
  tokens the API is open as "anonymous", which is allowed only on a loopback address
  (`check_exposure` refuses to serve otherwise).
- Admin bearer tokens from ADMIN_TOKENS ("token:operator"), for /v1/admin (`operator`); with
  none the admin API is disabled.
- `BrowserGuard`, in front of every route: the Host header must name an allowed host (a DNS
  rebinding page reaches 127.0.0.1 under its own host name), and a state-changing request must
  be one a browser cannot send cross-site without a CORS preflight (which this API never
  grants): refused when `Sec-Fetch-Site: cross-site` or an `Origin` of another host is sent,
  and, while the API is open, unless it carries `Content-Type: application/json`, an
  `Authorization` or an `X-Requested-With` header (a plain form or no-cors fetch has none).
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from knowledgeops.config.settings import Settings
from starter.http.errors import ApiError, error_response
from starter.http.runtime import RuntimeDep

ANONYMOUS = "anonymous"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Caller:
    name: str
    # The one owner this caller may see and change; None: every owner.
    owner: str | None = None

    def owns(self, owner: str | None) -> bool:
        return self.owner is None or owner == self.owner


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings) -> None:
    """Refuse to serve an open (token-less) API on anything but a loopback address."""
    if not settings.api_callers() and not is_loopback(settings.api_host):
        raise RuntimeError(
            f"API_HOST={settings.api_host} is reachable from other machines but API_TOKENS is "
            "empty, so anyone could use the API. Set API_TOKENS=token:caller[:owner] (tokens of "
            "16+ random characters), or bind API_HOST=127.0.0.1."
        )


# The two bearer schemes, declared in the OpenAPI document. auto_error=False: a missing or
# non-Bearer Authorization comes in as None and the checks below answer it, in our error shape.
api_bearer = HTTPBearer(
    scheme_name="apiToken",
    description="An API token (API_TOKENS). With none configured the API is open, on loopback.",
    auto_error=False,
)
admin_bearer = HTTPBearer(
    scheme_name="adminToken", description="An admin token (ADMIN_TOKENS).", auto_error=False
)
ApiCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(api_bearer)]
AdminCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(admin_bearer)]


def _unauthenticated(message: str) -> ApiError:
    return ApiError(401, "unauthenticated", message, headers={"WWW-Authenticate": "Bearer"})


def _known(token: str, known: str) -> bool:
    return hmac.compare_digest(known.encode(), token.encode())


# Async, as it blocks on nothing: FastAPI runs a plain `def` dependency in a worker thread.
async def caller(rt: RuntimeDep, credentials: ApiCredentials) -> Caller:
    """The caller behind the bearer token: 401 without one, 403 with an unknown one."""
    tokens = rt.settings.api_callers()
    if not tokens:
        return Caller(ANONYMOUS)  # open on loopback only (check_exposure)
    if credentials is None:
        raise _unauthenticated("Send Authorization: Bearer <API token> (one of API_TOKENS)")
    for known, (name, owner) in tokens.items():
        if _known(credentials.credentials, known):
            return Caller(name, owner)
    raise ApiError(403, "forbidden", "This token is not an API token")


def operator(rt: RuntimeDep, credentials: AdminCredentials) -> str:
    """The operator behind the admin bearer token; 401 without a token, 403 with a wrong one,
    403 for every request while ADMIN_TOKENS is empty."""
    tokens = rt.settings.admin_operators()
    if not tokens:
        raise ApiError(
            403, "admin_disabled", "The admin API is disabled: set ADMIN_TOKENS=token:operator"
        )
    if credentials is None:
        raise _unauthenticated("Send Authorization: Bearer <admin token>")
    for known, name in tokens.items():
        if _known(credentials.credentials, known):
            return name
    raise ApiError(403, "forbidden", "This token is not an admin token")


CallerDep = Annotated[Caller, Depends(caller)]
Operator = Annotated[str, Depends(operator)]


def unscoped(who: Caller, what: str) -> None:
    """Refuse an owner-bound caller what spans every owner (system reports, all events)."""
    if who.owner is not None:
        raise ApiError(403, "forbidden", f"A token bound to one owner cannot {what}")


def _host_of(value: str) -> str:
    """The host name of a Host header value ("h", "h:port", "[v6]:port")."""
    return (urlsplit(f"//{value}").hostname or "").lower()


def host_allowed(host: str, allowed: list[str]) -> bool:
    for pattern in allowed:
        if pattern == "*" or host == pattern.strip("[]"):
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
    return False


class BrowserGuard:
    """Host allow-list and cross-site refusal for state changes (see the module docstring)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.allowed = settings.allowed_hosts()
        self.open = not settings.api_callers()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope["method"], Headers(scope=scope))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, code, message = refusal
        await error_response(status, code, message)(scope, receive, send)

    def _refusal(self, method: str, headers: Headers) -> tuple[int, str, str] | None:
        host = _host_of(headers.get("host", ""))
        if not host_allowed(host, self.allowed):
            return (
                400,
                "host_not_allowed",
                f"Host {host or '(none)'!r} is not served here; add it to API_ALLOWED_HOSTS",
            )
        if method not in UNSAFE_METHODS:
            return None
        if headers.get("sec-fetch-site", "").lower() == "cross-site":
            return 403, "cross_site", "State-changing requests from another site are refused"
        origin = headers.get("origin")
        if origin is not None:
            origin_host = (urlsplit(origin).hostname or "").lower()
            if not host_allowed(origin_host, self.allowed):
                return 403, "cross_site", f"Requests from origin {origin!r} are refused"
        if self.open and not (
            headers.get("content-type", "").lower().startswith("application/json")
            or "authorization" in headers
            or "x-requested-with" in headers
        ):
            return (
                403,
                "csrf_header_required",
                "Send Content-Type: application/json, or an X-Requested-With header, with "
                "state-changing requests (a browser cannot send those cross-site)",
            )
        return None
