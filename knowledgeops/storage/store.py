"""The object-storage interface every backend implements, its errors, and the key rules.

Keys are relative, "/"-separated strings (`files/ab/abcd...`, `chunks/doc~v1.jsonl`). They can
come from ids in requests, so every method checks them with `check_key` before use.
"""

from __future__ import annotations

import os
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

# The settings an operator can change to fix a storage problem; messages name them.
STORAGE_SETTINGS = (
    "STORAGE_URL",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
)
MAX_KEY_BYTES = 1024  # S3's limit; the local backend keeps the same one so both agree


class StorageConfigError(RuntimeError):
    """The store cannot be used as configured; the message says which setting to fix."""


class StoredObjectMissing(FileNotFoundError):
    """No object is stored under this key."""

    def __init__(self, key: str, where: str = "") -> None:
        place = f" in {where}" if where else ""
        super().__init__(
            f"no stored object {key!r}{place}: it was never written or has been deleted, or "
            "STORAGE_URL points at a different store than the one that wrote it"
        )
        self.key = key
        self.where = where

    def __reduce__(self) -> tuple[type[StoredObjectMissing], tuple[str, str]]:
        # OSError pickles as cls(*args), which would pass the message as the key.
        return (StoredObjectMissing, (self.key, self.where))


@dataclass(frozen=True)
class StoredObject:
    key: str  # relative to the store's root
    size: int
    modified: datetime  # UTC


def check_key(key: str) -> str:
    """`key` if it is a safe relative key, else ValueError saying why."""
    why = _key_problem(key)
    if why:
        raise ValueError(f"invalid storage key {key!r}: {why}")
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix names a folder: "" (everything), `files` or `files/` (the same).
    Returns it without the trailing "/"."""
    if prefix == "":
        return ""
    bare = prefix[:-1] if prefix.endswith("/") else prefix
    why = _key_problem(bare)
    if why:
        raise ValueError(f"invalid storage prefix {prefix!r}: {why}")
    return bare


def _key_problem(key: str) -> str:
    if not isinstance(key, str) or not key:
        return "it is empty"
    if "\x00" in key:
        return "it contains a NUL character"
    if "\\" in key:
        return "it contains a backslash; separate parts with '/'"
    if key.startswith("/"):
        return "it starts with '/'; keys are relative to the store's root"
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        return f"it is longer than {MAX_KEY_BYTES} bytes"
    for part in key.split("/"):
        if not part:
            return "it has an empty part ('//' or a trailing '/')"
        if part in (".", ".."):
            return f"it has a {part!r} part, which could point outside the store"
        if part.startswith("."):
            # Names starting with "." are the local backend's temp files, which lists skip.
            return f"part {part!r} starts with '.', which is reserved for temporary files"
    return ""


class Store(ABC):
    """Whole-object storage under one root. All methods check their keys with `check_key`."""

    @abstractmethod
    async def put(self, key: str, data: bytes) -> None:
        """Write the object whole: a reader sees the old object or the new one, never a part."""

    @abstractmethod
    async def put_file(self, key: str, path: Path) -> None:
        """`put` from a local file, streamed (never read into memory whole)."""

    @abstractmethod
    async def get(self, key: str) -> bytes:
        """The object's bytes; StoredObjectMissing if there is none."""

    @abstractmethod
    async def get_file(self, key: str, path: Path) -> None:
        """Download into `path` via a temp file beside it, renamed into place when complete;
        StoredObjectMissing (and no file at `path`) if there is no such object."""

    @abstractmethod
    async def exists(self, key: str) -> bool: ...

    @abstractmethod
    async def size(self, key: str) -> int | None:
        """The object's size in bytes, None if there is none."""

    @abstractmethod
    async def list(self, prefix: str) -> list[StoredObject]:
        """Every object under the folder `prefix` ("" for all), sorted by key."""

    @abstractmethod
    async def delete(self, key: str) -> None:
        """Remove the object; a missing one is not an error."""

    @abstractmethod
    async def delete_prefix(self, prefix: str) -> int:
        """Remove every object under the folder `prefix` (not ""); returns how many."""

    @abstractmethod
    async def check(self) -> None:
        """Prove the store is usable (at start-up); StorageConfigError saying what to fix."""

    @abstractmethod
    def describe(self) -> str:
        """Where the objects are kept, for logs and messages; never a secret."""


def deletable_prefix(prefix: str) -> str:
    """`check_prefix`, refusing "": one call should not be able to empty the whole store."""
    bare = check_prefix(prefix)
    if not bare:
        raise ValueError("delete_prefix needs a non-empty prefix; it will not delete everything")
    return bare


class PendingFile:
    """A temp file beside `path` that becomes `path` only on `commit`, so a half-written file
    is never seen under the real name. Blocking: run it in a thread from async code."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # Leading "." so LocalStore.list (and people) skip it; same folder so rename is atomic.
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:64]}.", suffix=".tmp")
        self.temp = Path(name)
        self.out: BinaryIO = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        self.out.write(data)

    def commit(self) -> None:
        try:
            self.out.flush()
            os.fsync(self.out.fileno())  # the data is on disk before the name points at it
            self.out.close()
            os.replace(self.temp, self.path)
        except BaseException:
            self.discard()
            raise
        fsync_dir(self.path.parent)

    def discard(self) -> None:
        self.out.close()
        self.temp.unlink(missing_ok=True)


def fsync_dir(folder: Path) -> None:
    """Make a rename durable (a crash right after it could otherwise lose the new name)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
