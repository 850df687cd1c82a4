"""A document's chunks as the index has them: a page of its live version in the chunk store.

DocumentService.chunks decides who may read them (as `get` does); this module only reads the
store and says why a known document has none to show.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel

from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files.chunk_store import ChunkReader
from knowledgeops.files.data_files import DataFiles

# The largest page one request reads (the API's `limit` bound).
MAX_CHUNK_PAGE = 500


class ChunkOut(BaseModel):
    index: int
    text: str
    page: int | None
    heading: str | None


class ChunkPage(BaseModel):
    document_id: str
    # The live version (the import run that published it); None for chunks stored before
    # versions existed.
    version: str | None
    total: int
    offset: int
    limit: int
    chunks: list[ChunkOut]


class ChunksNotPublishedError(RuntimeError):
    """The document is known but no version of its chunks is live yet (409 at the API)."""


def check_page(offset: int, limit: int) -> None:
    """The API's bounds, for callers that do not come through it (the CLI on its own)."""
    if offset < 0 or not 1 <= limit <= MAX_CHUNK_PAGE:
        raise ValueError(
            f"offset must be >= 0 and limit 1-{MAX_CHUNK_PAGE} (got offset {offset}, limit {limit})"
        )


async def live_page(
    versions: LiveVersions, files: DataFiles, document_id: str, offset: int, limit: int
) -> ChunkPage:
    """A page of the live version. FileNotFoundError when nothing is live."""
    version = await versions.get(document_id)
    await files.fetch_version(document_id, version)  # another machine's (STORAGE_URL)
    return await asyncio.to_thread(
        read_page, versions.chunks_dir, document_id, version, offset, limit
    )


def read_page(
    chunks_dir: Path, document_id: str, version: str | None, offset: int, limit: int
) -> ChunkPage:
    """Blocking file reads: call it in a thread. FileNotFoundError when nothing is live."""
    reader = ChunkReader(chunks_dir, document_id, version)
    try:
        chunks = reader.read(offset, offset + limit)
        return ChunkPage(
            document_id=document_id,
            version=reader.version,
            total=reader.count,
            offset=offset,
            limit=limit,
            chunks=[
                ChunkOut(index=c.index, text=c.text, page=c.page, heading=c.heading) for c in chunks
            ],
        )
    finally:
        reader.close()


_WHY = {
    "queued": "its import is waiting for a worker",
    "importing": "its import is still running and no earlier one published a version",
    "failed": "its import failed",
    "cancelled": "its import was cancelled before a version was published",
}


def not_published(
    document_id: str, status: str, task_id: str, error: str | None = None
) -> ChunksNotPublishedError:
    why = _WHY.get(status, f"no chunk files are stored for it (status {status})")
    if error:
        why += f" ({error[:300]})"  # the reason, not a whole traceback
    # What to do next depends on why: wait for a running import, import again otherwise.
    then = (
        f"they appear when task {task_id} completes"
        if status in ("queued", "importing")
        else "import the file again"
    )
    return ChunksNotPublishedError(
        f"Document {document_id!r} has no published chunks yet: {why}; {then}"
    )
