"""How a document's import is named and ordered: its document id (derived from the file's
bytes and owner, so a re-import updates it), the one task id of its imports, and the Temporal
priority its size earns."""

from __future__ import annotations

import hashlib

from knowledgeops.contracts.document_batch import import_task_name
from knowledgeops.documents.import_priority import (
    LARGE_IMPORT_PRIORITY,
    MEDIUM_IMPORT_BYTES,
    MEDIUM_IMPORT_PRIORITY,
    SMALL_IMPORT_PRIORITY,
    import_priority,
)

__all__ = [
    "LARGE_IMPORT_PRIORITY",
    "MEDIUM_IMPORT_BYTES",
    "MEDIUM_IMPORT_PRIORITY",
    "SMALL_IMPORT_PRIORITY",
    "derive_document_id",
    "import_priority",
    "import_task_name",
]


def derive_document_id(file_id: str, owner: str | None = None) -> str:
    # Same bytes -> same document: re-importing a file updates it instead of adding a copy.
    # Per owner: two owners importing the same file get a document each, never one shared.
    if owner is None:
        return "doc-" + file_id[:32]
    return "doc-" + hashlib.sha256(f"{owner}\x00{file_id}".encode()).hexdigest()[:32]
