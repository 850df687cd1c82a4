"""Bounded inputs (issue 11): every oversized, malformed or hostile input gets a clear 4xx or a
non-retryable failure, and the process stays unharmed. Real HTTP, real parser subprocesses."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import PARSE_DOCUMENT, ChunkingOptions
from knowledgeops.errors import DocumentError
from knowledgeops.ingest import parse_runner
from knowledgeops.ingest.parse_runner import ParserFailedError
from knowledgeops.registry.task_types import REGISTRY, TaskType
from knowledgeops.runtime.temporal import connect
from tests.helpers.documents import heavy_markdown, numbered_paragraphs, parse_into_chunks
from tests.helpers.environment import EXAMPLES, running_api
from tests.helpers.temporal import activity_starts
from tests.helpers.waiting import eventually

try:
    from knowledgeops.ingest.parser_process import ParserLimits
except ImportError:  # the code before issue 11: each test using it then fails on its own
    ParserLimits = None  # type: ignore[assignment,misc]

OPTS = ChunkingOptions(chunk_tokens=64, overlap_tokens=8)


def expect(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["code"] == code, r.text


async def chunked(data: bytes, block: int = 64 * 1024) -> AsyncIterator[bytes]:
    # An async body without a length: httpx sends it with Transfer-Encoding: chunked.
    for i in range(0, len(data), block):
        yield data[i : i + block]


def multipart(content: bytes, name: str = "a.txt") -> tuple[bytes, str]:
    boundary = "bnd1234567890"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: text/plain\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


def stored_files(settings: Settings) -> list[Path]:
    return [p for p in settings.files_dir.glob("*") if p.is_file()]


async def test_request_bodies_are_limited_before_parsing_and_authentication(
    settings: Settings,
) -> None:
    small = settings.model_copy(update={"upload_max_bytes": 4096})
    async with running_api(small, workers=False) as api:
        big_json = b'{"action": "cancel", "reason": "' + b"x" * (2 * 1024 * 1024) + b'"}'
        # No token: the size answers first (before it was parsed, then refused as 401).
        r = await api.http.post(
            "/v1/admin/tasks/bulk", content=big_json, headers={"Content-Type": "application/json"}
        )
        expect(r, 413, "request_too_large")
        # Chunked (no Content-Length): counted while read.
        r = await api.http.post(
            "/v1/tasks", content=chunked(big_json), headers={"Content-Type": "application/json"}
        )
        expect(r, 413, "request_too_large")
        # An over-limit upload sent chunked: 413, not "400 error parsing the body".
        body, ctype = multipart(b"y" * 200_000)
        r = await api.http.post(
            "/v1/documents", content=chunked(body, 8192), headers={"Content-Type": ctype}
        )
        expect(r, 413, "file_too_large")
        assert stored_files(small) == []
        # A body within the limit still works, and so does the server.
        r = await api.http.post("/v1/tasks", json={"type": "NOPE", "payload": {}})
        expect(r, 400, "unknown_task_type")


async def test_upload_is_validated_before_it_is_stored(settings: Settings) -> None:
    async with running_api(settings, workers=False) as api:
        content = b"some text to import"
        many = ",".join(f"t{i}" for i in range(51))
        r = await api.http.post(
            "/v1/documents", files={"file": ("a.txt", content)}, data={"tags": many}
        )
        expect(r, 422, "invalid_request")
        assert "tags" in r.json()["detail"]
        r = await api.http.post("/v1/documents", files={"file": ("n" * 501 + ".txt", content)})
        expect(r, 422, "invalid_request")
        assert "505 characters" in r.json()["detail"]
        assert stored_files(api.settings) == []


async def test_event_cursors_and_admin_cursor_out_of_range_are_4xx(settings: Settings) -> None:
    async with running_api(settings, workers=False) as api:
        r = await api.http.get("/v1/events", params={"after": 10**30})
        expect(r, 422, "invalid_request")
        r = await api.http.get("/v1/events/stream", params={"after": 10**30})
        expect(r, 422, "invalid_request")
        r = await api.http.get("/v1/documents", params={"offset": 10**30})
        expect(r, 422, "invalid_request")
        # As a browser sends it back: '²' (latin-1 on the wire) passes str.isdigit().
        for bad in ("²", "1" * 30, "-1", "abc"):
            header = bad.encode("latin-1")
            r = await api.http.get("/v1/events/stream", headers={b"Last-Event-ID": header})
            expect(r, 400, "invalid_last_event_id")
        r = await api.http.get("/v1/admin/tasks", params={"cursor": "garbage"}, headers=api.admin)
        expect(r, 400, "invalid_cursor")
        r = await api.http.get(
            "/v1/admin/tasks", params={"since": "0001-01-01T00:00:00+01:00"}, headers=api.admin
        )
        expect(r, 422, "invalid_request")
        assert (await api.http.get("/healthz")).status_code == 200


async def test_bulk_action_skips_a_missing_task_and_is_audited(settings: Settings) -> None:
    from knowledgeops.db.database import Database
    from knowledgeops.db.task_list import TaskList
    from starter.services.task_listing import list_started
    from starter.services.task_models import TaskRef

    async with running_api(settings, workers=False) as api:
        ids = []
        for text in (b"first document text", b"second document text"):
            r = await api.http.post("/v1/documents", files={"file": ("a.txt", text)})
            assert r.status_code == 202, r.text
            ids.append(r.json()["task_id"])
        # A listed task that Temporal no longer has (its history past retention: the list is
        # the app database's and outlives it).
        gone = settings.task_id(TaskType.DOCUMENT_IMPORT.task_name("gone"))
        db = await Database.open(settings)
        try:
            ref = TaskRef(task_id=gone, run_id="run-gone", task_type=TaskType.DOCUMENT_IMPORT)
            await list_started(TaskList(db), ref)
        finally:
            await db.close()

        async def listed() -> int:
            page = await api.http.get("/v1/admin/tasks", headers=api.admin)
            return len(page.json()["items"])

        await eventually(listed, lambda n: n == 3, what="the admin list")
        body = {"action": "cancel", "filter": {}, "reason": "bulk test"}
        r = await api.http.post("/v1/admin/tasks/bulk", json=body, headers=api.admin)
        assert r.status_code == 200, r.text
        assert sorted(r.json()["done"]) == sorted(ids) and gone in r.json()["skipped"]
        audit = (await api.http.get("/v1/admin/audit", headers=api.admin)).json()
        bulk = [a for a in audit if a["action"] == "bulk_cancel"]
        assert len(bulk) == 1 and bulk[0]["details"]["skipped"].keys() == {gone}


async def test_event_streams_are_capped(settings: Settings) -> None:
    async with running_api(settings.model_copy(update={"sse_max_streams": 1})) as api:
        async with api.http.stream("GET", "/v1/events/stream") as first:
            assert first.status_code == 200
            r = await api.http.get("/v1/events/stream", timeout=5)
            expect(r, 503, "too_many_streams")
            assert r.headers["Retry-After"]

        async def stream_status() -> int:
            async with api.http.stream("GET", "/v1/events/stream") as again:
                return again.status_code

        # The slot comes back once the first client has gone.
        await eventually(
            stream_status, lambda code: code == 200, timeout=10, what="a stream's slot back"
        )


# -- the parser subprocess ------------------------------------------------------------------


def leftovers(chunks: Path) -> list[Path]:
    """Files a failed parse or chunk step left, other than a complete sections file (the
    parse step's output, which the import's discard step removes)."""
    found = list(chunks.glob("*")) if chunks.exists() else []
    return [p for p in found if not p.name.endswith(".sections.jsonl")]


@pytest.mark.parametrize(
    ("limits", "setting"),
    [
        ({"cpu_seconds": 1, "wall_seconds": 120}, "PARSER_CPU_SECONDS"),
        ({"cpu_seconds": 300, "wall_seconds": 1}, "PARSER_WALL_SECONDS"),
    ],
)
async def test_parser_cpu_and_wall_limits_fail_as_too_complex(
    tmp_path: Path, limits: dict[str, int], setting: str
) -> None:
    doc = heavy_markdown(tmp_path / "heavy.md")
    chunks = tmp_path / "chunks"
    with pytest.raises(DocumentError) as e:
        await parse_into_chunks(doc, "heavy.md", chunks, OPTS, 1024, ParserLimits(**limits))
    assert e.value.kind == "DocumentTooComplex" and setting in e.value.message
    assert str(tmp_path) not in e.value.message
    assert leftovers(chunks) == []  # the killed parser's *.tmp-<pid> files are gone


async def test_chunk_and_character_caps_are_checked_while_parsing(tmp_path: Path) -> None:
    doc = EXAMPLES / "temporal-retries.md"
    for limits, max_chunks, setting in (
        (None, 2, "MAX_DOCUMENT_CHUNKS"),
        (ParserLimits(max_characters=100), None, "MAX_DOCUMENT_CHARACTERS"),
    ):
        with pytest.raises(DocumentError) as e:
            await parse_into_chunks(
                doc, doc.name, tmp_path / "c", OPTS, 1024, limits, max_chunks=max_chunks
            )
        assert e.value.kind == "DocumentTooLarge" and setting in e.value.message
        assert leftovers(tmp_path / "c") == []


async def test_parser_child_gets_no_secrets_and_its_stderr_stays_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:pw@h/db")
    probe = (
        "import os, sys; "
        "leaked = [k for k in ('OPENAI_API_KEY', 'DATABASE_URL') if k in os.environ]"
        "; sys.stderr.write(('/srv/internal/path ' + ','.join(leaked)) * 500000); sys.exit(7)"
    )
    monkeypatch.setattr(parse_runner, "PARSER_COMMAND", [sys.executable, "-c", probe])
    doc = tmp_path / "a.txt"
    doc.write_text("hello")
    with pytest.raises(ParserFailedError) as e:
        await parse_into_chunks(doc, "a.txt", tmp_path / "c", OPTS, 1024)
    message = str(e.value)
    assert "/srv/internal" not in message and str(tmp_path) not in message
    assert "exit code 7" in message and len(message) < 300
    env = parse_runner.parser_env()
    assert "OPENAI_API_KEY" not in env and "DATABASE_URL" not in env
    # ...and the real parser works with that environment.
    monkeypatch.undo()
    result = await parse_into_chunks(doc, "a.txt", tmp_path / "c", OPTS, 1024)
    assert result.total_chunks == 1


async def test_parse_waits_for_a_parser_outside_its_attempt_clock(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While every parser is busy, an import's parse waits in the parse queue for longer than
    its attempt may run, then runs and succeeds on its first attempt: the wait for a parser is
    counted by neither its start-to-close nor its heartbeat timeout."""
    # One parser, and every import's steps through the parse queue (a small document's steps
    # would run as local activities on the express parser).
    cfg = settings.model_copy(update={"parser_concurrency": 1, "small_document_bytes": 0})
    # Parser processes that start the real parser only once `gate` exists: the first parse
    # holds the one parser for as long as the test wants.
    gate = tmp_path / "gate"
    held = (
        f"import os, sys, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
        "from knowledgeops.ingest import parser_process as p\nsys.exit(p.main(sys.argv[1:]))"
    )
    monkeypatch.setattr(parse_runner, "PARSER_COMMAND", [sys.executable, "-c", held])
    # A short attempt clock for the parse (declared: 30 min, heartbeats within 30 s), so the
    # wait can outlast it in seconds; its queue and retries stay as declared.
    imports = REGISTRY[TaskType.DOCUMENT_IMPORT].activities
    short = dataclasses.replace(
        imports[PARSE_DOCUMENT.name],
        start_to_close=timedelta(seconds=3),
        heartbeat_timeout=timedelta(seconds=2),
    )
    docs = [tmp_path / "first.txt", tmp_path / "second.txt"]
    for i, doc in enumerate(docs):
        doc.write_text(numbered_paragraphs(3 + i))
    async with running_api(cfg) as api:
        client = await connect(api.settings)
        first = (await api.upload(docs[0]))["task_id"]
        await eventually(
            partial(parse_state, client, first),
            is_state(PendingActivityState.PENDING_ACTIVITY_STATE_STARTED),
            what="the first import's parse holding the parser",
        )
        # Imports started from now on schedule their parse with the short clock.
        monkeypatch.setitem(imports, PARSE_DOCUMENT.name, short)
        second = (await api.upload(docs[1]))["task_id"]
        await eventually(
            partial(parse_state, client, second),
            is_state(PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED),
            what="the second import's parse waiting for a parser",
        )
        # The one parser stays busy for longer than the second parse's attempt may run.
        assert short.heartbeat_timeout is not None
        longest = max(short.start_to_close, short.heartbeat_timeout)
        await asyncio.sleep(longest.total_seconds() + 1)
        gate.touch()
        for task in (first, second):
            done = await api.wait_task(task)
            assert done["status"] == "completed" and done["result"]["total_chunks"] > 0, done
        clock = await parse_clock(client, second)
        runs = [(a.activity, a.attempt) for a in await activity_starts(client, second)]
        timed_out = await history_has(client, second, EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT)
    # It was scheduled with the short clock, waited longer than that clock for the parser, and
    # its first attempt ran it: nothing timed out, no retry.
    assert (clock.start_to_close, clock.heartbeat_timeout) == (
        short.start_to_close,
        short.heartbeat_timeout,
    )
    assert clock.waited > longest, clock
    assert [n for a, n in runs if a == PARSE_DOCUMENT.name] == [1], runs
    assert all(n == 1 for _, n in runs) and not timed_out, runs


