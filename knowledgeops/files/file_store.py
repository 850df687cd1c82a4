"""Content-addressed storage of uploaded files under the data directory.

A file id is the SHA-256 of the content plus a lowercase extension, so storing the same bytes
twice yields the same id and the id alone can never point outside `files_dir`.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

FILE_ID_RE = re.compile(r"^[0-9a-f]{64}(\.[a-z0-9]{1,10})?$")
_COPY_BLOCK = 1024 * 1024


class FileTooLargeError(ValueError):
    pass


def safe_extension(filename: str) -> str:
    ext = Path(filename).suffix.lower().lstrip(".")
    return f".{ext}" if re.fullmatch(r"[a-z0-9]{1,10}", ext) else ""


def path_for(files_dir: Path, file_id: str) -> Path:
    if not FILE_ID_RE.fullmatch(file_id):
        raise ValueError(f"Invalid file id {file_id!r}: expected sha256 hex plus an extension")
    return files_dir / file_id


def store_blocks(files_dir: Path, blocks: Iterable[bytes], filename: str, max_bytes: int) -> str:
    """Stream blocks into storage while hashing; returns the file id. Never holds the whole file."""
    files_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    fd, tmp_name = tempfile.mkstemp(dir=files_dir, prefix=".upload-")
    try:
        with os.fdopen(fd, "wb") as out:
            for block in blocks:
                size += len(block)
                if size > max_bytes:
                    raise FileTooLargeError(
                        f"{filename or 'file'} is larger than the limit of {max_bytes} bytes"
                    )
                digest.update(block)
                out.write(block)
        file_id = digest.hexdigest() + safe_extension(filename)
        os.replace(tmp_name, files_dir / file_id)
        return file_id
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def store_path(files_dir: Path, source: Path, max_bytes: int) -> str:
    def blocks() -> Iterable[bytes]:
        with source.open("rb") as f:
            while block := f.read(_COPY_BLOCK):
                yield block

    return store_blocks(files_dir, blocks(), source.name, max_bytes)


def write_atomically(target: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never half of one, even after a crash (fsync
    before the rename; the temporary name is per process, so two writers never share it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".tmp-{target.name}-{os.getpid()}")
    with tmp.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)
