"""What is in a folder (and the store): its files, their sizes and their ages.

With STORAGE_URL, stored files and chunk files are looked for in the store too (it holds the
true copies; the data folder is this machine's working copy). An item is still named by its
path in the data folder (`files/<id>`, `chunks/<document>~<version>.jsonl`), which names one
local file and one store key, and removing it removes both. A stored file's age is that of
its youngest copy, so an upload on another machine is judged by when it reached the store.
Temp files are only ever local.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from knowledgeops.storage.store import StoredObject


def age(path: Path, stored: StoredObject | None = None) -> float:
    """Seconds since the file was last written, here or (`stored`) in the store, whichever is
    younger; -1 (younger than any rule) if it is in neither."""
    ages = []
    with contextlib.suppress(FileNotFoundError):
        ages.append(time.time() - path.stat().st_mtime)
    if stored is not None:  # at least 0: the store's clock may run ahead of ours
        ages.append(max(0.0, (datetime.now(UTC) - stored.modified).total_seconds()))
    return min(ages, default=-1.0)


def entries(folder: Path) -> list[tuple[Path, os.stat_result]]:
    if not folder.is_dir():
        return []
    found = []
    for e in os.scandir(folder):
        with contextlib.suppress(FileNotFoundError):  # renamed or removed meanwhile: not ours
            if e.is_file():
                found.append((Path(e.path), e.stat()))
    return sorted(found, key=lambda entry: entry[0])


def sizes(folder: Path, stored: Mapping[str, StoredObject]) -> dict[str, int]:
    """Every file name in `folder` or (STORAGE_URL) in the store, with its size (the store's,
    which holds the true copy), in name order."""
    found = {p.name: st.st_size for p, st in entries(folder)}
    found.update({name: obj.size for name, obj in stored.items()})
    return dict(sorted(found.items()))
