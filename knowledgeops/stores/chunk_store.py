"""Chunk storage: one JSON-lines file per document plus an offset index for range reads.

Chunk text lives here, not in Temporal payloads; activities pass a document id and an index
range. Files are written under a temporary name and renamed, so a retried or killed parse never
leaves a half-written chunk file behind.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    content_hash: str
    page: int | None = None
    heading: str | None = None


def _paths(chunks_dir: Path, document_id: str) -> tuple[Path, Path]:
    if "/" in document_id or document_id in {".", ".."}:
        raise ValueError(f"Invalid document id {document_id!r}")
    return chunks_dir / f"{document_id}.jsonl", chunks_dir / f"{document_id}.idx"


class ChunkWriter:
    """Appends chunks in order; `commit()` publishes the file atomically."""

    def __init__(self, chunks_dir: Path, document_id: str) -> None:
        chunks_dir.mkdir(parents=True, exist_ok=True)
        self._final = _paths(chunks_dir, document_id)
        suffix = f".tmp-{os.getpid()}"
        self._tmp = tuple(p.with_name(p.name + suffix) for p in self._final)
        self._data = self._tmp[0].open("wb")
        self._offsets = array("Q", [0])
        self.count = 0

    def add(self, text: str, content_hash: str, page: int | None, heading: str | None) -> None:
        record = {"i": self.count, "t": text, "h": content_hash, "p": page, "s": heading}
        line = json.dumps(record, ensure_ascii=False).encode() + b"\n"
        self._data.write(line)
        self._offsets.append(self._offsets[-1] + len(line))
        self.count += 1

    def commit(self) -> None:
        self._data.close()
        with self._tmp[1].open("wb") as f:
            self._offsets.tofile(f)
        os.replace(self._tmp[0], self._final[0])
        os.replace(self._tmp[1], self._final[1])

    def abort(self) -> None:
        self._data.close()
        for p in self._tmp:
            p.unlink(missing_ok=True)


class ChunkReader:
    def __init__(self, chunks_dir: Path, document_id: str) -> None:
        self._data_path, idx_path = _paths(chunks_dir, document_id)
        if not idx_path.exists():
            raise FileNotFoundError(
                f"No chunks stored for document {document_id!r}; the parse step must run first"
            )
        self._offsets = array("Q")
        with idx_path.open("rb") as f:
            self._offsets.frombytes(f.read())
        self.count = len(self._offsets) - 1

    def read(self, start: int, end: int) -> list[Chunk]:
        end = min(end, self.count)
        if start >= end:
            return []
        with self._data_path.open("rb") as f:
            f.seek(self._offsets[start])
            raw = f.read(self._offsets[end] - self._offsets[start])
        return [_decode(line) for line in raw.splitlines()]

    def iter_batches(self, start: int, batch_size: int) -> Iterator[list[Chunk]]:
        for s in range(start, self.count, batch_size):
            yield self.read(s, s + batch_size)


def _decode(line: bytes) -> Chunk:
    r = json.loads(line)
    return Chunk(index=r["i"], text=r["t"], content_hash=r["h"], page=r["p"], heading=r["s"])


def remove_unfinished(chunks_dir: Path, document_id: str, pid: int) -> None:
    """Remove what a writer in process `pid` left when it was killed before commit/abort."""
    for p in _paths(chunks_dir, document_id):
        p.with_name(f"{p.name}.tmp-{pid}").unlink(missing_ok=True)


def delete_chunks(chunks_dir: Path, document_id: str) -> None:
    for p in _paths(chunks_dir, document_id):
        p.unlink(missing_ok=True)
