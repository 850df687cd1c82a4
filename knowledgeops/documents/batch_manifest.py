"""A batch import's manifest: the list of its files, kept in storage, read a range at a time.

Ten thousand files' ids and names are ~1-2 MB, too much for a workflow's input (and no
business of Temporal's: only ids cross it), so the submission writes them here, one
`ManifestEntry` a line, named by the content's hash (`batches/<manifest id>.jsonl`, sent to
STORAGE_URL's store like every other data file), and the workflow carries the id. The file
never changes once written.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Sequence
from pathlib import Path

from knowledgeops.contracts.document_batch import ManifestEntry
from knowledgeops.files.data_files import DataFiles
from knowledgeops.files.file_store import write_atomically

BATCHES_FOLDER = "batches"


def manifest_path(data_dir: Path, manifest_id: str) -> Path:
    return data_dir / BATCHES_FOLDER / f"{manifest_id}.jsonl"


async def write_manifest(files: DataFiles, entries: Sequence[ManifestEntry]) -> str:
    """Store the manifest; returns its id (the SHA-256 of its bytes)."""
    data = b"".join(e.model_dump_json().encode() + b"\n" for e in entries)
    manifest_id = hashlib.sha256(data).hexdigest()
    path = manifest_path(files.data_dir, manifest_id)
    if not path.exists():
        await asyncio.to_thread(write_atomically, path, data)
    await files.send(path)
    return manifest_id


class ManifestMissingError(FileNotFoundError):
    pass


async def read_manifest(
    files: DataFiles, manifest_id: str, start: int = 0, end: int | None = None
) -> list[ManifestEntry]:
    """Entries [start, end) of a stored manifest."""
    path = manifest_path(files.data_dir, manifest_id)
    if not await files.fetch(path):
        raise ManifestMissingError(
            f"the batch's manifest {manifest_id} is not in {files.describe()}; submit the "
            "files again"
        )
    return await asyncio.to_thread(_read_range, path, start, end)


def _read_range(path: Path, start: int, end: int | None) -> list[ManifestEntry]:
    with path.open("rb") as f:
        lines = itertools.islice(f, start, end)
        return [ManifestEntry.model_validate_json(line) for line in lines]


async def position_of(files: DataFiles, manifest_id: str, document_id: str) -> int | None:
    """Where a document is in a stored manifest (None: not in it)."""
    entries = await read_manifest(files, manifest_id)
    return next((n for n, e in enumerate(entries) if e.document_id == document_id), None)
