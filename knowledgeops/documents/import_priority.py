"""The Temporal priority an import earns by its file's size: a one-page upload never waits
behind a bulk import's backlog, and a 100-page report not behind 2 MB dumps. The service
starts a document's import with it, and a batch import its bigger files' imports."""

from __future__ import annotations

from knowledgeops.registry.task_types import EXPRESS_PRIORITY

# Temporal priority keys (1 = first; unset = 3) of imports by file size.
SMALL_IMPORT_PRIORITY, MEDIUM_IMPORT_PRIORITY, LARGE_IMPORT_PRIORITY = EXPRESS_PRIORITY, 2, 3
MEDIUM_IMPORT_BYTES = 1024 * 1024


def import_priority(size: int, small_bytes: int) -> int:
    if size <= small_bytes:
        return SMALL_IMPORT_PRIORITY
    return MEDIUM_IMPORT_PRIORITY if size <= MEDIUM_IMPORT_BYTES else LARGE_IMPORT_PRIORITY
