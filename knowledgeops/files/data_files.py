"""The data folder's large files (stored files, chunk files, OCR pages) where STORAGE_URL keeps
them.

These files are read by path (a parser subprocess opens a stored file, a chunk reader seeks in
a chunk file), and none of them changes once written under its name: a stored file's name is
its content hash, a chunk file's names its import's version, an OCR page is the text of fixed
bytes. So with STORAGE_URL set, the store holds the true copy and the data folder is this
machine's working copy: a step `fetch`es a file before it reads it and `send`s it once it is
complete, with no lock and no conditional write (two machines sending the same name send the
same bytes). With STORAGE_URL empty, the data folder is the store and every method here is the
local operation alone.

A store key is the file's path under the data folder, except that a document's chunk files
are kept under a folder of their own (`chunks/<document>/<file>`), so one listing finds every
version of a document without reading every document's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from knowledgeops.config.settings import Settings
from knowledgeops.files import chunk_store
from knowledgeops.storage.opening import open_store
from knowledgeops.storage.store import Store, StoredObjectMissing

log = logging.getLogger(__name__)


def open_storage(settings: Settings) -> tuple[Store, DataFiles]:
    """STORAGE_URL's store (else the data folder as one), and the data files kept in it."""
    store = open_store(settings.storage_url, settings.data_dir, settings.aws_env())
    return store, DataFiles(settings.data_dir, store if settings.storage_url else None)


async def check_storage(settings: Settings) -> None:
    """At start-up: a wrong STORAGE_URL, endpoint, key or bucket stops it (StorageConfigError
    naming the setting), not the first upload."""
    if settings.storage_url:
        await open_storage(settings)[0].check()


# How often a process with STORAGE_URL removes idle copies from its working copy.
TRIM_INTERVAL_SECONDS = 600.0


async def keep_working_copy_trimmed(
    files: DataFiles, settings: Settings, stop: asyncio.Event
) -> None:
    """Until `stop`: `files.trim` every TRIM_INTERVAL_SECONDS (a process's background task
    when STORAGE_URL is set; without one there is no copy to trim)."""
    while files.shared and not stop.is_set():
        try:
            removed = await files.trim(settings.working_copy_hours * 3600)
        except Exception as e:  # a store that is down now: the next round tries again
            log.warning("trimming the working copy in %s failed: %s", files.data_dir, e)
        else:
            if removed:
                log.info("removed %d idle files from the working copy", removed)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), TRIM_INTERVAL_SECONDS)


