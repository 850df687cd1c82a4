"""Removing a document, in the steps the API and the DOCUMENT_DELETE task share.

The API hides the document (`hide_document`) and starts the task; the task removes it. Both
sides reach the index, the catalogue and the stored files through here, so "what a deleted
document leaves behind" is written once.
"""

from __future__ import annotations

from temporalio.client import Client

from knowledgeops.config.settings import Settings
from knowledgeops.db.audit import AuditRow
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.documents.live_imports import live_import_inputs
from knowledgeops.files import file_store
from knowledgeops.files.data_files import DataFiles, open_storage
from knowledgeops.index.live import index_collections
from knowledgeops.index.vector_index import VectorIndex


async def hide_document(
    index: VectorIndex,
    catalogue: DocumentCatalogue,
    document_id: str,
    *,
    file_id: str,
    import_task_id: str,
    owner: str | None,
    filename: str,
) -> None:
    """Unsearchable at once: the catalogue row says `deleting` (listings show it, imports of
    the document are refused until the task ends) and every point of the document, in every
    index collection, is staged, which search never returns."""
    await catalogue.mark_deleting(
        document_id, file_id=file_id, task_id=import_task_id, owner=owner, filename=filename
    )
    for collection in await index_collections(index):
        await index.stage_document(collection, document_id)


async def file_needed(
    catalogue: DocumentCatalogue, client: Client, settings: Settings, file_id: str
) -> bool:
    """Another document's, or an import's that no worker has begun (it has no catalogue
    row yet, but will read the file): the same bytes are one stored file."""
    if await catalogue.file_in_use(file_id):
        return True
    live = await live_import_inputs(client, settings)
    return any(p.file_id == file_id for p in live)


async def remove_document(
    catalogue: DocumentCatalogue,
    client: Client,
    settings: Settings,
    document_id: str,
    file_id: str,
    record: AuditRow,
    *,
    files: DataFiles | None = None,
) -> tuple[bool, bool]:
    """The catalogue row with its audit record (one transaction), then the stored file unless
    something else needs it: here and in STORAGE_URL's store (`files`; None: opened from
    `settings`). (row was there, file removed)."""
    listed = await catalogue.delete_audited(document_id, record)
    if await file_needed(catalogue, client, settings, file_id):
        return listed, False
    files = files or open_storage(settings)[1]
    path = file_store.path_for(settings.files_dir, file_id)
    existed = await files.exists(path)
    await files.remove(path)
    return listed, existed


__all__ = ["file_needed", "hide_document", "remove_document"]
