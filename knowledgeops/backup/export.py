"""A backup archive as one self-contained file (`<archive>.tar`): the archive folder and the
pool blobs its listing names, nothing else.

    <archive>/manifest.json, database/..., index/..., files.jsonl
    pool/<sha256><ext>

In the backups folder an archive needs the shared pool beside it (backups/pool holds each
stored file once for every archive); an export carries its own share of the pool, so it can be
copied anywhere alone: BACKUP_URL (object storage, a mounted share) gets one after every
backup. Unpacked into an empty folder it is an archive with its pool beside it, as in the
backups folder, so restore reads it unchanged, and verifies every checksum before it writes
anything: a damaged or tampered export is refused like a damaged archive.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import tarfile
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from knowledgeops.backup.archive import ArchiveError, load_manifest, read_listing
from knowledgeops.backup.store import POOL, pool_dir
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.backup import ARCHIVE_NAME_PATTERN
from knowledgeops.storage.opening import open_store
from knowledgeops.storage.store import Store

SUFFIX = ".tar"
_EXPORT_NAME = re.compile(ARCHIVE_NAME_PATTERN.rstrip("$") + re.escape(SUFFIX) + "$")


def export_key(archive: str) -> str:
    return f"{archive}{SUFFIX}"


def is_export_key(key: str) -> bool:
    return bool(_EXPORT_NAME.fullmatch(key))


def write_export(archive: Path, out: Path, progress: Callable[[int], None]) -> int:
    """Write a complete archive and the pool blobs it lists into the tar file `out` (under a
    temporary name, renamed when whole); its size. `progress` gets the files written so far."""
    load_manifest(archive)  # an unfinished archive (no manifest) is refused here
    pool = pool_dir(archive.parent)
    files = sorted(p for p in archive.rglob("*") if p.is_file())
    blobs = sorted({entry.blob for entry in read_listing(archive)})
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for n, path in enumerate(files, 1):
                tar.add(path, arcname=f"{archive.name}/{path.relative_to(archive)}")
                progress(n)
            for n, blob in enumerate(blobs, len(files) + 1):
                tar.add(pool / blob, arcname=f"{POOL}/{blob}")
                progress(n)
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out.stat().st_size


def unpack_export(export: Path, into: Path) -> Path:
    """Unpack an export into the empty folder `into`; the archive folder inside it."""
    try:
        with tarfile.open(export, "r") as tar:
            members = tar.getmembers()
            tops = {m.name.split("/", 1)[0] for m in members}
            names = tops - {POOL}
            odd = [m.name for m in members if not (m.isfile() or m.isdir())]
            if len(names) != 1 or odd or not re.fullmatch(ARCHIVE_NAME_PATTERN, min(names)):
                raise ArchiveError(
                    f"{export} is not a backup export: it must hold one archive folder and "
                    f"pool/ (found {sorted(tops)[:5]}{', links' if odd else ''})"
                )
            # The "data" filter refuses absolute paths, '..' and special files.
            tar.extractall(into, filter="data")
    except tarfile.TarError as e:
        raise ArchiveError(
            f"{export} is not a readable tar file ({e}): not a backup export"
        ) from None
    return into / names.pop()


def backup_store(settings: Settings) -> Store | None:
    """Where BACKUP_URL keeps exports; None when it is not set."""
    if not settings.backup_url:
        return None
    return open_store(settings.backup_url, settings.backups_dir, settings.aws_env(), "BACKUP_URL")


@contextlib.asynccontextmanager
async def unpacked(
    settings: Settings, source: str, say: Callable[[str], None]
) -> AsyncIterator[Path | None]:
    """The archive folder an export names, unpacked into a temporary folder for the block's
    duration; None if `source` is not an export (an archive name or folder). An export is a
    `.tar` file's path, an `s3://` or `file://` URL of one, or an archive's name that is not
    in the backups folder but is at BACKUP_URL."""
    where = _where(settings, source)
    if where is None:
        yield None
        return
    work = settings.backups_dir / f".restore-{uuid.uuid4().hex[:12]}"
    work.mkdir(parents=True)
    try:
        if isinstance(where, Path):
            local = where
        else:
            store, key = where
            local = work / key
            say(f"downloading {key} from {store.describe()} ...")
            await store.get_file(key, local)
        say(f"unpacking {local.name} ...")
        yield await asyncio.to_thread(unpack_export, local, work / "unpacked")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _where(settings: Settings, source: str) -> Path | tuple[Store, str] | None:
    """The export `source` names: a local file, or a store and key; None: not an export."""
    if source.startswith(("s3://", "file://")):
        parent, _, key = source.rstrip("/").rpartition("/")
        if not key.endswith(SUFFIX):
            raise ArchiveError(f"{source} does not name a {SUFFIX} file (a backup export)")
        return open_store(parent, settings.backups_dir, settings.aws_env(), "the source"), key
    if source.endswith(SUFFIX) and Path(source).is_file():
        return Path(source)
    store = backup_store(settings)
    if (
        store is None
        or not re.fullmatch(ARCHIVE_NAME_PATTERN, source)
        or (settings.backups_dir / source).is_dir()
    ):
        return None
    return store, export_key(source)
