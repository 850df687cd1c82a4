"""Files for tests: generated in temporary directories, never downloaded."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
import zipfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

from fastapi.routing import APIRoute
from starlette.routing import Route
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.contracts.events import RECORD_TASK_EVENTS
from knowledgeops.db.database import Database
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files.chunk_store import sections_file
from knowledgeops.ingest.parse_runner import run_chunk, run_parse
from knowledgeops.ingest.parser_process import ParserLimits
from starter.http.app import create_app
from starter.http.runtime import Runtime

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T] | T],
    done: Callable[[T], bool],
    *,
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "the condition",
) -> T:
    """Poll `probe()` (a coroutine function, or a plain one reading a counter) until
    `done(value)`; return that value, or fail naming what it last saw (for what settles
    eventually, like Temporal's visibility store or a fake server's counters)."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        value: T = await got if inspect.isawaitable(got) else got
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what} did not hold within {timeout:.0f} s; last seen: {value!r}"
            )
        await asyncio.sleep(interval)


def numbered_paragraphs(n: int, words: int = 40) -> str:
    """n unique paragraphs; every chunk text differs, so embedding counts are exact."""
    vocab = ["river", "forest", "mountain", "cloud", "engine"]
    vocab += ["signal", "garden", "theory", "market", "harbor"]
    paras = []
    for i in range(n):
        body = " ".join(vocab[(i * 7 + j * 3) % len(vocab)] for j in range(words))
        paras.append(f"Paragraph {i} of the generated corpus. {body}.")
    return "\n\n".join(paras) + "\n"


def write_pdf(path: Path, pages: list[str], *, password: str | None = None) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    if password:
        pdf.set_encryption(owner_password=password + "-owner", user_password=password)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    pdf.output(str(path))
    return path


def write_docx(path: Path, sections: list[tuple[str, str]]) -> Path:
    import docx

    d = docx.Document()
    for heading, body in sections:
        d.add_heading(heading, 1)
        d.add_paragraph(body)
    d.save(str(path))
    return path


def write_zip_bomb_docx(path: Path, inflated_mb: int = 600) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", "<w:document/>")
        chunk = b"\0" * (1024 * 1024)
        with z.open("word/media/bomb.bin", "w", force_zip64=True) as f:
            for _ in range(inflated_mb):
                f.write(chunk)
    return path


@dataclass
class Parsed:
    format: str
    total_chunks: int
    characters: int
    pages: int | None
    title: str | None


async def parse_into_chunks(
    path: Path,
    filename: str,
    chunks_dir: Path,
    options: ChunkingOptions,
    memory_mb: int = 1024,
    limits: ParserLimits | None = None,
    *,
    max_chunks: int | None = None,
) -> Parsed:
    """The import's parse and chunk steps, in process (no Temporal), as version "v1" of
    document "doc1", so `ChunkReader(chunks_dir, "doc1", "v1")` reads the result."""
    sections = sections_file(chunks_dir, "doc1", "v1")
    parsed = await run_parse(path, filename, "doc1", sections, memory_mb, limits)
    total = await run_chunk(
        sections, filename, "doc1", "v1", chunks_dir, options, parsed.format == "md",
        memory_mb, limits, max_chunks,
    )  # fmt: skip
    return Parsed(parsed.format, total, parsed.characters, parsed.pages, parsed.title)


def heavy_markdown(path: Path, mb: int = 12) -> Path:
    para = "## Section {i}\n\n" + "Words that the splitter must tokenize one by one. " * 40 + "\n\n"
    with path.open("w") as f:
        i = 0
        while f.tell() < mb * 1024 * 1024:
            f.write(para.format(i=i))
            i += 1
    return path


def upload(path: Path, name: str | None = None, **form: str) -> dict[str, Any]:
    """The keyword arguments of an httpx `post("/v1/documents", ...)` uploading `path` (as
    `name` if given) with these form fields."""
    return {"files": {"file": (name or path.name, path.read_bytes())}, "data": form}


# Routes anyone may call: health and the API's own documentation.
OPEN_ROUTES = {"/healthz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}


def app_routes(settings: Settings, *, fill: str | None = "doc-x") -> list[tuple[str, str]]:
    """(method, path) of every route the application serves but the open ones, path
    parameters filled in with `fill` (None: as templated): a route added later is checked
    without anyone listing it in a test."""
    app = create_app(cast(Runtime, SimpleNamespace(settings=settings)))
    routes: list[Any] = list(app.routes)
    found = []
    while routes:
        route = routes.pop(0)
        # An included router (FastAPI wraps each one): its own routes carry their full paths.
        routes += list(getattr(getattr(route, "original_router", None), "routes", []))
        if isinstance(route, APIRoute | Route) and route.path not in OPEN_ROUTES:
            path = route.path if fill is None else re.sub(r"\{[^}]+\}", fill, route.path)
            found += [(m, path) for m in sorted(route.methods or ()) if m != "HEAD"]
    return found


@dataclass(frozen=True)
class ActivityStart:
    """One started activity of a task, as its history records it."""

    activity: str
    attempt: int
    # The worker's identity ("knowledgeops:<pid>@<host>"); empty for a local activity.
    identity: str = ""
    local: bool = False

    @property
    def pid(self) -> int:
        return int(self.identity.rpartition(":")[2].partition("@")[0])


async def activity_starts(client: Client, task_id: str) -> list[ActivityStart]:
    """Every ActivityTaskStarted event of the task's latest run (with the attempt and worker
    that ran it) and every local activity's result marker (a small document's steps: the
    attempt that ended it), in history order, leaving out domain-event recording."""
    names: dict[int, str] = {}
    out: list[ActivityStart] = []
    async for e in client.get_workflow_handle(task_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            a = e.activity_task_started_event_attributes
            out.append(ActivityStart(names[a.scheduled_event_id], a.attempt, a.identity))
        elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = e.marker_recorded_event_attributes
            if marker.marker_name == "core_local_activity":
                data = json.loads(marker.details["data"].payloads[0].data)
                out.append(ActivityStart(data["activity_type"], data["attempt"], local=True))
    return [s for s in out if s.activity != RECORD_TASK_EVENTS.name]


async def live_version_of(settings: Settings, document_id: str) -> str | None:
    """The document's live chunk version, as the app database says."""
    db = await Database.open(settings, migrate=False)
    try:
        return await LiveVersions(db, settings.chunks_dir).get(document_id)
    finally:
        await db.close()
