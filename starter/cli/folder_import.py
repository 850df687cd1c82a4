"""`knowledgeops import DIR`: a folder (recursively, hidden files and folders skipped) as one
batch import task, followed with one progress line (`N of M`).

Through the running API when one answers (one multipart request of the folder's files, read
as the request is sent, never all open at once), else stored here and started directly, as a
file's import is. A folder bigger than one request may carry (UPLOAD_MAX_BYTES) is sent as
several batches, each its own task.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO, Any, cast

import httpx

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentMetadata
from starter.cli.common import actor, problem_detail, task_service
from starter.cli.upload import UPLOAD_TIMEOUT_SECONDS, api_answers
from starter.services.document_batches import BatchAccepted, BatchView, DocumentBatchService
from starter.services.documents import DocumentService

# How often a followed batch's progress is read.
POLL_SECONDS = 1.0
# Multipart framing per file, counted against the request's size limit.
PART_OVERHEAD = 512
# Files one request carries at most (the API's limit).
MAX_REQUEST_FILES = 50_000


def collect(paths: Sequence[Path]) -> list[tuple[str, Path]]:
    """(name, path) of every file to import: a folder's files by their path under the
    folder's own name (`notes/week-1/a.md`), hidden ones (a name starting with ".", or under
    such a folder) skipped; a file named on the command line by its name."""
    found: list[tuple[str, Path]] = []
    for given in paths:
        if given.is_file():
            found.append((given.name, given))
            continue
        base = given.resolve().name or "folder"
        for folder, dirs, names in os.walk(given):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(n for n in names if not n.startswith(".")):
                path = Path(folder, name)
                if path.is_file():  # not a broken link, a socket, a FIFO
                    found.append((f"{base}/{path.relative_to(given).as_posix()}", path))
    return found


def parts(named: Sequence[tuple[str, Path]], limit: int) -> list[list[tuple[str, Path]]]:
    """The files in requests of at most `limit` bytes (a bigger file goes alone: the API
    refuses it with its reason, as the batch would)."""
    out: list[list[tuple[str, Path]]] = [[]]
    size = 0
    for name, path in named:
        n = path.stat().st_size + PART_OVERHEAD
        if out[-1] and (size + n > limit or len(out[-1]) >= MAX_REQUEST_FILES):
            out.append([])
            size = 0
        out[-1].append((name, path))
        size += n
    return [p for p in out if p]


class LazyFile(io.RawIOBase):
    """A file opened only while its part of the request is sent: a request of ten thousand
    files never holds ten thousand open files. Its length is known beforehand (httpx asks)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.size = path.stat().st_size
        self._f: io.BufferedReader | None = None
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._pos = self.size + offset if whence == io.SEEK_END else offset
        if self._f is not None:
            self._f.seek(self._pos)
        return self._pos

    def read(self, size: int = -1) -> bytes:
        if self._f is None:
            self._f = self.path.open("rb")
            self._f.seek(self._pos)
        block = self._f.read(size)
        self._pos += len(block)
        if not block:
            self._f.close()
            self._f = None
        return block


async def run(
    args: Any, settings: Settings, named: list[tuple[str, Path]], meta: DocumentMetadata
) -> int:
    if not named:
        print("error: no files to import (hidden files are skipped)", file=sys.stderr)
        return 1
    through_api = await api_answers(settings)
    if through_api:
        batches = await submit_through_api(settings, named, meta)
    else:
        print(
            f"note: no API answers at {settings.resolved_api_url}; storing the files in "
            f"{settings.files_dir}, which every worker must share (or STORAGE_URL's store)",
            file=sys.stderr,
        )
        async with task_service(settings) as service:
            assert service.db is not None  # task_service opens it
            batch = DocumentBatchService(DocumentService(service, service.db, settings))
            batches = [await batch.submit_paths(named, metadata=meta, requested_by=actor())]
    for b in batches:
        if not args.json:
            dup = f" ({b.duplicates} duplicate files)" if b.duplicates else ""
            print(f"{b.task_id}  {b.total} documents{dup}", flush=True)
    if not args.follow:
        if args.json:
            print(json.dumps([b.model_dump(mode="json") for b in batches], indent=2))
        return 0
    views = await _follow(settings, batches, through_api, quiet=args.json)
    if args.json:
        print(json.dumps([v.model_dump(mode="json") for v in views], indent=2))
    else:
        _report(views)
    ok = all(v.status == "completed" and v.failed == 0 for v in views)
    return 0 if ok else 1


