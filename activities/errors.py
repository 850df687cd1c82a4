"""Errors that name a bad input; activities turn them into non-retryable Temporal failures."""

from __future__ import annotations


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
