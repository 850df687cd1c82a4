"""Where backups live and which ones retention lets go.

An archive is a folder under `settings.backups_dir` holding a `manifest.json`; archive names
sort chronologically (a UTC timestamp first). BACKUP_EXECUTE writes them (and prunes after a
successful run), restore reads them, CLEANUP_EXECUTE lists and removes what is past retention.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from knowledgeops.settings import Settings

MANIFEST = "manifest.json"


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
