"""The rules that make a file an orphan, used to list an item and again just before removing
it, and how an item is named: by its path in the data folder (absolute if outside it)."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path

from knowledgeops.cleanup.listing import age
from knowledgeops.cleanup.needed import Needed
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.cleanup import CleanupItem, OrphanKind
from knowledgeops.errors import bad_input
from knowledgeops.files import chunk_store
from knowledgeops.files.file_store import FILE_ID_RE

# An upload's temp file older than this belongs to an upload that died.
UPLOAD_TEMP_AGE = timedelta(hours=1)
# Written by ChunkWriter and the parser: `<name>.tmp-<pid>` next to the file it becomes.
PARSER_TEMP_RE = re.compile(r"\.tmp-(\d+)$")
UPLOAD_TEMP_PREFIX = ".upload-"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def name_of(settings: Settings, path: Path) -> str:
    data = settings.data_dir
    return str(path.relative_to(data)) if path.is_relative_to(data) else str(path)


def located(settings: Settings, item: CleanupItem) -> Path:
    name = Path(item.name)
    return name if name.is_absolute() else settings.data_dir / name


def item_path(settings: Settings, item: CleanupItem, folder: Path) -> Path:
    """The item's file, refusing any name that is not directly inside `folder`, and a
    stored or chunk file's that is not one (its store key would be another object's)."""
    path = located(settings, item)
    if path.parent.resolve() != folder.resolve() or path.name in ("", ".", ".."):
        raise bad_input("InvalidPlan", f"{item.name!r} is not a file in {folder}")
    if item.kind == OrphanKind.FILES and not FILE_ID_RE.fullmatch(path.name):
        raise bad_input("InvalidPlan", f"{item.name!r} is not a stored file's name")
    if item.kind == OrphanKind.CHUNKS:
        try:
            chunk_store.check_document_id(chunk_document(path) or "")
        except ValueError:
            raise bad_input("InvalidPlan", f"{item.name!r} is no chunk file's name") from None
    return path


def file_orphan(path: Path, needed: Needed, grace: timedelta) -> bool:
    if path.name.startswith(".") or not FILE_ID_RE.fullmatch(path.name):
        return False  # temp files have their own rule; anything else is not ours
    file_age = age(path, needed.stored.get(path.name))
    return path.name not in needed.file_ids and file_age >= grace.total_seconds()


def chunk_document(path: Path) -> str | None:
    return chunk_store.document_of(path)


def temp_orphan(settings: Settings, path: Path, grace: timedelta) -> bool:
    temp_age = age(path)
    if path.name.startswith(UPLOAD_TEMP_PREFIX):
        return path.parent == settings.files_dir and temp_age > UPLOAD_TEMP_AGE.total_seconds()
    m = PARSER_TEMP_RE.search(path.name)
    if m is None or int(m.group(1)) <= 0:
        return False
    # The grace keeps a parser of another host sharing the data dir (pid unknown here) safe.
    return not pid_alive(int(m.group(1))) and temp_age >= grace.total_seconds()
