"""Turning errors into the one-line text users see; shared by workflows and starters."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from temporalio.exceptions import ApplicationError


def failure_text(err: BaseException) -> str:
    """The innermost cause of a Temporal failure chain, as `Type: message`: the part a user
    can act on (the outer layers only say "activity failed" / "workflow failed")."""
    while getattr(err, "cause", None) is not None:
        err = err.cause  # type: ignore[attr-defined]
    if isinstance(err, ApplicationError) and err.type:
        return f"{err.type}: {err.message}"
    return str(getattr(err, "message", err))


def validation_text(errors: Iterable[Mapping[str, Any]]) -> str:
    """pydantic errors as `field.path: message; ...`."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)
