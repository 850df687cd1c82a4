"""How a document's import is named and ordered: its document id (derived from the file's
bytes and owner, so a re-import updates it), the one task id of its imports, and the Temporal
priority its size earns."""

from __future__ import annotations

import hashlib

from knowledgeops.registry.task_types import EXPRESS_PRIORITY

# Temporal priority keys (1 = first; unset = 3) of imports by file size.
SMALL_IMPORT_PRIORITY, MEDIUM_IMPORT_PRIORITY, LARGE_IMPORT_PRIORITY = EXPRESS_PRIORITY, 2, 3
MEDIUM_IMPORT_BYTES = 1024 * 1024


def import_priority(size: int, small_bytes: int) -> int:
    """Small documents ahead of medium ones ahead of big ones: a one-page upload never waits
    behind a bulk import's backlog, and a 100-page report not behind 2 MB dumps."""
    if size <= small_bytes:
        return SMALL_IMPORT_PRIORITY
    return MEDIUM_IMPORT_PRIORITY if size <= MEDIUM_IMPORT_BYTES else LARGE_IMPORT_PRIORITY


def derive_document_id(file_id: str, owner: str | None = None) -> str:
    # Same bytes -> same document: re-importing a file updates it instead of adding a copy.
    # Per owner: two owners importing the same file get a document each, never one shared.
    if owner is None:
        return "doc-" + file_id[:32]
    return "doc-" + hashlib.sha256(f"{owner}\x00{file_id}".encode()).hexdigest()[:32]


def import_task_name(document_id: str) -> str:
    """The one task id of a document's imports (before the deployment prefix): it serialises
    imports of the document."""
    return f"import-{document_id}"
