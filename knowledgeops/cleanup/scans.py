"""Listing the orphans of each kind, in a fixed order, with the rules of `orphans`."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta

from knowledgeops.backup import retention as cleanup_backups
from knowledgeops.backup.archive import stored_objects
from knowledgeops.cleanup.listing import entries, sizes
from knowledgeops.cleanup.needed import Needed
from knowledgeops.cleanup.orphans import chunk_document, file_orphan, name_of, temp_orphan
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.cleanup import CleanupItem, OrphanKind
from knowledgeops.db.audit import AuditLog
from knowledgeops.db.events import EventStore
from knowledgeops.runtime.resources import Resources
from knowledgeops.storage.store import StoredObject

EVENTS_TABLE, AUDIT_TABLE = "task_events", "audit_log"


def scan_files(settings: Settings, needed: Needed, grace: timedelta) -> list[CleanupItem]:
    folder = settings.files_dir
    found = sizes(folder, needed.stored)
    return [
        CleanupItem(kind=OrphanKind.FILES, name=name_of(settings, folder / name), bytes=size)
        for name, size in found.items()
        if file_orphan(folder / name, needed, grace)
    ]


def scan_chunks(
    settings: Settings, needed: Needed, stored: Mapping[str, StoredObject]
) -> list[CleanupItem]:
    folder, out = settings.chunks_dir, []
    for name, size in sizes(folder, stored).items():
        doc = chunk_document(folder / name)
        if doc is not None and doc not in needed.document_ids:
            out.append(
                CleanupItem(
                    kind=OrphanKind.CHUNKS, name=name_of(settings, folder / name), bytes=size
                )
            )
    return out


def scan_temp(settings: Settings, grace: timedelta) -> list[CleanupItem]:
    s = settings
    return [
        CleanupItem(kind=OrphanKind.TEMP_FILES, name=name_of(s, p), bytes=st.st_size)
        for p, st in entries(s.chunks_dir) + entries(s.files_dir)
        if temp_orphan(s, p, grace)
    ]


async def scan_points(resources: Resources, needed: Needed) -> list[CleanupItem]:
    live = await resources.live_index()
    counts = await resources.store.document_point_counts(live.collection)
    return [
        CleanupItem(kind=OrphanKind.POINTS, name=doc, count=n)
        for doc, n in sorted(counts.items())
        if doc not in needed.document_ids
    ]


async def scan_rows(resources: Resources, kind: OrphanKind) -> list[CleanupItem]:
    s, db = resources.settings, resources.db
    if kind == OrphanKind.EVENTS:
        table, before = EVENTS_TABLE, datetime.now(UTC) - timedelta(s.event_retention_days)
        count, last = await EventStore(db).older_than(before)
    else:
        table, before = AUDIT_TABLE, datetime.now(UTC) - timedelta(s.audit_retention_days)
        count, last = await AuditLog(db).older_than(before)
    if not count or last is None:
        return []
    return [CleanupItem(kind=kind, name=table, count=count, before=before, up_to_id=last)]


async def find_items(
    resources: Resources, kinds: Collection[OrphanKind], needed: Needed, grace: timedelta
) -> list[CleanupItem]:
    """The orphans of `kinds` by the view `needed`; file work runs in threads."""
    settings = resources.settings
    items: list[CleanupItem] = []
    for kind in OrphanKind:  # a fixed order, whatever the payload's order
        if kind not in kinds:
            continue
        if kind == OrphanKind.FILES:
            items += await asyncio.to_thread(scan_files, settings, needed, grace)
        elif kind == OrphanKind.CHUNKS:
            stored = await stored_objects(resources.files, "chunks")
            items += await asyncio.to_thread(scan_chunks, settings, needed, stored)
        elif kind == OrphanKind.POINTS:
            items += await scan_points(resources, needed)
        elif kind == OrphanKind.BACKUPS:
            items += await asyncio.to_thread(
                cleanup_backups.find, settings, lambda p: name_of(settings, p)
            )
        elif kind == OrphanKind.TEMP_FILES:
            items += await asyncio.to_thread(scan_temp, settings, grace)
        else:
            items += await scan_rows(resources, kind)
    return items