def _headers(settings: Settings) -> dict[str, str]:
    headers = {"X-Requested-With": "knowledgeops-cli"}
    if token := settings.client_api_token():
        headers["Authorization"] = f"Bearer {token}"
    return headers


async def submit_through_api(
    settings: Settings, named: list[tuple[str, Path]], meta: DocumentMetadata
) -> list[BatchAccepted]:
    form = {"tags": ",".join(meta.tags)} | ({"owner": meta.owner} if meta.owner else {})
    url = f"{settings.resolved_api_url}/v1/document-batches"
    limit = min(settings.upload_max_bytes, settings.max_file_bytes)
    accepted = []
    async with httpx.AsyncClient(
        timeout=UPLOAD_TIMEOUT_SECONDS, headers=_headers(settings)
    ) as http:
        for part in parts(named, limit):
            while True:
                files = [("files", (name, cast(IO[bytes], LazyFile(path)))) for name, path in part]
                r = await http.post(url, files=files, data=form)
                if r.status_code != 429:
                    break
                # The backlog is full: wait as long as the API says, then send it again.
                await asyncio.sleep(float(r.headers.get("retry-after") or 5))
            if r.status_code >= 400:
                raise RuntimeError(f"{problem_detail(r)} (HTTP {r.status_code})")
            accepted.append(BatchAccepted.model_validate(r.json()))
    return accepted


async def _follow(
    settings: Settings, batches: list[BatchAccepted], through_api: bool, *, quiet: bool
) -> list[BatchView]:
    """Poll each batch until it has finished, one progress line on stderr (rewritten in
    place on a terminal)."""
    tty = sys.stderr.isatty() and not quiet
    last = ""
    async with _Viewer(settings, through_api) as view:
        while True:
            views = [await view(b.task_id) for b in batches]
            done = sum(v.done for v in views)
            total = sum(v.total for v in views)
            failed = sum(v.failed for v in views)
            line = f"imported {done - failed} of {total} documents" + (
                f", {failed} failed" if failed else ""
            )
            if line != last and not quiet:
                print(("\r" if tty else "") + line, end="" if tty else "\n", file=sys.stderr)
                last = line
            if all(v.status in _CLOSED for v in views):
                if tty:
                    print(file=sys.stderr)
                return views
            await asyncio.sleep(POLL_SECONDS)


_CLOSED = ("completed", "failed", "cancelled", "terminated", "timed_out")


class _Viewer:
    """A batch's view through the API, or from Temporal directly when no API answers."""

    def __init__(self, settings: Settings, through_api: bool) -> None:
        self.settings = settings
        self.through_api = through_api
        self._stack = contextlib.AsyncExitStack()
        self._http: httpx.AsyncClient | None = None
        self._batches: DocumentBatchService | None = None

    async def __aenter__(self) -> Callable[[str], Awaitable[BatchView]]:
        if self.through_api:
            self._http = await self._stack.enter_async_context(
                httpx.AsyncClient(timeout=60, headers=_headers(self.settings))
            )
        else:
            service = await self._stack.enter_async_context(task_service(self.settings))
            assert service.db is not None  # task_service opens it
            self._batches = DocumentBatchService(
                DocumentService(service, service.db, self.settings)
            )
        return self.view

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def view(self, task_id: str) -> BatchView:
        if self._batches is not None:
            return await self._batches.view(task_id)
        assert self._http is not None
        r = await self._http.get(f"{self.settings.resolved_api_url}/v1/document-batches/{task_id}")
        if r.status_code >= 400:
            raise RuntimeError(f"{problem_detail(r)} (HTTP {r.status_code})")
        return BatchView.model_validate(r.json())


def _report(views: list[BatchView]) -> None:
    for v in views:
        print(
            f"{v.task_id}: {v.status}; {v.imported} of {v.total} documents imported, "
            f"{v.failed} failed"
        )
        if v.last_error and v.status != "completed":
            print(f"  error: {v.last_error}")
        for f in v.failures:
            print(f"  failed: {f.filename}: {f.error}")
        if v.failures_not_listed:
            print(f"  ... and {v.failures_not_listed} more (`knowledgeops documents list`)")
