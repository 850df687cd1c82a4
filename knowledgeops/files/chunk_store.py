"""Chunk storage: one JSON-lines file per document version plus an offset index for range reads.

Chunk text lives here, not in Temporal payloads; activities pass a document id, a version and
an index range. An import writes its own version (`<document>~<version>.jsonl` / `.idx`) next
to the live one and publishes it at the end by moving the document's live-version pointer (a
row in the app database: db/live_versions.py), so readers see the previous version until
the new one is complete, and a failed import leaves it untouched. A version's files never
change once written: they are written under a temporary name and renamed, so a retried or
killed chunking step never leaves a half-written chunk file behind. Files of earlier versions
of this code (`<document>.jsonl`, no pointer) are read as the live version; so is an earlier
pointer file (`<document>.live`) while the database has no row for its document.
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
    # The heading path search indexes with the text; None when the text begins with its
    # heading already (or has none).
    context: str | None = None

    @property
    def index_text(self) -> str:
        """What gets embedded and keyword-indexed: the text under its heading context."""
        return index_text_of(self.text, self.context)


def index_text_of(text: str, context: str | None) -> str:
    """A chunk's text as search indexes it (and as its content hash is computed)."""
    return f"{context}\n\n{text}" if context else text


# Separates a document id from a version in file names; never part of a document id.
VERSION_SEPARATOR = "~"
LIVE_SUFFIX = ".live"


def _check(name: str, what: str) -> str:
    if not name or "/" in name or VERSION_SEPARATOR in name or name in {".", ".."}:
        raise ValueError(f"Invalid {what} {name!r}")
    return name


def check_document_id(document_id: str) -> str:
    return _check(document_id, "document id")


def version_paths(chunks_dir: Path, document_id: str, version: str | None) -> tuple[Path, Path]:
    """A version's chunk file and its offset index (None: the files of an unversioned
    document, stored before versions)."""
    return _paths(chunks_dir, document_id, version)


def _paths(chunks_dir: Path, document_id: str, version: str | None = None) -> tuple[Path, Path]:
    stem = check_document_id(document_id)
    if version is not None:
        stem += VERSION_SEPARATOR + _check(version, "version")
    return chunks_dir / f"{stem}.jsonl", chunks_dir / f"{stem}.idx"


def legacy_live_version(chunks_dir: Path, document_id: str) -> str | None:
    """The version an earlier installation's pointer file names (see live_versions.py)."""
    try:
        return (chunks_dir / f"{_check(document_id, 'document id')}{LIVE_SUFFIX}").read_text()
    except FileNotFoundError:
        return None


def remove_legacy_pointer(chunks_dir: Path, document_id: str) -> None:
    (chunks_dir / f"{_check(document_id, 'document id')}{LIVE_SUFFIX}").unlink(missing_ok=True)


def has_version(chunks_dir: Path, document_id: str, version: str) -> bool:
    return _paths(chunks_dir, document_id, version)[1].exists()


def chunk_count(index_file_size: int) -> int:
    """How many chunks a version has, from the size of its offset index (one 8-byte offset
    per chunk, plus the end)."""
    return index_file_size // array("Q").itemsize - 1


def sections_file(chunks_dir: Path, document_id: str, version: str) -> Path:
    """Where the parse step leaves a version's sections for the chunk step."""
    return chunks_dir / f"{document_id}{VERSION_SEPARATOR}{version}.sections.jsonl"


def remove_other_versions(
    chunks_dir: Path,
    document_id: str,
    version: str,
    previous: str | None,
    *,
    previous_only: bool = False,
    only_version: bool = False,
) -> None:
    """After `version` went live (its pointer moved from `previous`): remove every other
    version's files (with `previous_only`, only the previously live version's: a re-index
    must not remove the files of an import of the document that is still running; with
    `only_version`, as checked by the caller, there are none, and the folder is not scanned
    again)."""
    if previous_only or only_version:
        sections_file(chunks_dir, document_id, version).unlink(missing_ok=True)
        if previous != version:
            for p in _paths(chunks_dir, document_id, previous):
                p.unlink(missing_ok=True)
        return
    keep = set(_paths(chunks_dir, document_id, version))
    for p in _version_files(chunks_dir, document_id):
        if p not in keep:
            p.unlink(missing_ok=True)


def _version_files(chunks_dir: Path, document_id: str) -> list[Path]:
    legacy = list(_paths(chunks_dir, document_id))
    # A plain scan with a prefix test: pathlib's glob cost ~10x more per publish at thousands
    # of documents (12% of the worker's CPU at 1,200 small documents, measured).
    prefix = f"{document_id}{VERSION_SEPARATOR}"
    try:
        with os.scandir(chunks_dir) as entries:
            versioned = [
                Path(e.path)
                for e in entries
                if e.name.startswith(prefix) and e.name.endswith((".jsonl", ".idx"))
            ]
    except FileNotFoundError:
        return legacy  # nothing was ever chunked here
    return legacy + versioned