class DataFiles:
    def __init__(self, data_dir: Path, store: Store | None) -> None:
        """`store`: STORAGE_URL's (None: the data folder is the store)."""
        self.data_dir = data_dir.absolute()
        self.store = store
        self.chunks_dir = self.data_dir / "chunks"

    @property
    def shared(self) -> bool:
        return self.store is not None

    def describe(self) -> str:
        return self.store.describe() if self.store else str(self.data_dir)

    def key(self, path: Path) -> str:
        """The store key of a file under the data folder."""
        relative = path.absolute().relative_to(self.data_dir)
        if relative.parent == Path("chunks"):
            document = chunk_store.document_of(relative)
            if document is not None:
                return f"chunks/{document}/{relative.name}"
        return relative.as_posix()

    async def fetch(self, path: Path) -> bool:
        """Make `path` present here (from the store if it is only there); False if it is
        nowhere."""
        if self.store is None:
            return path.exists()  # noqa: ASYNC240 (one stat: cheaper than a thread hop)
        try:
            os.utime(path)  # marked as used: `trim` keeps it
            return True
        except FileNotFoundError:
            return await self._download(path)

    async def _download(self, path: Path) -> bool:
        assert self.store is not None
        try:
            await self.store.get_file(self.key(path), path)
        except StoredObjectMissing:
            return False
        return True

    async def fetch_all(self, paths: Iterable[Path]) -> list[Path]:
        """`fetch` each; returns those that are nowhere."""
        paths = list(paths)
        if self.store is None:
            return [p for p in paths if not p.exists()]
        found = await asyncio.gather(*(self.fetch(p) for p in paths))
        return [p for p, ok in zip(paths, found, strict=True) if not ok]

    async def send(self, *paths: Path) -> None:
        """Copy complete files into the store; chunk offset indexes last (in the store an
        `.idx` says its version is complete)."""
        if self.store is None:
            return
        for path in index_files_last(paths):
            await self.store.put_file(self.key(path), path)

    async def exists(self, path: Path) -> bool:
        if path.exists():  # noqa: ASYNC240 (one stat: cheaper than a thread hop)
            return True
        return self.store is not None and await self.store.exists(self.key(path))

    async def size(self, path: Path) -> int | None:
        """The file's size in bytes (here, else in the store); None if it is nowhere."""
        try:
            return (await asyncio.to_thread(path.stat)).st_size
        except FileNotFoundError:
            return await self.store.size(self.key(path)) if self.store is not None else None

    async def drop_copies(self, *paths: Path) -> None:
        """With a store: remove this machine's copies (they stay in the store)."""
        if self.store is not None:
            for path in paths:
                await asyncio.to_thread(path.unlink, missing_ok=True)

    async def remove(self, *paths: Path) -> None:
        """Here and in the store, chunk offset indexes first (a version is never seen complete
        without its data); missing ones are not an error."""
        for path in reversed(index_files_last(paths)):
            await asyncio.to_thread(path.unlink, missing_ok=True)
            if self.store is not None:
                await self.store.delete(self.key(path))

    async def trim(self, older_than: float) -> int:
        """With a store: remove this machine's copies of files not written or fetched for
        `older_than` seconds, where the store holds them whole (same size); returns how many.
        Safe at any time: a step fetches a file again before it reads it, and a file a reader
        has open stays readable until it closes it."""
        if self.store is None:
            return 0
        removed = 0
        for path, size in await asyncio.to_thread(_idle_copies, self.data_dir, older_than):
            if await self.store.size(self.key(path)) == size:
                removed += await asyncio.to_thread(_remove_if_idle, path, older_than)
        return removed

    # Chunk files: one document's versions (chunk_store's functions on the working copy, and
    # the same on the store).

    def version_paths(self, document_id: str, version: str | None) -> tuple[Path, Path]:
        return chunk_store.version_paths(self.chunks_dir, document_id, version)

    async def has_version(self, document_id: str, version: str) -> bool:
        """The version's chunk files are complete (its index file, sent last and removed first,
        is there); with a store, the store says (a copy here may be of a version another
        machine has removed since)."""
        index = self.version_paths(document_id, version)[1]
        if self.store is None:
            return index.exists()
        return await self.store.exists(self.key(index))

    async def fetch_version(self, document_id: str, version: str | None) -> None:
        """The version's chunk files, here; the reader's FileNotFoundError if they are not."""
        await self.fetch_all(self.version_paths(document_id, version))

    async def send_version(self, document_id: str, version: str) -> None:
        await self.send(*self.version_paths(document_id, version))

    async def document_files(self, document_id: str) -> list[str]:
        """Names of the document's chunk files in the store (empty without one)."""
        if self.store is None:
            return []
        prefix = f"chunks/{chunk_store.check_document_id(document_id)}"
        return [o.key.rsplit("/", 1)[1] for o in await self.store.list(prefix)]

    async def only_version(self, document_id: str, version: str, live: str | None) -> bool:
        """chunk_store.only_version, asked of the store too."""
        # Inline, as before STORAGE_URL: a scan of one document's names, cheaper than a thread.
        if not chunk_store.only_version(self.chunks_dir, document_id, version, live):
            return False
        mine = chunk_store.version_file_names(document_id, version)
        return all(name in mine for name in await self.document_files(document_id))

    async def remove_other_versions(
        self,
        document_id: str,
        version: str,
        previous: str | None,
        *,
        previous_only: bool = False,
        only_version: bool = False,
    ) -> None:
        """chunk_store.remove_other_versions, here and in the store."""
        await asyncio.to_thread(
            chunk_store.remove_other_versions,
            self.chunks_dir,
            document_id,
            version,
            previous,
            previous_only=previous_only,
            only_version=only_version,
        )
        if self.store is None:
            return
        sections = chunk_store.sections_file(self.chunks_dir, document_id, version)
        if previous_only or only_version:
            doomed = [sections]
            if previous not in (None, version):
                doomed += self.version_paths(document_id, previous)
            await self.remove(*doomed)
            return
        keep = {p.name for p in self.version_paths(document_id, version)}
        names = await self.document_files(document_id)
        await self.remove(*(self.chunks_dir / n for n in names if n not in keep))

    async def discard(self, document_id: str, version: str, live: str | None) -> None:
        """An unpublished version's chunk and section files (never the live version's)."""
        sections = chunk_store.sections_file(self.chunks_dir, document_id, version)
        chunks = () if live == version else self.version_paths(document_id, version)
        await self.remove(*chunks, sections)

    async def delete_document(self, document_id: str) -> None:
        """Every version's files of a deleted document."""
        await asyncio.to_thread(chunk_store.delete_chunks, self.chunks_dir, document_id)
        if self.store is not None:
            await self.store.delete_prefix(f"chunks/{chunk_store.check_document_id(document_id)}")


# The working copy's folders; everything in them is also in the store (sent when complete).
_COPIED = ("files", "chunks", "ocr")


def _remove_if_idle(path: Path, older_than: float) -> bool:
    """Looked at again just before: a step may have fetched (touched) it since the listing."""
    try:
        if path.stat().st_mtime >= time.time() - older_than:
            return False
        path.unlink()
    except FileNotFoundError:
        return False  # removed meanwhile
    return True


def index_files_last(paths: Iterable[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: p.suffix == ".idx")


def complete_files(data_dir: Path, folders: Iterable[str]) -> Iterator[Path]:
    """The files under the data folder's `folders`, without temporary ones (names starting
    with ".", which include earlier versions' work folders, and writers' `.tmp-<pid>` files)."""
    for name in folders:
        for folder, dirs, names in os.walk(data_dir / name):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for file in sorted(names):
                if not file.startswith(".") and ".tmp-" not in file:
                    yield Path(folder, file)


def _idle_copies(data_dir: Path, older_than: float) -> list[tuple[Path, int]]:
    """Files of the working copy last written (or fetched) more than `older_than` seconds ago,
    with their sizes; never an earlier installation's `.live` pointers (only ever read here)."""
    cutoff = time.time() - older_than
    found = []
    for path in complete_files(data_dir, _COPIED):
        if path.name.endswith(chunk_store.LIVE_SUFFIX):
            continue
        try:
            st = path.stat()
        except FileNotFoundError:
            continue  # removed meanwhile
        if st.st_mtime < cutoff:
            found.append((path, st.st_size))
    return found
