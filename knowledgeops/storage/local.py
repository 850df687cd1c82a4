"""`Store` on a local folder: one file per key, written through a temp file and renamed."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from knowledgeops.storage.store import (
    PendingFile,
    StorageConfigError,
    Store,
    StoredObject,
    StoredObjectMissing,
    check_key,
    check_prefix,
    deletable_prefix,
)

_COPY_BLOCK = 1024 * 1024
# A key's file can be missing in three ways: no such file, a folder in its place (`files`
# when only `files/x` exists), or a file where a parent folder would be.
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)


class LocalStore(Store):
    def __init__(self, root: Path) -> None:
        self.root = root.absolute()

    def describe(self) -> str:
        return str(self.root)

    def __repr__(self) -> str:
        return f"LocalStore({self.root})"

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(_replace, self._path(key), lambda out: out.write(data))

    async def put_file(self, key: str, path: Path) -> None:
        target = self._path(key)

        def copy() -> None:
            with path.open("rb") as source:
                _replace(target, lambda out: shutil.copyfileobj(source, out, _COPY_BLOCK))

        await asyncio.to_thread(copy)

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except _MISSING:
            raise StoredObjectMissing(key, self.describe()) from None

    async def get_file(self, key: str, path: Path) -> None:
        source_path = self._path(key)

        def copy() -> None:
            try:
                source = source_path.open("rb")
            except _MISSING:
                raise StoredObjectMissing(key, self.describe()) from None
            with source:  # opened before the temp file exists: a miss leaves nothing behind
                _replace(path, lambda out: shutil.copyfileobj(source, out, _COPY_BLOCK))

        await asyncio.to_thread(copy)

    async def exists(self, key: str) -> bool:
        return await self.size(key) is not None

    async def size(self, key: str) -> int | None:
        path = self._path(key)
        try:
            st = await asyncio.to_thread(path.stat)
        except _MISSING:
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    async def list(self, prefix: str) -> list[StoredObject]:
        bare = check_prefix(prefix)
        base = self.root.joinpath(*bare.split("/")) if bare else self.root
        return await asyncio.to_thread(_walk, self.root, base)

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(_unlink, self._path(key))

    async def delete_prefix(self, prefix: str) -> int:
        bare = deletable_prefix(prefix)
        removed = 0
        for obj in await self.list(bare):
            if await asyncio.to_thread(_unlink, self._path(obj.key)):
                removed += 1
        return removed

    async def check(self) -> None:
        try:
            await asyncio.to_thread(self._probe)
        except OSError as exc:
            raise StorageConfigError(
                f"cannot store objects in {self.root}: {exc.strerror or exc}. Make that folder "
                "writable by this user, or point KNOWLEDGEOPS_DATA_DIR or STORAGE_URL "
                "(file:///absolute/folder or s3://bucket/prefix) somewhere usable"
            ) from exc

    def _probe(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=self.root, prefix=".check-") as probe:
            probe.write(b"ok")
            probe.flush()


def _walk(root: Path, base: Path) -> list[StoredObject]:
    found: list[StoredObject] = []
    for folder, dirs, files in os.walk(base):  # a missing base walks as empty
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith("."):  # a write in progress (or left by a crash)
                continue
            path = Path(folder, name)
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # deleted while we listed: it is not there any more
            found.append(
                StoredObject(
                    key=path.relative_to(root).as_posix(),
                    size=st.st_size,
                    modified=datetime.fromtimestamp(st.st_mtime, UTC),
                )
            )
    return sorted(found, key=lambda o: o.key)


def _replace(path: Path, fill: Callable[[BinaryIO], object]) -> None:
    pending = PendingFile(path)
    try:
        fill(pending.out)
    except BaseException:
        pending.discard()
        raise
    pending.commit()


def _unlink(path: Path) -> bool:
    """True if a file was removed. Empty folders stay: harmless, and removing them would race
    with a concurrent put into the same folder."""
    try:
        path.unlink()
    except _MISSING:
        return False
    return True