def only_version(chunks_dir: Path, document_id: str, version: str, live: str | None) -> bool:
    """No other version of the document was ever left here (`live`, the published one;
    legacy files; or the files of an import that ended without cleaning up): its points can
    only be this version's."""
    if live not in (None, version):
        return False
    mine = version_file_names(document_id, version)
    return all(p.name in mine for p in _version_files(chunks_dir, document_id) if p.exists())


def version_file_names(document_id: str, version: str) -> set[str]:
    """The names of a version's files: chunks, offset index, parsed text."""
    names = {p.name for p in _paths(Path(), document_id, version)}
    return names | {sections_file(Path(), document_id, version).name}


def discard(chunks_dir: Path, document_id: str, version: str, live: str | None) -> None:
    """Remove an unpublished version's files (a failed or cancelled import's; `live` is the
    published version, never removed)."""
    if live == version:
        return
    for p in _paths(chunks_dir, document_id, version):
        p.unlink(missing_ok=True)


class ChunkWriter:
    """Appends chunks in order; `commit()` makes the version's files appear atomically."""

    def __init__(self, chunks_dir: Path, document_id: str, version: str | None = None) -> None:
        chunks_dir.mkdir(parents=True, exist_ok=True)
        self._final = _paths(chunks_dir, document_id, version)
        suffix = f".tmp-{os.getpid()}"
        self._tmp = tuple(p.with_name(p.name + suffix) for p in self._final)
        self._data = self._tmp[0].open("wb")
        self._offsets = array("Q", [0])
        self.count = 0

    def add(
        self,
        text: str,
        content_hash: str,
        page: int | None,
        heading: str | None,
        context: str | None = None,
    ) -> None:
        record: dict[str, object] = {
            "i": self.count,
            "t": text,
            "h": content_hash,
            "p": page,
            "s": heading,
        }
        if context:
            # Only when set: a chunk without one is stored exactly as before.
            record["c"] = context
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
    """Reads one version (None: the files of a document stored before versions). Both files
    are opened at once, so a publish that removes this version afterwards does not disturb
    the reader."""

    def __init__(self, chunks_dir: Path, document_id: str, version: str | None) -> None:
        self.version = version
        data_path, idx_path = _paths(chunks_dir, document_id, self.version)
        try:
            with idx_path.open("rb") as f:
                raw_offsets = f.read()
            self._data = data_path.open("rb")
        except FileNotFoundError:
            raise FileNotFoundError(
                f"No chunks stored for document {document_id!r}"
                + (f" version {self.version}" if self.version else "")
                + "; the chunk step must run first"
            ) from None
        self._offsets = array("Q")
        self._offsets.frombytes(raw_offsets)
        self.count = len(self._offsets) - 1

    def close(self) -> None:
        self._data.close()

    def __del__(self) -> None:
        data = getattr(self, "_data", None)
        if data is not None:
            data.close()

    def read(self, start: int, end: int) -> list[Chunk]:
        end = min(end, self.count)
        if start >= end:
            return []
        self._data.seek(self._offsets[start])
        raw = self._data.read(self._offsets[end] - self._offsets[start])
        return [_decode(line) for line in raw.splitlines()]

    def iter_batches(self, start: int, batch_size: int) -> Iterator[list[Chunk]]:
        for s in range(start, self.count, batch_size):
            yield self.read(s, s + batch_size)


def _decode(line: bytes) -> Chunk:
    r = json.loads(line)
    # "c" is absent from files written before chunks had a context.
    return Chunk(
        index=r["i"],
        text=r["t"],
        content_hash=r["h"],
        page=r["p"],
        heading=r["s"],
        context=r.get("c"),
    )


def remove_unfinished(
    chunks_dir: Path, document_id: str, pid: int, version: str | None = None
) -> None:
    """Remove what a writer in process `pid` left when it was killed before commit/abort."""
    for p in _paths(chunks_dir, document_id, version):
        p.with_name(f"{p.name}.tmp-{pid}").unlink(missing_ok=True)


def delete_chunks(chunks_dir: Path, document_id: str) -> None:
    """Every version of a document's files, and an earlier installation's pointer file (the
    caller removes the pointer: live_versions.py)."""
    for p in _version_files(chunks_dir, document_id):
        p.unlink(missing_ok=True)
    (chunks_dir / f"{document_id}{LIVE_SUFFIX}").unlink(missing_ok=True)


def document_of(path: Path) -> str | None:
    """The document a file of the chunk store belongs to (None: not one of its files)."""
    for suffix in (".jsonl", ".idx", LIVE_SUFFIX):
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)].split(VERSION_SEPARATOR)[0]
    return None
