"""What is still needed: what the document catalogue lists plus what any running or queued
DOCUMENT_IMPORT uses.

The imports are passed in as a callable (the activity reads them from Temporal visibility):
a queued import that no worker has picked up yet has recorded no event, and its stored file
must survive.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select

from knowledgeops.backup.archive import stored_objects
from knowledgeops.contracts.document_import import DocumentImportPayload
from knowledgeops.db.catalogue import DocumentRow
from knowledgeops.runtime.resources import Resources
from knowledgeops.storage.store import StoredObject

# How old the view of what is needed may be when an item is judged for removal.
NEEDED_FRESH_SECONDS = 2.0

# Inputs of this deployment's running (or queued) DOCUMENT_IMPORT tasks.
LiveImports = Callable[[], Awaitable[Sequence[DocumentImportPayload]]]


@dataclass(frozen=True)
class Needed:
    file_ids: frozenset[str]
    document_ids: frozenset[str]
    # STORAGE_URL's stored files by file id, listed with this view (for their age).
    stored: Mapping[str, StoredObject] = field(default_factory=dict)


async def list_needed(
    resources: Resources, live_imports: LiveImports, stored: bool = False
) -> Needed:
    """`stored`: list the store's stored files too (before the rest: a file uploaded
    after the listing is young or needed by the time the view is complete)."""
    objects = await stored_objects(resources.files, "files") if stored else {}
    async with resources.db.sessions() as s:
        rows = (await s.execute(select(DocumentRow.document_id, DocumentRow.file_id))).all()
    live = await live_imports()
    return Needed(
        file_ids=frozenset([r.file_id for r in rows] + [p.file_id for p in live]),
        document_ids=frozenset([r.document_id for r in rows] + [p.document_id for p in live]),
        stored=objects,
    )