async def parse_state(client: Client, task_id: str) -> int | None:
    """The state of the task's pending parse activity (None: none is pending)."""
    desc = await client.get_workflow_handle(task_id).describe()
    for pending in desc.raw_description.pending_activities:
        if pending.activity_type.name == PARSE_DOCUMENT.name:
            return int(pending.state)
    return None


def is_state(state: int) -> Callable[[int | None], bool]:
    return lambda found: found == state


@dataclass(frozen=True)
class ParseClock:
    """A task's parse activity as its history records it: its attempt clock, and how long it
    waited between being scheduled and being started."""

    start_to_close: timedelta
    heartbeat_timeout: timedelta
    waited: timedelta


async def parse_clock(client: Client, task_id: str) -> ParseClock:
    scheduled: dict[int, tuple[datetime, timedelta, timedelta]] = {}
    async for e in client.get_workflow_handle(task_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = e.activity_task_scheduled_event_attributes
            if a.activity_type.name == PARSE_DOCUMENT.name:
                scheduled[e.event_id] = (
                    e.event_time.ToDatetime(UTC),
                    a.start_to_close_timeout.ToTimedelta(),
                    a.heartbeat_timeout.ToTimedelta(),
                )
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = e.activity_task_started_event_attributes
            if started.scheduled_event_id in scheduled:
                at, start_to_close, heartbeat = scheduled[started.scheduled_event_id]
                return ParseClock(start_to_close, heartbeat, e.event_time.ToDatetime(UTC) - at)
    raise AssertionError(f"{task_id} started no parse activity")


async def history_has(client: Client, task_id: str, kind: EventType.ValueType) -> bool:
    async for e in client.get_workflow_handle(task_id).fetch_history_events():
        if e.event_type == kind:
            return True
    return False
