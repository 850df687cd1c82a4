"""Handing back the embedded index's cold mapped pages, so the worker's resident memory is what
it uses, not what it once wrote.

Edge keeps its files mapped (shared, file-backed): the full-precision vectors (read to rescore
a search's best few, and scanned whole only for points not indexed yet), the payloads (read
for a search's hits), the sparse vectors' store, the write-ahead logs, and the embedding
cache's collections (read when a document is imported again). Every page written or read
stays in the process's resident set until the kernel needs the memory: at 1,000,000 chunks
that was ~7 GB of the worker's 9 GB RSS, which the kernel's OOM killer counts as the worker's,
and container runtimes as its working set.

`release` drops this process's mappings of those pages (madvise MADV_DONTNEED). For a shared
file mapping that loses nothing: a dirty page keeps its data in the page cache and is written
back as before, and the next access maps the page again from the cache (a minor fault). What a
search touches on every query (the HNSW graph, the quantized vectors it compares, the payload
indexes it filters by) is left mapped.

The same call on memory that is not a shared file mapping would discard it, so no mapping may
change between reading `/proc/self/maps` and the call: whatever can unmap a shard's files (a
write, a flush, opening or closing a shard) runs inside `GATE.sharing()`, and `release` holds
the gate alone; each span is also checked, just before, to still be the file it was.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

MADV_DONTNEED = 4
# How long a release waits for the writes under way to end before it gives up until next time.
ALONE_TIMEOUT = 1.0
# Files a search reads a few pages of, or none: rescoring vectors, payloads, sparse vectors
# (the inverted index scores a search), write-ahead logs.
_COLD_FILES = re.compile(
    r"/(?:wal/|vector_storage/vectors/chunk_\d+\.mmap$|payload_storage/page_\d+\.dat$"
    r"|vector_storage-[^/]+/store/page_\d+\.dat$)"
)


def cold_mappings(
    maps: Iterable[str], root: Path, cold_folders: Iterable[Path] = ()
) -> list[tuple[int, int, str]]:
    """(start, length, path) of each shared file mapping of `/proc/self/maps` lines that is a cold
    file under `root`, or any file under one of `cold_folders` (a collection read only by id)."""
    prefix = f"{root}/"
    whole = tuple(f"{folder}/" for folder in cold_folders)
    out = []
    for line in maps:
        fields = line.split(maxsplit=5)
        # Only shared mappings: dropping a private one's pages would discard what was written
        # to it. A file deleted meanwhile belongs to a retired shard, unmapped soon.
        if len(fields) < 6 or fields[1][3] != "s" or not fields[5].startswith(prefix):
            continue
        path = fields[5].rstrip("\n")
        if path.endswith(" (deleted)"):
            continue
        if path.startswith(whole) or _COLD_FILES.search(path):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            out.append((start, end - start, path))
    return out


class MappingGate:
    """Many at once share it, or `release` holds it alone (a readers-writer lock). A release
    waiting for it goes first: new sharers wait, so a stream of writes cannot starve it."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._sharing = 0
        self._alone = False
        self._waiting = 0

    @contextlib.contextmanager
    def sharing(self) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: not self._alone and not self._waiting)
            self._sharing += 1
        try:
            yield
        finally:
            with self._changed:
                self._sharing -= 1
                self._changed.notify_all()

    @contextlib.contextmanager
    def alone(self, timeout: float) -> Iterator[bool]:
        """Whether it is held alone (False after `timeout` seconds of waiting: skip)."""
        with self._changed:
            self._waiting += 1
            try:
                held = self._changed.wait_for(
                    lambda: not self._alone and self._sharing == 0, timeout
                )
            finally:
                self._waiting -= 1
                self._changed.notify_all()
            self._alone = held
        try:
            yield held
        finally:
            if held:
                with self._changed:
                    self._alone = False
                    self._changed.notify_all()


# One per process: the mappings are the process's, whichever engine opened them.
GATE = MappingGate()


def release(root: Path, cold_folders: Iterable[Path] = ()) -> int:
    """Drop this process's mapped pages of the cold files under `root` (see the module
    docstring); the number of mappings released. Linux only (elsewhere: 0)."""
    if not sys.platform.startswith("linux"):
        return 0
    root, folders = root.resolve(), [p.resolve() for p in cold_folders]
    madvise = _libc().madvise
    released = 0
    with GATE.alone(ALONE_TIMEOUT) as held:
        if not held:
            return 0  # writes kept it busy: the next look releases
        with open("/proc/self/maps") as f:
            lines = f.readlines()
        for start, length, path in cold_mappings(lines, root, folders):
            try:
                still = os.readlink(f"/proc/self/map_files/{start:x}-{start + length:x}")
            except FileNotFoundError:
                continue  # unmapped meanwhile (it cannot be, under the gate; never guess)
            except PermissionError:
                _say_once("/proc/self/map_files is not readable here: mapped index pages stay")
                return released
            if still != path:
                continue
            if madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), MADV_DONTNEED) != 0:
                log.warning(
                    "could not release mapped pages of %s: errno %d", path, ctypes.get_errno()
                )
                continue
            released += 1
    return released


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return libc


@functools.cache
def _say_once(message: str) -> None:
    log.warning(message)
