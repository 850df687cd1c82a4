"""Where backups live and which ones retention lets go.

An archive is a folder under `settings.backups_dir` holding a `manifest.json`; archive names
sort chronologically (a UTC timestamp first). BACKUP_EXECUTE writes them (and prunes after a
successful run), restore reads them, CLEANUP_EXECUTE lists and removes what is past retention.

Stored files and chunk files are not copied into each archive: they go once into a shared,
content-addressed pool (`backups/pool/<sha256><ext>`), and each archive's listing
(`files.jsonl`) names the blobs it needs. So a backup after a backup copies only new files,
and a pool blob may go only when no archive folder lists it any more (`prune_pool`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from knowledgeops.config.settings import Settings

MANIFEST = "manifest.json"
# Per archive: one JSON line per stored file / chunk file it references in the pool.
LISTING = "files.jsonl"
POOL = "pool"
_LOCK = ".pool.lock"
# A folder without manifest older than this can no longer be a backup in progress (the
# workflow's execution timeout is shorter): its task was terminated or timed out.
ABANDONED_AFTER = timedelta(hours=24)


def pool_dir(backups_dir: Path) -> Path:
    return backups_dir / POOL


def list_archives(settings: Settings) -> list[Path]:
    """Complete archives (those with a manifest), oldest first."""
    root = settings.backups_dir
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / MANIFEST).is_file())


def past_retention(settings: Settings) -> list[Path]:
    """Archives beyond the newest BACKUP_KEEP, oldest first."""
    archives = list_archives(settings)
    return archives[: max(0, len(archives) - settings.backup_keep)]


def remove_archive(path: Path) -> None:
    shutil.rmtree(path)


def archive_time(path: Path) -> datetime | None:
    """When the archive was started, from its name (None for a folder that is no archive)."""
    try:
        return datetime.strptime(path.name[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def abandoned_archives(settings: Settings, now: datetime | None = None) -> list[Path]:
    """Archive folders that never got a manifest and are too old to be in progress."""
    root = settings.backups_dir
    if not root.is_dir():
        return []
    cutoff = (now or datetime.now(UTC)) - ABANDONED_AFTER
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir()
        and not (p / MANIFEST).exists()
        and (started := archive_time(p)) is not None
        and started < cutoff
    )


@contextlib.contextmanager
def pool_lock(backups_dir: Path, *, blocking: bool = True) -> Iterator[bool]:
    """Exclusive lock on the pool: copying files into it and pruning it never overlap, so a
    blob a backup just found present cannot be pruned before its listing names it. Yields
    False (not held) when `blocking` is off and another process holds it."""
    backups_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(backups_dir / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def listed_blobs(archive: Path) -> set[str]:
    """Pool blobs an archive folder's listing names. A listing still being written may end
    in a torn line: everything before it counts."""
    blobs: set[str] = set()
    listing = archive / LISTING
    if not listing.is_file():
        return blobs
    with listing.open("rb") as f:
        for line in f:
            try:
                blobs.add(str(json.loads(line)["blob"]))
            except (ValueError, KeyError, TypeError):
                if line.endswith(b"\n"):
                    raise ValueError(f"{listing} has an invalid line: {line[:200]!r}") from None
    return blobs


def prune_pool(settings: Settings) -> tuple[int, int]:
    """Remove pool blobs no archive folder (complete or in progress) lists; returns (blobs,
    bytes). Call it with `pool_lock` held."""
    root = settings.backups_dir
    pool = pool_dir(root)
    if not pool.is_dir():
        return 0, 0
    needed: set[str] = set()
    for folder in root.iterdir():
        if folder.is_dir() and folder.name != POOL:
            needed |= listed_blobs(folder)
    removed = freed = 0
    for blob in pool.iterdir():
        # Temporary names (".tmp-...") belong to a copy in progress or a dead one; a copy in
        # progress holds the lock we hold, so these are dead.
        if blob.name not in needed:
            freed += blob.stat().st_size
            blob.unlink()
            removed += 1
    return removed, freed
