"""How long an OpenAI-compatible server asks a client to wait before trying again.

Shared by the embedder and the chat models, which both back off on 429 / 5xx honouring what
the server said (`retry-after-ms`, `retry-after` as seconds or as an HTTP date).
"""

from __future__ import annotations

import email.utils
import time
from typing import Any


def retry_after_seconds(headers: Any) -> float | None:
    """The wait a response's headers ask for, or None when they ask for none."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None
