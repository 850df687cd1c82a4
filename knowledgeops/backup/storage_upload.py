"""Moving an installation's files into STORAGE_URL's store, once, when it starts sharing them
(`knowledgeops storage upload`).

Until then its stored files, chunk files, OCR pages, outputs and reports are only in its data
folder: with STORAGE_URL set, other machines could not fetch them, and outputs and reports
(read from the store) would look gone. This copies each one under the key the code reads it
by, skipping what the store holds already at the same size (so running it again, or after an
interrupted run, copies only what is missing), and turns an earlier installation's `.live`
pointer files into rows of the app database, which every machine reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files import chunk_store
from knowledgeops.files.data_files import DataFiles, complete_files, index_files_last
from knowledgeops.storage.store import check_key

# The data folder's folders whose files the code reads through the store.
SHARED_FOLDERS = ("files", "chunks", "ocr", "outputs", "reports")


@dataclass
class UploadReport:
    copied: int = 0
    copied_bytes: int = 0
    present: int = 0  # in the store already, same size
    pointers: int = 0  # `.live` files moved into the database
    skipped: list[str] = field(default_factory=list)  # not files the code reads by key


async def upload_data_folder(
    files: DataFiles,
    versions: LiveVersions,
    *,
    dry_run: bool = False,
    say: Callable[[str], None] = print,
) -> UploadReport:
    """Copy the data folder's shared files into `files.store`; see the module's docstring."""
    if files.store is None:
        raise RuntimeError(
            "STORAGE_URL is empty: the data folder is the store already; set STORAGE_URL "
            "(and the AWS_* settings) to the store to upload into"
        )
    report = UploadReport()
    with_rows = await versions.documents()
    # Chunk offset indexes last, as `DataFiles.send`: an interrupted run must not leave one
    # without its data.
    for path in index_files_last(complete_files(files.data_dir, SHARED_FOLDERS)):
        if path.name.endswith(chunk_store.LIVE_SUFFIX) and path.parent == files.chunks_dir:
            document = path.name.removesuffix(chunk_store.LIVE_SUFFIX)
            if document not in with_rows:  # a row wins over the file (live_versions.py)
                if not dry_run:
                    await versions.put(document, path.read_text())
                report.pointers += 1
            continue
        key = files.key(path)
        try:
            check_key(key)
        except ValueError as e:
            report.skipped.append(f"{path}: {e}")
            continue
        size = path.stat().st_size
        if await files.store.size(key) == size:
            report.present += 1
            continue
        if not dry_run:
            await files.store.put_file(key, path)
        report.copied += 1
        report.copied_bytes += size
        if report.copied % 500 == 0:
            say(f"  {report.copied} files copied so far")
    return report
