"""CLEANUP_EXECUTE's part in backups: archives past retention, archives a killed backup left
without a manifest, and the pool blobs only those archives listed.

The archive layout and its rules belong to `knowledgeops/backup/store.py` (BACKUP_EXECUTE's
module); this only applies them. Pool blobs are judged and removed with the pool lock held, as
the backup's own pruning does, so a blob a running backup just found present is never taken:
if a backup holds the lock, blobs are neither listed nor removed this time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from knowledgeops.backup import store as backups
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.cleanup import CleanupItem, OrphanKind


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _pool_needed(settings: Settings, leaving: set[Path]) -> set[str]:
    """Blobs listed by any archive folder (complete or in progress) other than `leaving`."""
    needed: set[str] = set()
    for folder in settings.backups_dir.iterdir():
        if folder.is_dir() and folder.name != backups.POOL and folder not in leaving:
            needed |= backups.listed_blobs(folder)
    return needed


def find(settings: Settings, name_of: Callable[[Path], str]) -> list[CleanupItem]:
    """Archives first, then the pool blobs that removing them frees (removal keeps the order)."""
    going = [*backups.past_retention(settings), *backups.abandoned_archives(settings)]
    items = [
        CleanupItem(kind=OrphanKind.BACKUPS, name=name_of(p), bytes=tree_bytes(p)) for p in going
    ]
    pool = backups.pool_dir(settings.backups_dir)
    if not pool.is_dir():
        return items
    with backups.pool_lock(settings.backups_dir, blocking=False) as held:
        if not held:
            return items  # a backup is copying into the pool: judge the pool next time
        needed = _pool_needed(settings, set(going))
        items += [
            CleanupItem(kind=OrphanKind.BACKUPS, name=name_of(b), bytes=b.stat().st_size)
            for b in sorted(pool.iterdir())
            if b.is_file() and b.name not in needed
        ]
    return items


def is_pool_blob(settings: Settings, path: Path) -> bool:
    return path.parent == backups.pool_dir(settings.backups_dir)


def remove_archive(settings: Settings, path: Path) -> bool:
    """False if the archive is no longer one to remove (kept)."""
    if not path.exists():
        return True  # removed by an attempt that crashed before its heartbeat
    leaving = [*backups.past_retention(settings), *backups.abandoned_archives(settings)]
    if path not in leaving:
        return False  # newer archives went away meanwhile (or it got its manifest)
    backups.remove_archive(path)
    return True


def remove_pool_blobs(settings: Settings, blobs: Sequence[Path]) -> list[bool]:
    """Per blob: removed (or already gone), or False: kept (still listed, or a backup holds
    the pool)."""
    with backups.pool_lock(settings.backups_dir, blocking=False) as held:
        if not held:
            return [False] * len(blobs)
        needed = _pool_needed(settings, set())
        out = []
        for blob in blobs:
            if blob.name in needed:
                out.append(False)
                continue
            blob.unlink(missing_ok=True)
            out.append(True)
        return out
