"""Activities of CLEANUP_EXECUTE: list what nothing needs any more, remove exactly that list.

"Needed" is what the document catalogue lists plus what any running or queued DOCUMENT_IMPORT
uses. The imports come from Temporal visibility (through the worker's client, which every async
activity has: `activity.client()`), not from the domain events: a queued import that no worker
has picked up yet has recorded no event, and its stored file must survive.

The removal re-checks every item with the same rules just before removing it, so an item that
became needed between listing and removal (a re-upload, a new import) is kept and reported as
skipped; everything else on the list is removed, and nothing that is not on it.

With STORAGE_URL, stored files and chunk files are looked for in the store too (it holds the
true copies; the data folder is this machine's working copy). An item is still named by its
path in the data folder (`files/<id>`, `chunks/<document>~<version>.jsonl`), which names one
local file and one store key, and removing it removes both. A stored file's age is that of
its youngest copy, so an upload on another machine is judged by when it reached the store.
Temp files are only ever local.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select
from temporalio import activity

from activities.support import Heartbeater, resume_from
from knowledgeops.backup import retention as cleanup_backups
from knowledgeops.backup.archive import stored_objects
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.cleanup import (
    FIND_ORPHANS,
    REMOVE_ORPHANS,
    CleanupItem,
    CleanupPlan,
    FindOrphansRequest,
    FindOrphansResult,
    KindTotals,
    OrphanKind,
    RemoveCheckpoint,
    RemoveOrphansRequest,
    RemoveOrphansResult,
    totals,
)
from knowledgeops.contracts.document_import import DocumentImportPayload
from knowledgeops.db.audit import AuditLog
from knowledgeops.db.catalogue import DocumentRow
from knowledgeops.db.events import EventStore
from knowledgeops.documents.live_imports import live_import_inputs
from knowledgeops.errors import bad_input
from knowledgeops.files import chunk_store
from knowledgeops.files.file_store import FILE_ID_RE, write_atomically
from knowledgeops.index.live import delete_document_everywhere
from knowledgeops.runtime.resources import Resources
from knowledgeops.storage.store import StoredObject

# An upload's temp file older than this belongs to an upload that died.
UPLOAD_TEMP_AGE = timedelta(hours=1)
# Written by ChunkWriter and the parser: `<name>.tmp-<pid>` next to the file it becomes.
PARSER_TEMP_RE = re.compile(r"\.tmp-(\d+)$")
UPLOAD_TEMP_PREFIX = ".upload-"
EVENTS_TABLE, AUDIT_TABLE = "task_events", "audit_log"


# How old the view of what is needed may be when an item is judged for removal.
NEEDED_FRESH_SECONDS = 2.0


@dataclass(frozen=True)
class Needed:
    file_ids: frozenset[str]
    document_ids: frozenset[str]
    # STORAGE_URL's stored files by file id, listed with this view (for their age).
    stored: Mapping[str, StoredObject] = field(default_factory=dict)


def plan_path(settings: Settings, task_id: str) -> Path:
    return settings.data_dir / "cleanup" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', task_id)}.json"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _age(path: Path, stored: StoredObject | None = None) -> float:
    """Seconds since the file was last written, here or (`stored`) in the store, whichever is
    younger; -1 (younger than any rule) if it is in neither."""
    ages = []
    with contextlib.suppress(FileNotFoundError):
        ages.append(time.time() - path.stat().st_mtime)
    if stored is not None:  # at least 0: the store's clock may run ahead of ours
        ages.append(max(0.0, (datetime.now(UTC) - stored.modified).total_seconds()))
    return min(ages, default=-1.0)


def _entries(folder: Path) -> list[tuple[Path, os.stat_result]]:
    if not folder.is_dir():
        return []
    found = []
    for e in os.scandir(folder):
        with contextlib.suppress(FileNotFoundError):  # renamed or removed meanwhile: not ours
            if e.is_file():
                found.append((Path(e.path), e.stat()))
    return sorted(found, key=lambda entry: entry[0])


class CleanupActivities:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings

    # -- what is needed -------------------------------------------------------------------

    async def _needed(self, stored: bool = False) -> Needed:
        """`stored`: list the store's stored files too (before the rest: a file uploaded
        after the listing is young or needed by the time the view is complete)."""
        objects = await stored_objects(self.resources.files, "files") if stored else {}
        async with self.resources.db.sessions() as s:
            rows = (await s.execute(select(DocumentRow.document_id, DocumentRow.file_id))).all()
        live = await self._live_imports()
        return Needed(
            file_ids=frozenset([r.file_id for r in rows] + [p.file_id for p in live]),
            document_ids=frozenset([r.document_id for r in rows] + [p.document_id for p in live]),
            stored=objects,
        )

    async def _live_imports(self) -> list[DocumentImportPayload]:
        """Inputs of this deployment's running (or queued) DOCUMENT_IMPORT tasks."""
        return await live_import_inputs(activity.client(), self.settings)

    # -- the rules, used to list an item and again just before removing it ------------------

    def _rel(self, path: Path) -> str:
        data = self.settings.data_dir
        return str(path.relative_to(data)) if path.is_relative_to(data) else str(path)

    def _located(self, item: CleanupItem) -> Path:
        name = Path(item.name)
        return name if name.is_absolute() else self.settings.data_dir / name

    def _path(self, item: CleanupItem, folder: Path) -> Path:
        """The item's file, refusing any name that is not directly inside `folder`, and a
        stored or chunk file's that is not one (its store key would be another object's)."""
        path = self._located(item)
        if path.parent.resolve() != folder.resolve() or path.name in ("", ".", ".."):
            raise bad_input("InvalidPlan", f"{item.name!r} is not a file in {folder}")
        if item.kind == OrphanKind.FILES and not FILE_ID_RE.fullmatch(path.name):
            raise bad_input("InvalidPlan", f"{item.name!r} is not a stored file's name")
        if item.kind == OrphanKind.CHUNKS:
            try:
                chunk_store.check_document_id(self._chunk_document(path) or "")
            except ValueError:
                raise bad_input("InvalidPlan", f"{item.name!r} is no chunk file's name") from None
        return path

    def _file_orphan(self, path: Path, needed: Needed, grace: timedelta) -> bool:
        if path.name.startswith(".") or not FILE_ID_RE.fullmatch(path.name):
            return False  # temp files have their own rule; anything else is not ours
        age = _age(path, needed.stored.get(path.name))
        return path.name not in needed.file_ids and age >= grace.total_seconds()

    @staticmethod
    def _chunk_document(path: Path) -> str | None:
        return chunk_store.document_of(path)

    def _temp_orphan(self, path: Path, grace: timedelta) -> bool:
        age = _age(path)
        if path.name.startswith(UPLOAD_TEMP_PREFIX):
            return path.parent == self.settings.files_dir and age > UPLOAD_TEMP_AGE.total_seconds()
        m = PARSER_TEMP_RE.search(path.name)
        if m is None or int(m.group(1)) <= 0:
            return False
        # The grace keeps a parser of another host sharing the data dir (pid unknown here) safe.
        return not pid_alive(int(m.group(1))) and age >= grace.total_seconds()

    # -- finding --------------------------------------------------------------------------

    def _scan_files(self, needed: Needed, grace: timedelta) -> list[CleanupItem]:
        folder = self.settings.files_dir
        sizes = _sizes(folder, needed.stored)
        return [
            CleanupItem(kind=OrphanKind.FILES, name=self._rel(folder / name), bytes=size)
            for name, size in sizes.items()
            if self._file_orphan(folder / name, needed, grace)
        ]

    def _scan_chunks(self, needed: Needed, stored: Mapping[str, StoredObject]) -> list[CleanupItem]:
        folder, out = self.settings.chunks_dir, []
        for name, size in _sizes(folder, stored).items():
            doc = self._chunk_document(folder / name)
            if doc is not None and doc not in needed.document_ids:
                out.append(
                    CleanupItem(kind=OrphanKind.CHUNKS, name=self._rel(folder / name), bytes=size)
                )
        return out

    def _scan_temp(self, grace: timedelta) -> list[CleanupItem]:
        s = self.settings
        return [
            CleanupItem(kind=OrphanKind.TEMP_FILES, name=self._rel(p), bytes=st.st_size)
            for p, st in _entries(s.chunks_dir) + _entries(s.files_dir)
            if self._temp_orphan(p, grace)
        ]

    async def _scan_points(self, needed: Needed) -> list[CleanupItem]:
        live = await self.resources.live_index()
        counts = await self.resources.store.document_point_counts(live.collection)
        return [
            CleanupItem(kind=OrphanKind.POINTS, name=doc, count=n)
            for doc, n in sorted(counts.items())
            if doc not in needed.document_ids
        ]

    async def _scan_rows(self, kind: OrphanKind) -> list[CleanupItem]:
        s, db = self.settings, self.resources.db
        if kind == OrphanKind.EVENTS:
            table, before = EVENTS_TABLE, datetime.now(UTC) - timedelta(s.event_retention_days)
            count, last = await EventStore(db).older_than(before)
        else:
            table, before = AUDIT_TABLE, datetime.now(UTC) - timedelta(s.audit_retention_days)
            count, last = await AuditLog(db).older_than(before)
        if not count or last is None:
            return []
        return [CleanupItem(kind=kind, name=table, count=count, before=before, up_to_id=last)]

    @activity.defn(name=FIND_ORPHANS.name)
    async def find_orphans(self, req: FindOrphansRequest) -> FindOrphansResult:
        grace = timedelta(minutes=req.grace_minutes)
        items: list[CleanupItem] = []
        async with Heartbeater():
            # Needed first: anything that starts after this is caught by the removal's re-check.
            needed = await self._needed(stored=OrphanKind.FILES in req.kinds)
            for kind in OrphanKind:  # a fixed order, whatever the payload's order
                if kind not in req.kinds:
                    continue
                if kind == OrphanKind.FILES:
                    items += await asyncio.to_thread(self._scan_files, needed, grace)
                elif kind == OrphanKind.CHUNKS:
                    stored = await stored_objects(self.resources.files, "chunks")
                    items += await asyncio.to_thread(self._scan_chunks, needed, stored)
                elif kind == OrphanKind.POINTS:
                    items += await self._scan_points(needed)
                elif kind == OrphanKind.BACKUPS:
                    items += await asyncio.to_thread(cleanup_backups.find, self.settings, self._rel)
                elif kind == OrphanKind.TEMP_FILES:
                    items += await asyncio.to_thread(self._scan_temp, grace)
                else:
                    items += await self._scan_rows(kind)
            plan = CleanupPlan(
                task_id=req.task_id,
                created_at=datetime.now(UTC),
                dry_run=req.dry_run,
                grace_minutes=req.grace_minutes,
                items=items,
            )
            path = plan_path(self.settings, req.task_id)
            await asyncio.to_thread(write_atomically, path, plan.model_dump_json(indent=1).encode())
        return FindOrphansResult(plan_path=str(path), items=len(items), found=totals(items))

    # -- removing -------------------------------------------------------------------------

    @activity.defn(name=REMOVE_ORPHANS.name)
    async def remove_orphans(self, req: RemoveOrphansRequest) -> RemoveOrphansResult:
        path = Path(req.plan_path)
        if path.parent != plan_path(self.settings, "x").parent:
            raise bad_input("InvalidPlan", f"{path} is not a cleanup plan of this data directory")
        try:
            plan = CleanupPlan.model_validate_json(await asyncio.to_thread(path.read_text))
        except FileNotFoundError:
            raise bad_input(
                "PlanMissing", f"no cleanup plan at {path}; run the cleanup again"
            ) from None
        if len(plan.items) != req.items:
            raise bad_input(
                "PlanChanged",
                f"{path} lists {len(plan.items)} items, not {req.items}; run the cleanup again",
            )
        cp = resume_from(
            RemoveCheckpoint(total=req.items),
            lambda c: c.total == req.items and c.done <= req.items,
        )
        hb = Heartbeater(cp.model_dump())
        grace = timedelta(minutes=plan.grace_minutes)
        # A stored file's age in the store comes from a listing, taken with each fresh view.
        listed = self.resources.files.shared and any(
            i.kind == OrphanKind.FILES for i in plan.items[cp.done :]
        )
        async with hb:
            needed, seen_at = await self._needed(listed), time.monotonic()
            while cp.done < len(plan.items):
                batch = self._pool_batch(plan.items, cp.done)
                if batch:  # judged together, under the pool lock
                    blobs = [self._located(i) for i in batch]
                    outcomes = await asyncio.to_thread(
                        cleanup_backups.remove_pool_blobs, self.settings, blobs
                    )
                else:
                    batch = [plan.items[cp.done]]
                    if time.monotonic() - seen_at > NEEDED_FRESH_SECONDS:
                        # An import may have started since: judge each item on a fresh view.
                        needed, seen_at = await self._needed(listed), time.monotonic()
                    outcomes = [await self._remove(batch[0], needed, grace)]
                for item, removed in zip(batch, outcomes, strict=True):
                    tally = cp.removed if removed else cp.skipped
                    tally.setdefault(item.kind.value, KindTotals()).add(item)
                cp.done += len(batch)
                hb.update(cp.model_dump())
        return RemoveOrphansResult(removed=cp.removed, skipped=cp.skipped)

    def _pool_batch(self, items: list[CleanupItem], start: int) -> list[CleanupItem]:
        """The run of backup pool blobs starting at `start` (empty if that item is none)."""
        batch: list[CleanupItem] = []
        for item in items[start:]:
            if item.kind != OrphanKind.BACKUPS:
                break
            if not cleanup_backups.is_pool_blob(self.settings, self._located(item)):
                break
            batch.append(item)
        return batch

    async def _remove(self, item: CleanupItem, needed: Needed, grace: timedelta) -> bool:
        """Remove one item if it is still not needed; False if it is needed again (kept). An
        item already gone (removed by an attempt that crashed before its heartbeat) counts as
        removed."""
        s = self.settings
        if item.kind == OrphanKind.POINTS:
            if item.name in needed.document_ids:
                return False
            await delete_document_everywhere(self.resources.store, item.name)
            return True
        if item.kind in (OrphanKind.EVENTS, OrphanKind.AUDIT):
            await self._delete_rows(item)
            return True
        if item.kind == OrphanKind.BACKUPS:
            return await asyncio.to_thread(
                cleanup_backups.remove_archive, self.settings, self._located(item)
            )
        upload_temp = Path(item.name).name.startswith(UPLOAD_TEMP_PREFIX)
        folder = s.files_dir if item.kind == OrphanKind.FILES or upload_temp else s.chunks_dir
        path = self._path(item, folder)
        if item.kind == OrphanKind.TEMP_FILES:
            return await asyncio.to_thread(_unlink_if, path, lambda p: self._temp_orphan(p, grace))
        files, doc = self.resources.files, self._chunk_document(path)
        if await files.exists(path):  # here or in the store; else an earlier attempt removed it
            if item.kind == OrphanKind.FILES:
                orphan = await asyncio.to_thread(self._file_orphan, path, needed, grace)
            else:
                orphan = doc not in needed.document_ids
            if not orphan:
                return False
            await files.remove(path)  # the working copy, then the store's
        if item.kind == OrphanKind.CHUNKS and doc is not None and doc not in needed.document_ids:
            # Its live-version pointer goes with its files (a document no longer listed).
            await self.resources.live_versions.delete(doc)
        return True

    async def _delete_rows(self, item: CleanupItem) -> None:
        if item.before is None or item.up_to_id is None:
            raise bad_input("InvalidPlan", f"rows item {item.name!r} has no cutoff")
        db = self.resources.db
        store = EventStore(db) if item.kind == OrphanKind.EVENTS else AuditLog(db)
        # Bounded batches: each its own short transaction; the heartbeat runs meanwhile.
        while await store.delete_older_than(item.before, item.up_to_id):
            pass


def _sizes(folder: Path, stored: Mapping[str, StoredObject]) -> dict[str, int]:
    """Every file name in `folder` or (STORAGE_URL) in the store, with its size (the store's,
    which holds the true copy), in name order."""
    sizes = {p.name: st.st_size for p, st in _entries(folder)}
    sizes.update({name: obj.size for name, obj in stored.items()})
    return dict(sorted(sizes.items()))


def _unlink_if(path: Path, rule: Callable[[Path], bool]) -> bool:
    if not path.exists():
        return True
    if not rule(path):
        return False
    path.unlink(missing_ok=True)
    return True
