"""Errors both sides share: bad input a retry cannot fix, provider failures, and turning any
failure into the one-line text users see."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from temporalio.exceptions import ApplicationError

from knowledgeops.contracts.ai import TokenUsage


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


def bad_input(kind: str, message: str) -> ApplicationError:
    """A failure no retry can fix: the task fails at once, with `kind: message` as its error."""
    return ApplicationError(message, type=kind, non_retryable=True)


class DocumentError(Exception):
    """The input document itself is unusable; retrying cannot help."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class EmbeddingRejectedError(Exception):
    """The embedding provider refused the request (bad key, model, input): not retryable."""


class EmbeddingUnavailableError(Exception):
    """The embedding provider kept failing transiently; Temporal retries the activity."""


class ChatRejectedError(Exception):
    """The chat / vision provider refused the request (bad key, model, input): not retryable."""


class ChatUnavailableError(Exception):
    """The chat / vision provider kept failing transiently; Temporal retries the activity."""


class ChatAnswerInvalidError(Exception):
    """The model kept answering with something that is not the requested structure: retrying
    the activity would pay for the same failure again, so it is not retried. Carries the
    tokens the failed answers used."""

    def __init__(self, message: str, usage: TokenUsage | None = None) -> None:
        super().__init__(message)
        self.usage = usage
