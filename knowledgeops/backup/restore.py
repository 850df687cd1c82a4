"""Restore a backup archive (a folder, or an export: a `.tar` here, at a URL or at BACKUP_URL;
see export.py): verify every checksum, refuse to mix it into existing data, then
the database, the index points (upserted as exported: no embedding is paid again), the stored
files and the chunk files.

It runs in the calling process (the CLI), not on a worker: a restore replaces what workers
work on, so nothing may run meanwhile. With the embedded index that is enforced (the index
folder admits one process); with QDRANT_URL the operator stops the workers first.

With STORAGE_URL, each stored file and chunk file restored into the data folder is also sent
to the store (which every machine reads), and the store's files count as data already there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel
from sqlalchemy import text

from knowledgeops.backup import database_dump
from knowledgeops.backup.archive import (
    FileEntry,
    Manifest,
    copy_hashing,
    load_manifest,
    read_listing,
    read_points,
    resolve_archive,
    stored_objects,
    verify,
)
from knowledgeops.backup.export import unpacked
from knowledgeops.backup.store import pool_dir
from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database, migrate_to_head
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files import chunk_store, file_store
from knowledgeops.files.data_files import DataFiles, open_storage
from knowledgeops.index.engine import IndexLockedError, Kind
from knowledgeops.index.legacy import sync_document_fields
from knowledgeops.index.live import index_of, remove_alias, switch_live
from knowledgeops.index.opening import open_index
from knowledgeops.index.points import kind_of
from knowledgeops.index.vector_index import VectorIndex

_TABLES = {"documents": "documents", "task_events": "domain events", "audit_log": "audit records"}


class RestoreRefusedError(RuntimeError):
    """Nothing was written: the archive is damaged, or the target holds data."""


class RestoreReport(BaseModel):
    archive: str
    database: str
    documents: int
    collections: int
    points: int
    stored_files: int
    chunk_files: int
    files_bytes: int


async def existing_data(
    settings: Settings, db: Database, store: VectorIndex, files: DataFiles | None = None
) -> list[str]:
    """What the target already holds (empty: safe to restore into); `files`: STORAGE_URL's
    store is looked into too."""
    found = []
    async with db.sessions() as s:
        for table, what in _TABLES.items():
            n = int((await s.execute(text(f"SELECT COUNT(*) FROM {table}"))).scalar_one())
            if n:
                found.append(f"{n} {what}")
    if settings.files_dir.is_dir():
        n = sum(1 for p in settings.files_dir.iterdir() if file_store.FILE_ID_RE.fullmatch(p.name))
        if n:
            found.append(f"{n} stored files")
    if settings.chunks_dir.is_dir():
        n = len({d for p in settings.chunks_dir.iterdir() if (d := chunk_store.document_of(p))})
        if n:
            found.append(f"chunk files of {n} documents")
    if files is not None and files.shared:
        n = len(await stored_objects(files, "files"))
        if n:
            found.append(f"{n} stored files in {files.describe()}")
        chunks = await stored_objects(files, "chunks")
        n = len({chunk_store.document_of(Path(name)) for name in chunks})
        if n:
            found.append(f"chunk files of {n} documents in {files.describe()}")
    points = sum([await store.count(c) for c in await store.collections()])
    if points:
        found.append(f"{points} index points")
    return found


def _open_index(settings: Settings) -> VectorIndex:
    try:
        return open_index(settings)
    except IndexLockedError:
        raise RestoreRefusedError(
            f"The embedded index at {settings.index_path} is held by another process (a "
            "worker or `knowledgeops dev`): stop it, then run the restore again. Nothing was "
            "restored."
        ) from None


def _restore_file(settings: Settings, pool: Path, entry: FileEntry) -> Path:
    target = settings.data_dir / entry.path
    target.parent.mkdir(parents=True, exist_ok=True)
    if copy_hashing(pool / entry.blob, target) != entry.sha256:
        raise RuntimeError(f"{pool / entry.blob} changed during the restore; run it again")
    return target


async def _restore_files(
    settings: Settings, archive: Path, files: DataFiles
) -> tuple[int, int, int, list[Path]]:
    """(stored files, chunk files, bytes, an earlier installation's `.live` pointer files)."""
    pool = pool_dir(archive.parent)
    stored = chunks = size = 0
    pointers: list[Path] = []
    indexes: list[Path] = []
    listing = read_listing(archive)  # one line at a time: a listing can be long
    while (entry := await asyncio.to_thread(next, listing, None)) is not None:
        target = await asyncio.to_thread(_restore_file, settings, pool, entry)
        if target.suffix == chunk_store.LIVE_SUFFIX:
            pointers.append(target)  # for the database (`_restore`), not the store
        elif target.suffix == ".idx":
            indexes.append(target)  # last: in the store an .idx says its version is complete
        else:
            await files.send(target)
        stored += entry.path.startswith("files/")
        chunks += entry.path.startswith("chunks/")
        size += entry.bytes
    await files.send(*indexes)
    return stored, chunks, size, pointers


async def restore_archive(
    settings: Settings,
    name_or_path: str,
    *,
    force: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> RestoreReport:
    # Held by a worker? Say so before spending minutes on downloads and checksums.
    store = _open_index(settings)
    try:
        async with unpacked(settings, name_or_path, say) as exported:
            archive = exported or resolve_archive(settings, name_or_path)
            manifest = load_manifest(archive)
            files = open_storage(settings)[1]
            return await _restore(settings, archive, manifest, store, files, force, say)
    finally:
        store.close()


async def _restore(
    settings: Settings,
    archive: Path,
    manifest: Manifest,
    store: VectorIndex,
    files: DataFiles,
    force: bool,
    say: Callable[[str], None],
) -> RestoreReport:
    say(f"verifying {archive} ...")
    problems = await asyncio.to_thread(verify, archive, manifest)
    if problems:
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise RestoreRefusedError(
            f"{archive} failed verification; nothing was restored:\n  {shown}{more}\n"
            "Restore an older archive (or repair this one from a copy)."
        )
    kind = database_dump.database_kind(settings)
    if manifest.database.kind != kind:
        raise RestoreRefusedError(
            f"The archive holds a {manifest.database.kind} database but DATABASE_URL points to "
            f"{kind}; set DATABASE_URL to a {manifest.database.kind} database. Nothing was "
            "restored."
        )
    odd = [c.name for c in manifest.index if c.distance != "Cosine"]
    if odd:
        raise RestoreRefusedError(f"Collections {odd} do not use cosine distance; not ours.")
    db = await Database.open(settings)
    try:
        found = await existing_data(settings, db, store, files)
    finally:
        await db.close()
    if found and not force:
        raise RestoreRefusedError(
            f"The target is not empty ({', '.join(found)} in {settings.data_dir} / its "
            f"database{' / STORAGE_URL' if files.shared else ''}); a restore over it would "
            "mix two states. Restore into an empty data directory and database (and "
            "STORAGE_URL, if set), or pass --force to replace them with the archive's. "
            "Nothing was restored."
        )
    say(f"restoring the {kind} database ...")
    db_file = archive / manifest.database.part.path
    await database_dump.restore(settings, manifest.database.kind, db_file)
    await migrate_to_head(settings.resolved_database_url)  # an older archive's schema
    points = 0
    if not any(c.live for c in manifest.index):
        await remove_alias(store)
    for collection in manifest.index:
        say(f"restoring {collection.points} points of {collection.name} ...")
        if force:
            await store.drop_collection(collection.name)
        for part in collection.parts:
            batch = await asyncio.to_thread(read_points, archive / part.path)
            if batch:
                await store.import_points(collection.name, collection.dimension, batch)
            points += len(batch)
        if collection.live:
            # Search answers from it again, embedding queries with its model.
            await switch_live(
                store, index_of(collection.name, collection.metadata), collection.dimension
            )
    say(
        f"restoring {manifest.stored_files} stored files and {manifest.chunk_files} chunk files "
        f"into {files.describe()} ..."
    )
    stored, chunks, size, pointers = await _restore_files(settings, archive, files)
    db = await Database.open(settings)
    try:
        if files.shared and pointers:
            # Other machines read only the database for which version is live.
            versions = LiveVersions(db, settings.chunks_dir)
            with_rows = await versions.documents()
            for pointer in pointers:
                document = pointer.name.removesuffix(chunk_store.LIVE_SUFFIX)
                if document not in with_rows:
                    await versions.put(document, pointer.read_text())
        # An archive of an earlier version has points without owner and tags: they come from
        # the restored catalogue (a no-op rewrite for points that have them).
        for collection in manifest.index:
            if kind_of(collection.name) == Kind.CHUNKS:
                await sync_document_fields(store, collection.name, db)
        async with db.sessions() as s:
            documents = int((await s.execute(text("SELECT COUNT(*) FROM documents"))).scalar_one())
    finally:
        await db.close()
    return RestoreReport(
        archive=archive.name,
        database=kind,
        documents=documents,
        collections=len(manifest.index),
        points=points,
        stored_files=stored,
        chunk_files=chunks,
        files_bytes=size,
    )
