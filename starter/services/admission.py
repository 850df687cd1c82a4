"""Admission control for imports: refuse new work (429) while the ingest backlog is too big.

The backlog is measured in bytes of stored files waiting for or in an import, not in tasks: one
2 MB file is hundreds of one-chunk notes of work. Each import records its file size in its memo
(`file_bytes`); the sum over running imports comes from Temporal's visibility (one list call),
cached for a moment so a burst of uploads does not turn into a burst of list calls.
"""

from __future__ import annotations

import asyncio
import json
import time

from temporalio.client import Client

from knowledgeops.config.settings import Settings
from knowledgeops.observability import metrics
from knowledgeops.registry.task_types import TASK_TYPE_SEARCH_ATTRIBUTE, TaskType

# Memo key of an import: the size of its stored file.
FILE_BYTES_MEMO = "file_bytes"
# How long a measured backlog is trusted.
CACHE_SECONDS = 2.0
# What a refused client is told to wait (seconds): about one refresh of the local embedder's
# progress on a large backlog; clients back off further on repeated 429s.
RETRY_AFTER_SECONDS = 30


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(json.dumps(v) for v in values) + ")"


class BacklogFullError(RuntimeError):
    """New imports are refused until the backlog drains (429 with Retry-After at the API)."""

    retry_after = RETRY_AFTER_SECONDS


class Admission:
    def __init__(self, client: Client, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self._measured_at = 0.0
        self._backlog = 0
        self._lock = asyncio.Lock()

    async def _measure(self) -> int:
        # A batch import's memo holds the bytes of all its files.
        types = (TaskType.DOCUMENT_IMPORT.value, TaskType.DOCUMENT_BATCH_IMPORT.value)
        query = f'{TASK_TYPE_SEARCH_ATTRIBUTE.name} IN {_in(types)} AND ExecutionStatus = "Running"'
        if self.settings.prefix:
            query += f" AND WorkflowId STARTS_WITH {json.dumps(self.settings.prefix)}"
        total = 0
        async for w in self.client.list_workflows(query):
            size = (await w.memo()).get(FILE_BYTES_MEMO)
            total += int(size) if isinstance(size, int | float) else 0
        return total

    async def admit(self, incoming_bytes: int) -> None:
        """Raise BacklogFullError if the backlog is over INGEST_BACKLOG_MAX_BYTES. A single
        file larger than the limit is still admitted into an empty backlog (never starved)."""
        limit = self.settings.ingest_backlog_max_bytes
        if not limit:
            return
        async with self._lock:
            if time.monotonic() - self._measured_at > CACHE_SECONDS:
                self._backlog = await self._measure()
                self._measured_at = time.monotonic()
                metrics.INGEST_BACKLOG_BYTES.set(self._backlog)
            backlog = self._backlog
            if not backlog or backlog + incoming_bytes <= limit:
                # Reserved at once: concurrent uploads see each other before they enqueue.
                self._backlog += incoming_bytes
                return
            raise BacklogFullError(
                f"The import backlog is {backlog} bytes, over the limit of {limit} "
                "(INGEST_BACKLOG_MAX_BYTES); nothing was stored. Retry after "
                f"{RETRY_AFTER_SECONDS} s."
            )
