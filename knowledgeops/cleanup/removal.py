"""Removing the items of a plan, each judged again with the same rules just before: an item
that became needed between listing and removal (a re-upload, a new import) is kept (False);
everything else on the list is removed, and nothing that is not on it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

from knowledgeops.backup import retention as cleanup_backups
from knowledgeops.cleanup.needed import Needed
from knowledgeops.cleanup.orphans import (
    UPLOAD_TEMP_PREFIX,
    chunk_document,
    file_orphan,
    item_path,
    located,
    temp_orphan,
)
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.cleanup import CleanupItem, OrphanKind
from knowledgeops.db.audit import AuditLog
from knowledgeops.db.events import EventStore
from knowledgeops.errors import bad_input
from knowledgeops.index.live import delete_document_everywhere
from knowledgeops.runtime.resources import Resources


def pool_batch(settings: Settings, items: list[CleanupItem], start: int) -> list[CleanupItem]:
    """The run of backup pool blobs starting at `start` (empty if that item is none)."""
    batch: list[CleanupItem] = []
    for item in items[start:]:
        if item.kind != OrphanKind.BACKUPS:
            break
        if not cleanup_backups.is_pool_blob(settings, located(settings, item)):
            break
        batch.append(item)
    return batch


async def remove_pool_batch(settings: Settings, batch: Sequence[CleanupItem]) -> list[bool]:
    """Per pool blob of `batch` (see `pool_batch`): removed, or False: kept."""
    blobs = [located(settings, i) for i in batch]
    return await asyncio.to_thread(cleanup_backups.remove_pool_blobs, settings, blobs)


async def remove_item(
    resources: Resources, item: CleanupItem, needed: Needed, grace: timedelta
) -> bool:
    """Remove one item if it is still not needed; False if it is needed again (kept). An
    item already gone (removed by an attempt that crashed before its heartbeat) counts as
    removed."""
    s = resources.settings
    if item.kind == OrphanKind.POINTS:
        if item.name in needed.document_ids:
            return False
        await delete_document_everywhere(resources.store, item.name)
        return True
    if item.kind in (OrphanKind.EVENTS, OrphanKind.AUDIT):
        await delete_rows(resources, item)
        return True
    if item.kind == OrphanKind.BACKUPS:
        return await asyncio.to_thread(cleanup_backups.remove_archive, s, located(s, item))
    upload_temp = Path(item.name).name.startswith(UPLOAD_TEMP_PREFIX)
    folder = s.files_dir if item.kind == OrphanKind.FILES or upload_temp else s.chunks_dir
    path = item_path(s, item, folder)
    if item.kind == OrphanKind.TEMP_FILES:
        return await asyncio.to_thread(unlink_if, path, lambda p: temp_orphan(s, p, grace))
    files, doc = resources.files, chunk_document(path)
    if await files.exists(path):  # here or in the store; else an earlier attempt removed it
        if item.kind == OrphanKind.FILES:
            orphan = await asyncio.to_thread(file_orphan, path, needed, grace)
        else:
            orphan = doc not in needed.document_ids
        if not orphan:
            return False
        await files.remove(path)  # the working copy, then the store's
    if item.kind == OrphanKind.CHUNKS and doc is not None and doc not in needed.document_ids:
        # Its live-version pointer goes with its files (a document no longer listed).
        await resources.live_versions.delete(doc)
    return True


async def delete_rows(resources: Resources, item: CleanupItem) -> None:
    if item.before is None or item.up_to_id is None:
        raise bad_input("InvalidPlan", f"rows item {item.name!r} has no cutoff")
    db = resources.db
    store = EventStore(db) if item.kind == OrphanKind.EVENTS else AuditLog(db)
    # Bounded batches: each its own short transaction; the heartbeat runs meanwhile.
    while await store.delete_older_than(item.before, item.up_to_id):
        pass


def unlink_if(path: Path, rule: Callable[[Path], bool]) -> bool:
    if not path.exists():
        return True
    if not rule(path):
        return False
    path.unlink(missing_ok=True)
    return True
