"""The backup archive format, shared by the backup activities (which write it) and restore
(which reads it): manifest, checksums, the content-addressed pool, the index export.

    backups/pool/<sha256><ext>                  stored files and chunk files, once each
    backups/<UTC timestamp>-<id>/
        database/app.db | database/app.pgdump   the application database
        index/<collection>/<00000>.jsonl.gz     index points: id, vector (float32), payload
        index/<collection>/collection.json      vector size, distance, point count
        files.jsonl                             the pool blobs this archive references
        manifest.json                           written last: sha256 of every part above

The manifest is written last and atomically, so a folder without one is a backup that did
not finish, never mistaken for a complete one. Blob names are their content's SHA-256, so
the pool's checksums are its names.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import re
import struct
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from knowledgeops.backup.store import LISTING, MANIFEST, pool_dir
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.backup import ManifestRequest
from knowledgeops.files.chunk_store import LIVE_SUFFIX, document_of
from knowledgeops.files.data_files import DataFiles
from knowledgeops.files.file_store import FILE_ID_RE, write_atomically
from knowledgeops.index.points import StoredPoint
from knowledgeops.storage.store import StoredObject, fsync_dir

FORMAT_VERSION = 1
DATABASE_DIR = "database"
INDEX_DIR = "index"
COLLECTION_META = "collection.json"
POINTS_PER_PART = 1000
_BLOCK = 1024 * 1024
# What a listing may restore into: a stored file or a chunk file, never a path elsewhere.
_LISTED_PATH = re.compile(
    r"^(files/[0-9a-f]{64}(\.[a-z0-9]{1,10})?|chunks/[^/\\]+\.(jsonl|idx|live))$"
)


class Part(BaseModel):
    path: str  # relative to the archive folder
    sha256: str
    bytes: int


class DatabasePart(BaseModel):
    kind: Literal["sqlite", "postgresql"]
    part: Part


class CollectionMeta(BaseModel):
    name: str
    dimension: int
    distance: str
    points: int
    # The live index's collection (the alias names it) and its metadata (embedding model,
    # chunking): a restore points the alias at it again.
    live: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)


class IndexCollection(CollectionMeta):
    parts: list[Part]


class FileEntry(BaseModel):
    """One stored file or chunk file: where it goes in the data directory, its pool blob."""

    path: str
    blob: str
    sha256: str
    bytes: int


class Manifest(BaseModel):
    format: int = FORMAT_VERSION
    archive: str
    task_id: str
    label: str | None = None
    started_at: datetime
    completed_at: datetime
    database: DatabasePart
    index: list[IndexCollection]
    listing: Part
    stored_files: int
    chunk_files: int
    files_bytes: int


class ArchiveError(RuntimeError):
    """The archive is missing, incomplete, or not what it claims to be."""


# -- checksums and the pool -----------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def part_of(archive: Path, relative: str) -> Part:
    path = archive / relative
    return Part(path=relative, sha256=sha256_file(path), bytes=path.stat().st_size)


def copy_hashing(source: Path, target: Path) -> str:
    """Copy `source` to `target` atomically (temporary name, fsync, rename); returns the
    SHA-256 of what was copied."""
    tmp = target.with_name(f".tmp-{target.name}-{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with source.open("rb") as src, tmp.open("wb") as out:
            while block := src.read(_BLOCK):
                digest.update(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return digest.hexdigest()


async def stored_objects(files: DataFiles, folder: str) -> dict[str, StoredObject]:
    """STORAGE_URL's stored files (`folder` "files") or chunk files ("chunks"), by the name
    their file has in the data folder (empty without a store). A key of any other shape was
    not written by DataFiles and is left out: it could not be named unambiguously."""
    if files.store is None:
        return {}
    found: dict[str, StoredObject] = {}
    for obj in await files.store.list(folder):
        parts = obj.key.split("/")
        if folder == "files" and len(parts) == 2 and FILE_ID_RE.fullmatch(parts[1]):
            found[parts[1]] = obj
        # A chunk file's key is `chunks/<its document>/<its name>` (DataFiles.key).
        elif folder == "chunks" and len(parts) == 3 and document_of(Path(parts[2])) == parts[1]:
            found[parts[2]] = obj
    return found


def local_sources(files_dir: Path, chunks_dir: Path) -> list[tuple[str, Path]]:
    """A backup's stored files and chunk files in the data folder: (listing path, file), in
    path order (temporary files left out)."""
    found: list[tuple[str, Path]] = []
    if files_dir.is_dir():
        found += [
            (f"files/{p.name}", p)
            for p in files_dir.iterdir()
            if FILE_ID_RE.fullmatch(p.name) and p.is_file()
        ]
    if chunks_dir.is_dir():
        found += [
            (f"chunks/{p.name}", p)
            for p in chunks_dir.iterdir()
            # `.live` names each document's published version (chunk_store).
            if p.suffix in (".jsonl", ".idx", LIVE_SUFFIX) and p.is_file()
        ]
    return sorted(found)


async def stored_sources(
    files: DataFiles, files_dir: Path, chunks_dir: Path
) -> list[tuple[str, Path]]:
    """The same with STORAGE_URL: the store's objects (the true copies), listed under the
    paths their working copies have, so an archive is the same whichever way it was made."""
    found = [(f"files/{n}", files_dir / n) for n in await stored_objects(files, "files")]
    found += [(f"chunks/{n}", chunks_dir / n) for n in await stored_objects(files, "chunks")]
    return sorted(found)


# -- index export ---------------------------------------------------------------------------


def part_name(number: int) -> str:
    return f"{number:05d}.jsonl.gz"


def write_points(path: Path, points: list[StoredPoint]) -> int:
    """One export part (gzip JSON lines; vectors as little-endian float32, which is what
    Qdrant stores, so the round trip is exact). Returns its size."""
    lines = []
    for p in points:
        vector = base64.b64encode(struct.pack(f"<{len(p.vector)}f", *p.vector)).decode()
        lines.append(json.dumps({"id": p.id, "v": vector, "p": p.payload}, ensure_ascii=False))
    write_atomically(path, gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=6))
    return path.stat().st_size


def read_points(path: Path) -> list[StoredPoint]:
    points = []
    for line in gzip.decompress(path.read_bytes()).splitlines():
        r = json.loads(line)
        raw = base64.b64decode(r["v"])
        vector = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        points.append(StoredPoint(id=r["id"], vector=vector, payload=r["p"]))
    return points


def finish_collection(folder: Path, meta: CollectionMeta, parts: int) -> None:
    """Drop parts an earlier attempt wrote past the end, then record the collection."""
    for stale in folder.glob("*.jsonl.gz"):
        if int(stale.name.split(".")[0]) >= parts:
            stale.unlink()
    write_atomically(folder / COLLECTION_META, meta.model_dump_json().encode())


# -- the manifest ---------------------------------------------------------------------------


def write_manifest(folder: Path, req: ManifestRequest) -> int:
    """Checksum every part and publish the manifest (atomically, last). Idempotent."""
    if (folder / MANIFEST).is_file():
        manifest = Manifest.model_validate_json((folder / MANIFEST).read_bytes())
        return 2 + sum(len(c.parts) for c in manifest.index)
    collections = []
    index_root = folder / INDEX_DIR
    for meta_path in sorted(index_root.glob(f"*/{COLLECTION_META}")):
        meta = CollectionMeta.model_validate_json(meta_path.read_bytes())
        parts = [
            part_of(folder, str(p.relative_to(folder)))
            for p in sorted(meta_path.parent.glob("*.jsonl.gz"))
        ]
        collections.append(IndexCollection(**meta.model_dump(), parts=parts))
    files = req.files
    manifest = Manifest(
        archive=req.archive,
        task_id=req.task_id,
        label=req.label,
        started_at=req.started_at,
        completed_at=datetime.now(UTC),
        database=DatabasePart(kind=req.database.kind, part=part_of(folder, req.database.path)),
        index=collections,
        listing=part_of(folder, LISTING),
        stored_files=files.stored_files,
        chunk_files=files.chunk_files,
        files_bytes=files.bytes,
    )
    write_atomically(
        folder / MANIFEST, json.dumps(manifest.model_dump(mode="json"), indent=1).encode()
    )
    fsync_dir(folder)
    return 2 + sum(len(c.parts) for c in collections)


# -- reading an archive ---------------------------------------------------------------------


def resolve_archive(settings: Settings, name_or_path: str) -> Path:
    """An archive given by name (under BACKUPS) or by path to its folder."""
    candidates = [settings.backups_dir / name_or_path, Path(name_or_path)]
    for path in candidates:
        if (path / MANIFEST).is_file():
            return path.resolve()
    for path in candidates:
        if path.is_dir():
            raise ArchiveError(
                f"{path} has no {MANIFEST}: it is a backup that never finished (or not a "
                "backup at all); pick a complete archive (`ls` the backups folder)"
            )
    raise ArchiveError(
        f"No backup archive {name_or_path!r} (looked in {settings.backups_dir} and at the path)"
    )


def load_manifest(archive: Path) -> Manifest:
    try:
        manifest = Manifest.model_validate_json((archive / MANIFEST).read_bytes())
    except (OSError, ValidationError) as e:
        raise ArchiveError(f"{archive / MANIFEST} is unreadable or invalid: {e}") from None
    if manifest.format != FORMAT_VERSION:
        raise ArchiveError(
            f"{archive} has archive format {manifest.format}; this version reads "
            f"{FORMAT_VERSION}: restore it with the release that wrote it"
        )
    return manifest


def read_listing(archive: Path) -> Iterator[FileEntry]:
    with (archive / LISTING).open("rb") as f:
        for line in f:
            entry = FileEntry.model_validate_json(line)
            if not _LISTED_PATH.fullmatch(entry.path):
                raise ArchiveError(f"{archive / LISTING} lists an invalid path {entry.path!r}")
            yield entry


def verify(archive: Path, manifest: Manifest) -> list[str]:
    """Every checksum of the archive, pool blobs included; returns the problems found."""
    problems: list[str] = []

    def check(path: Path, sha256: str, size: int, what: str) -> None:
        if not path.is_file():
            problems.append(f"{what}: missing ({path})")
        elif path.stat().st_size != size:
            problems.append(f"{what}: {path.stat().st_size} bytes, the manifest says {size}")
        elif sha256_file(path) != sha256:
            problems.append(f"{what}: checksum mismatch ({path})")

    parts = [manifest.database.part, manifest.listing]
    parts += [p for c in manifest.index for p in c.parts]
    for p in parts:
        check(archive / p.path, p.sha256, p.bytes, p.path)
    if any(problem.startswith(f"{LISTING}:") for problem in problems):
        return problems  # the listing itself is not to be trusted
    pool = pool_dir(archive.parent)
    try:
        for entry in read_listing(archive):
            check(pool / entry.blob, entry.sha256, entry.bytes, entry.path)
    except (ValidationError, ArchiveError) as e:
        problems.append(f"{LISTING}: {e}")
    return problems
