"""How the AI activities turn model and embedding failures into Temporal failures.

A refused request (bad key, unknown model, input the model cannot take) and an answer that
stayed malformed after the chat client's own bounded re-asks are not fixed by running the
activity again: they fail the task at once with the provider's reason. A provider that kept
failing transiently (`ChatUnavailableError`, `EmbeddingUnavailableError`) stays retryable:
the registry's bounded retry policy takes over.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from knowledgeops.errors import (
    ChatAnswerInvalidError,
    ChatRejectedError,
    EmbeddingRejectedError,
    bad_input,
)


@contextlib.contextmanager
def model_failures() -> Iterator[None]:
    try:
        yield
    except ChatRejectedError as e:
        raise bad_input("ChatRejected", str(e)) from None
    except ChatAnswerInvalidError as e:
        used = getattr(e.usage, "prompt_tokens", 0) + getattr(e.usage, "completion_tokens", 0)
        raise bad_input("ChatAnswerInvalid", f"{e} ({used} tokens spent on it)") from None
    except EmbeddingRejectedError as e:
        raise bad_input("EmbeddingRejected", str(e)) from None
