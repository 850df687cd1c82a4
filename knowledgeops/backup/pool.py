"""Putting a stored file or chunk file into the content-addressed pool
(`backups/pool/<sha256><ext>`, see `store.py`) and the listing entry that names its blob.

A file is copied into the pool unless its blob is there already, so a backup after a backup
copies only new files and a retry never copies a file twice.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from knowledgeops.backup.archive import FileEntry, copy_hashing, sha256_file

_log = logging.getLogger(__name__)


def here(rel: str, path: Path, pool: Path) -> bool:
    """The file can be pooled without the store: it is in the working copy, or it is a stored
    file whose blob (named by its id, its hash) the pool has."""
    return path.is_file() or (rel.startswith("files/") and (pool / path.name).is_file())


def into_pool(
    rel: str,
    path: Path,
    pool: Path,
    *,
    move: bool = False,
    log: logging.Logger | logging.LoggerAdapter[Any] = _log,
) -> tuple[FileEntry | None, bool]:
    """The pool entry of the file `rel` (at `path`), copying it into the pool unless its blob
    is there already (`move`: `path` is a download of it, moved in instead). A stored file's
    id is its hash, so a present one is not even read. `log`: where a changed hash is
    reported (the backup activity passes its activity logger)."""
    name = rel.rsplit("/", 1)[1]
    suffix = Path(name).suffix if rel.startswith("chunks/") else ""
    try:
        if rel.startswith("files/"):
            sha = name[:64]
            suffix = name[64:]
        else:
            sha = sha256_file(path)
        blob = pool / f"{sha}{suffix}"
        if blob.exists():
            return FileEntry(path=rel, blob=blob.name, sha256=sha, bytes=blob.stat().st_size), False
        if move:
            actual = sha if rel.startswith("chunks/") else sha256_file(path)
            os.replace(path, blob)
        else:
            actual = copy_hashing(path, blob)
    except FileNotFoundError:
        return None, False
    if actual != sha:
        # The file changed while we read it (a re-import), or a stored file no longer
        # matches its id: keep what was copied, under its own hash.
        log.warning("%s: content hash %s differs from %s", rel, actual, sha)
        real = pool / f"{actual}{suffix}"
        os.replace(blob, real)
        blob, sha = real, actual
    return FileEntry(path=rel, blob=blob.name, sha256=sha, bytes=blob.stat().st_size), True
