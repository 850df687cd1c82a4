"""Activities of BACKUP_EXECUTE: database, index export, files into the pool, manifest,
retention, and discarding an unfinished archive.

This runs in the worker because the worker owns the embedded index. Each stage writes into
the archive folder; only names and counts go back to the workflow. The index and files
stages heartbeat a checkpoint, so a retry after a crash continues where the last heartbeat
left off; the pool being content-addressed, a file copied before a crash is never copied
again either way. With STORAGE_URL, the stored files and chunk files are the store's (the
true copies): each is read from this machine's working copy if it has one, else downloaded
straight into the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.support import Heartbeater, resume_from
from knowledgeops.backup import database_dump
from knowledgeops.backup.archive import (
    DATABASE_DIR,
    INDEX_DIR,
    POINTS_PER_PART,
    CollectionMeta,
    FileEntry,
    finish_collection,
    local_sources,
    part_name,
    stored_sources,
    write_manifest,
    write_points,
)
from knowledgeops.backup.export import backup_store, export_key, is_export_key, write_export
from knowledgeops.backup.pool import here, into_pool
from knowledgeops.backup.store import (
    LISTING,
    MANIFEST,
    abandoned_archives,
    past_retention,
    pool_dir,
    pool_lock,
    prune_pool,
    remove_archive,
)
from knowledgeops.contracts.backup import (
    APPLY_RETENTION,
    BACKUP_DATABASE,
    BACKUP_FILES,
    BACKUP_INDEX,
    DISCARD_BACKUP,
    EXPORT_BACKUP,
    WRITE_MANIFEST,
    BackupStageRequest,
    DatabaseBackupResult,
    ExportResult,
    FilesBackupResult,
    FilesCheckpoint,
    IndexBackupResult,
    IndexCheckpoint,
    ManifestRequest,
    ManifestResult,
    RetentionResult,
)
from knowledgeops.errors import bad_input
from knowledgeops.index.live import aliased_index
from knowledgeops.runtime.resources import Resources
from knowledgeops.storage.store import StorageConfigError, StoredObjectMissing


class BackupActivities:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings

    def _folder(self, req: BackupStageRequest) -> Path:
        folder = self.settings.backups_dir / req.archive
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @contextlib.asynccontextmanager
    async def _pool_locked(self) -> AsyncIterator[None]:
        """Wait for the pool lock without blocking the event loop (heartbeats go on)."""
        while True:
            with pool_lock(self.settings.backups_dir, blocking=False) as held:
                if held:
                    yield
                    return
            await asyncio.sleep(0.5)

    @activity.defn(name=BACKUP_DATABASE.name)
    async def backup_database(self, req: BackupStageRequest) -> DatabaseBackupResult:
        folder = self._folder(req)
        try:
            async with Heartbeater():
                kind, path = await database_dump.dump(self.settings, folder / DATABASE_DIR)
        except database_dump.DumpToolMissingError as e:
            raise bad_input("DumpToolMissing", str(e)) from None
        except database_dump.DumpFailedError as e:
            raise ApplicationError(str(e), type="DatabaseDumpFailed") from None
        return DatabaseBackupResult(
            kind=kind, path=str(path.relative_to(folder)), bytes=path.stat().st_size
        )

    @activity.defn(name=BACKUP_INDEX.name)
    async def backup_index(self, req: BackupStageRequest) -> IndexBackupResult:
        store = self.resources.store
        root = self._folder(req) / INDEX_DIR
        collections = sorted(await store.collections())
        aliased = await aliased_index(store)
        total = sum([await store.count(c) for c in collections])
        cp = resume_from(
            IndexCheckpoint(total=total),
            lambda c: c.collection is None or c.collection in collections,
        )
        cp.total = max(total, cp.done)
        hb = Heartbeater(cp.model_dump())
        async with hb:
            for name in collections:
                if cp.collection is not None and name < cp.collection:
                    continue  # exported by an earlier attempt
                if cp.collection != name:
                    cp = cp.model_copy(
                        update={
                            "collection": name,
                            "offset": None,
                            "part": 0,
                            "collection_points": 0,
                        }
                    )
                folder = root / name
                folder.mkdir(parents=True, exist_ok=True)
                dimension, distance = await store.vector_params(name)
                # At offset None a collection is either not begun (part 0) or finished.
                more = cp.offset is not None or cp.part == 0
                while more:
                    points, after = await store.export_points(name, cp.offset, POINTS_PER_PART)
                    size = 0
                    if points:
                        size = await asyncio.to_thread(
                            write_points, folder / part_name(cp.part), points
                        )
                    more = after is not None
                    cp = cp.model_copy(
                        update={
                            "offset": after,
                            "part": cp.part + (1 if points else 0),
                            "done": cp.done + len(points),
                            "collection_points": cp.collection_points + len(points),
                            "bytes": cp.bytes + size,
                        }
                    )
                    hb.update(cp.model_dump())
                live = aliased is not None and aliased[0] == name
                meta = CollectionMeta(
                    name=name,
                    dimension=dimension,
                    distance=distance,
                    points=cp.collection_points,
                    live=live,
                    metadata=aliased[1] if aliased is not None and live else {},
                )
                await asyncio.to_thread(finish_collection, folder, meta, cp.part)
        return IndexBackupResult(collections=len(collections), points=cp.done, bytes=cp.bytes)

    @activity.defn(name=BACKUP_FILES.name)
    async def backup_files(self, req: BackupStageRequest) -> FilesBackupResult:
        s = self.settings
        listing_path = self._folder(req) / LISTING
        pool = pool_dir(s.backups_dir)
        pool.mkdir(parents=True, exist_ok=True)
        files = self.resources.files
        if files.shared:
            sources = await stored_sources(files, s.files_dir, s.chunks_dir)
        else:
            sources = await asyncio.to_thread(local_sources, s.files_dir, s.chunks_dir)
        listed = listing_path.stat().st_size if listing_path.exists() else 0
        cp = resume_from(FilesCheckpoint(total=len(sources)), lambda c: c.listing_bytes <= listed)
        cp.total = max(len(sources), cp.done)
        hb = Heartbeater(cp.model_dump())
        async with hb, self._pool_locked():
            fd = os.open(listing_path, os.O_RDWR | os.O_CREAT, 0o644)
            with os.fdopen(fd, "r+b") as listing:
                # Lines past the checkpoint belong to files the resumed run lists again.
                listing.truncate(cp.listing_bytes)
                listing.seek(cp.listing_bytes)
                for rel, path in sources:
                    if rel <= cp.after:
                        continue
                    entry, copied = await self._pooled(rel, path, pool)
                    if entry is None:
                        continue  # removed since it was listed (its document was deleted)
                    listing.write(entry.model_dump_json().encode() + b"\n")
                    listing.flush()
                    stored = rel.startswith("files/")
                    cp = cp.model_copy(
                        update={
                            "after": rel,
                            "listing_bytes": listing.tell(),
                            "done": cp.done + 1,
                            "stored_files": cp.stored_files + stored,
                            "chunk_files": cp.chunk_files + (not stored),
                            "copied": cp.copied + copied,
                            "present": cp.present + (not copied),
                            "bytes_copied": cp.bytes_copied + (entry.bytes if copied else 0),
                            "bytes": cp.bytes + entry.bytes,
                        }
                    )
                    hb.update(cp.model_dump())
                os.fsync(listing.fileno())
        return FilesBackupResult(
            stored_files=cp.stored_files,
            chunk_files=cp.chunk_files,
            copied=cp.copied,
            present=cp.present,
            bytes_copied=cp.bytes_copied,
            bytes=cp.bytes,
        )

    async def _pooled(self, rel: str, path: Path, pool: Path) -> tuple[FileEntry | None, bool]:
        """`into_pool`; a file only in STORAGE_URL's store is downloaded into the pool (the
        working copy would be a second copy of every file on this machine)."""
        files = self.resources.files
        if files.store is None or await asyncio.to_thread(here, rel, path, pool):
            return await asyncio.to_thread(into_pool, rel, path, pool, log=activity.logger)
        download = pool / f".tmp-fetch-{path.name}-{os.getpid()}"  # pruned if we die
        try:
            await files.store.get_file(files.key(path), download)
            return await asyncio.to_thread(
                into_pool, rel, download, pool, move=True, log=activity.logger
            )
        except StoredObjectMissing:
            return None, False  # removed since it was listed (its document was deleted)
        finally:
            download.unlink(missing_ok=True)

    @activity.defn(name=WRITE_MANIFEST.name)
    async def write_backup_manifest(self, req: ManifestRequest) -> ManifestResult:
        folder = self._folder(BackupStageRequest(archive=req.archive))
        async with Heartbeater():
            parts = await asyncio.to_thread(write_manifest, folder, req)
        return ManifestResult(path=str(folder.resolve()), parts=parts)

    @activity.defn(name=EXPORT_BACKUP.name)
    async def export_backup(self, req: BackupStageRequest) -> ExportResult:
        """The archive as one file at BACKUP_URL, then the exports there past BACKUP_KEEP
        removed. Written whole and uploaded in one put, so a retry starts over and a reader
        never sees part of one."""
        store = backup_store(self.settings)
        if store is None:
            return ExportResult(url=None, bytes=0, removed=[])
        folder = self.settings.backups_dir / req.archive
        out = self.settings.backups_dir / f".{export_key(req.archive)}"
        hb = Heartbeater({"files": 0})
        async with hb:
            try:
                size = await asyncio.to_thread(
                    write_export, folder, out, lambda n: hb.note({"files": n})
                )
                await store.put_file(export_key(req.archive), out)
            except StorageConfigError as e:
                raise bad_input("BackupUrlUnusable", str(e)) from None
            finally:
                out.unlink(missing_ok=True)
            exports = sorted(o.key for o in await store.list("") if is_export_key(o.key))
            removed = exports[: max(0, len(exports) - self.settings.backup_keep)]
            for key in removed:
                await store.delete(key)
        return ExportResult(
            url=f"{self.settings.backup_url.rstrip('/')}/{export_key(req.archive)}",
            bytes=size,
            removed=removed,
        )

    @activity.defn(name=APPLY_RETENTION.name)
    async def apply_backup_retention(self, req: BackupStageRequest) -> RetentionResult:
        s = self.settings

        def apply() -> RetentionResult:
            old = [p for p in past_retention(s) if p.name != req.archive]
            abandoned = abandoned_archives(s)
            for path in (*old, *abandoned):
                remove_archive(path)
            blobs, freed = prune_pool(s)
            return RetentionResult(
                archives_removed=[p.name for p in old],
                abandoned_removed=[p.name for p in abandoned],
                blobs_removed=blobs,
                bytes_freed=freed,
            )

        async with Heartbeater(), self._pool_locked():
            return await asyncio.to_thread(apply)

    @activity.defn(name=DISCARD_BACKUP.name)
    async def discard_backup(self, req: BackupStageRequest) -> bool:
        """Remove an unfinished archive (never one with a manifest). The blobs it alone
        listed go at the next retention."""
        folder = self.settings.backups_dir / req.archive
        if not folder.is_dir() or (folder / MANIFEST).exists():
            return False
        async with Heartbeater():
            await asyncio.to_thread(remove_archive, folder)
        return True
