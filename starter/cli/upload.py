"""`knowledgeops import` through the running API: the files are uploaded, several at once, so
the CLI never writes into a storage folder of its own and works from any shell or machine that
reaches the API (before, an import run without the server's KNOWLEDGEOPS_DATA_DIR stored the
file where no worker looked, and every import failed "stored file ... does not exist").

Uploads run UPLOADS_AT_ONCE at a time: one at a time, 5,183 small files took 4 min 36 s just to
be submitted, while the Temporal dev server starts ~90 workflows a second. A full backlog
(429 with Retry-After) is waited out, not reported as a failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentMetadata
from starter.cli.common import problem_detail
from starter.services.document_models import ImportRef

UPLOADS_AT_ONCE = 8
# An upload of the largest file the API accepts (200 MB) over a slow link still finishes.
UPLOAD_TIMEOUT_SECONDS = 600.0


class UploadRefusedError(RuntimeError):
    """The API refused a file (the message is the API's, with the file and the status)."""


async def api_answers(settings: Settings) -> bool:
    """Whether a process serves the API at API_URL (the worker of `dev`, or `knowledgeops
    api`)."""
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            return (await http.get(f"{settings.resolved_api_url}/healthz")).status_code == 200
    except httpx.TransportError:
        return False


async def upload_files(
    settings: Settings,
    paths: Sequence[Path],
    *,
    metadata: DocumentMetadata,
    document_id: str | None = None,
    on_accepted: Callable[[Path, ImportRef], None] = lambda path, ref: None,
) -> list[tuple[Path, ImportRef | UploadRefusedError]]:
    """Upload each file and start its import; per file (in the given order) its import or why
    the API refused it. Other errors (the API gone, a network failure) are raised."""
    headers = {"X-Requested-With": "knowledgeops-cli"}
    if token := settings.client_api_token():
        headers["Authorization"] = f"Bearer {token}"
    form = {"tags": ",".join(metadata.tags)}
    for name, value in (
        ("title", metadata.title),
        ("owner", metadata.owner),
        ("document_id", document_id),
    ):
        if value is not None:
            form[name] = value
    gate = asyncio.Semaphore(UPLOADS_AT_ONCE)
    url = f"{settings.resolved_api_url}/v1/documents"

    async def upload(http: httpx.AsyncClient, path: Path) -> ImportRef | UploadRefusedError:
        async with gate:
            while True:
                content = await asyncio.to_thread(path.read_bytes)
                r = await http.post(url, files={"file": (path.name, content)}, data=form)
                if r.status_code == 429:
                    # The backlog is full: wait as long as the API says, then send it again.
                    await asyncio.sleep(float(r.headers.get("retry-after") or 5))
                    continue
                if r.status_code >= 400:
                    return UploadRefusedError(f"{path}: {problem_detail(r)} (HTTP {r.status_code})")
                body = r.json()
                ref = ImportRef(
                    task_id=body["task_id"], run_id=None, document_id=body["document_id"]
                )
                on_accepted(path, ref)
                return ref

    async with httpx.AsyncClient(timeout=UPLOAD_TIMEOUT_SECONDS, headers=headers) as http:
        results = await asyncio.gather(*(upload(http, p) for p in paths))
    return list(zip(paths, results, strict=True))
