"""REPORT_GENERATE: the figures as a pure function, then end to end on the real dev server
(imports that complete, fail and are retried by hand; the report's JSON checked against what
happened; the HTML self-contained with inline charts; list and downloads over real HTTP)."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.testing import ActivityEnvironment

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.report import (
    CollectRequest,
    RenderCheckpoint,
    RenderRequest,
    ReportGeneratePayload,
)
from knowledgeops.db.audit import AuditRow
from knowledgeops.db.catalogue import DocumentRow
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventRow
from knowledgeops.registry.task_types import TaskType
from knowledgeops.reports.figures import EventTally, build_report, failure_kind, knowledge_base
from tests.helpers.environment import EXAMPLES, openai_settings, running_api, running_env
from tests.helpers.fake_openai import FakeOpenAI

T0 = datetime(2025, 3, 3, 10, 0, tzinfo=UTC)
WAIT = 90.0


def _ev(kind: str, task: str, at_s: float, task_type: str = "DOCUMENT_IMPORT", **kw: Any) -> Any:
    return EventRow(
        event_type=kind,
        task_id=task,
        run_id=kw.pop("run", "r1"),
        task_type=task_type,
        attempt=kw.pop("attempt", 1),
        at=T0 + timedelta(seconds=at_s),
        error=kw.pop("error", None),
        data=kw.pop("data", {}),
    )


def test_payload_range_is_validated_and_resolved() -> None:
    with pytest.raises(ValidationError, match="since must be before until"):
        ReportGeneratePayload(since=T0, until=T0)
    with pytest.raises(ValidationError, match="since needs a time zone"):
        ReportGeneratePayload(since=datetime(2025, 1, 1))
    with pytest.raises(ValidationError, match="366 days"):
        ReportGeneratePayload(since=T0 - timedelta(days=400), until=T0)
    assert ReportGeneratePayload(period_days=2).time_range(T0) == (T0 - timedelta(days=2), T0)
    assert ReportGeneratePayload(since=T0, period_days=1).time_range(T0 + timedelta(days=9)) == (
        T0,
        T0 + timedelta(days=1),
    )


def test_figures_from_rows() -> None:
    tally = EventTally()
    done = {"total_chunks": 10, "embedded": 7, "reused": 3, "pages": 4, "format": "pdf"}
    rows = [
        # a: completed in 10 s; b: completed in 30 s; c: failed, retried by hand, failed again
        _ev("TaskEnqueued", "a", 0), _ev("TaskStarted", "a", 1),
        _ev("TaskCompleted", "a", 11, data=done),
        _ev("TaskEnqueued", "b", 5), _ev("TaskStarted", "b", 5),
        _ev("TaskCompleted", "b", 35, data={**done, "embedded": 0, "reused": 10}),
        _ev("TaskEnqueued", "c", 6), _ev("TaskStarted", "c", 6),
        _ev("TaskFailed", "c", 7, error="CorruptDocument: c.pdf is not a readable PDF"),
        _ev("TaskRetried", "c", 3700, run="r2"), _ev("TaskStarted", "c", 3701, run="r2"),
        _ev("TaskFailed", "c", 3702, run="r2", error="CorruptDocument: c.pdf is not readable"),
        # d: cancelled while queued; e: still running (another type, second workflow attempt)
        _ev("TaskEnqueued", "d", 8), _ev("TaskCancelled", "d", 9),
        _ev("TaskEnqueued", "e", 9, "REPORT_GENERATE"),
        _ev("TaskStarted", "e", 9, "REPORT_GENERATE", attempt=2),
    ]  # fmt: skip
    for row in rows:
        tally.add(row)
    audit = [
        AuditRow(at=T0, actor="alice", action="retry", outcome="started"),
        AuditRow(at=T0, actor="bob", action="retry", outcome="refused"),
        AuditRow(at=T0, actor="bob", action="cancel", outcome="requested"),
    ]
    docs = [
        DocumentRow(status="ready", indexed_chunks=10, last_task_id="a"),
        DocumentRow(status="ready", indexed_chunks=10, last_task_id="b"),
        DocumentRow(status="failed", indexed_chunks=0, last_task_id="c"),
    ]
    kb = knowledge_base(docs, {"a": done, "b": {**done, "pages": None, "format": "md"}})
    data = build_report(
        report_id="r",
        title=None,
        since=T0,
        until=T0 + timedelta(hours=2),
        generated_at=T0,
        tally=tally,
        audit=audit,
        kb=kb,
        top_failures=5,
    )
    by_type = {t.task_type: t.by_status for t in data.tasks}
    assert by_type == {
        "DOCUMENT_IMPORT": {"completed": 2, "failed": 2, "cancelled": 1},
        "REPORT_GENERATE": {"running": 1},
    }
    assert (data.headline.tasks, data.headline.completed, data.headline.failed) == (6, 2, 2)
    [reason] = data.failures
    assert (reason.reason, reason.count, reason.example) == (
        "CorruptDocument",
        2,
        "CorruptDocument: c.pdf is not readable",
    )
    [dur] = data.durations
    assert (dur.runs, dur.p50_seconds, dur.p95_seconds, dur.max_seconds) == (2, 20.0, 29.0, 30.0)
    assert [(h.hour.hour, h.completed, h.failed, h.cancelled) for h in data.throughput] == [
        (10, 2, 1, 1),
        (11, 0, 1, 0),
    ]
    assert data.throughput_peak == 4
    r = data.retries
    assert (r.manual_started, r.manual_refused, r.retried_runs, r.automatic_runs) == (1, 1, 1, 1)
    assert (data.embeddings.billed, data.embeddings.reused, data.embeddings.imports) == (7, 13, 2)
    assert (kb.documents, kb.chunks, kb.pages, kb.documents_without_pages) == (3, 20, 4, 1)
    assert kb.by_status == {"ready": 2, "failed": 1} and kb.formats == {"pdf": 1, "md": 1}
    assert failure_kind("something broke: badly, with no kind") == (
        "something broke: badly, with no kind"
    )


async def test_render_retry_reuses_drawn_charts_and_discard_cleans_up(settings: Settings) -> None:
    from activities.report import ReportActivities
    from knowledgeops.runtime.resources import Resources

    db = await Database.open(settings)
    try:
        acts = ReportActivities(Resources(settings, db, None, None))  # type: ignore[arg-type]
        env = ActivityEnvironment()
        req = CollectRequest(
            report_id="r-1", since=T0, until=T0 + timedelta(days=1), top_failures=3
        )
        collected = await env.run(acts.collect_report_data, req)
        assert (collected.events, collected.headline.tasks) == (0, 0)
        work = settings.reports_dir / "work" / "r-1"
        # A previous attempt drew the first chart, and its heartbeat said so.
        (work / "tasks.svg").write_text('<svg id="drawn-before"></svg>')
        env.info = dataclasses.replace(
            env.info, heartbeat_details=[RenderCheckpoint(done=1, total=4).model_dump()]
        )
        rendered = await env.run(acts.render_report, RenderRequest(report_id="r-1"))
        page = _read(rendered.html_path)
        assert 'id="drawn-before"' in page and "No task ended in this period." in page
        assert not work.exists()
        # Published already: a repeated render returns the same files, and discard keeps them.
        again = await env.run(acts.render_report, RenderRequest(report_id="r-1"))
        assert again == rendered
        assert await env.run(acts.discard_report_work, RenderRequest(report_id="r-1")) == 0
        assert _read(rendered.json_path)
    finally:
        await db.close()


def _leftovers(reports_dir: Path) -> list[Path]:
    return list((reports_dir / "work").glob("*/*"))


def _read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _assert_self_contained(page: str) -> None:
    assert page.count("<svg") >= 3, "charts must be inline SVG"
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "external reference"
    assert "<script" not in page and "<link" not in page and "<img" not in page


async def test_report_end_to_end(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    s = openai_settings(settings, fake_openai)
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(b"%PDF-1.7\n garbage that is not a pdf body")
    async with running_env(s) as env:
        good = [EXAMPLES / "water-cycle.pdf", EXAMPLES / "spaced-repetition.txt"]
        results = []
        for path in [*good, good[1]]:  # the re-import reuses every embedding
            ref = await env.documents.import_file(path)
            st = await env.service.wait(ref.task_id, timeout=WAIT)
            assert st.status == "completed" and st.result is not None, st.last_error
            results.append(st.result)
        ref = await env.documents.import_file(bad)
        failed = await env.service.wait(ref.task_id, timeout=WAIT)
        assert failed.status == "failed" and failed.last_error
        await env.service.retry(ref.task_id, reason="try once more", actor="alice")
        assert (await env.service.wait(ref.task_id, timeout=WAIT)).status == "failed"

        task = await env.service.enqueue(
            TaskType.REPORT_GENERATE, {"period_days": 1, "top_failures": 5, "title": "Weekly"}
        )
        st = await env.service.wait(task.task_id, timeout=WAIT)
        assert st.status == "completed", st.last_error
        assert (st.progress.stage, st.progress.done, st.progress.total) == ("completed", 2, 2)
        assert st.progress.unit == "steps"
        result = st.result or {}
        assert result["report_id"] == task.task_id
        assert not _leftovers(s.reports_dir), "the working files were not removed"

    data = json.loads(_read(result["json_path"]))
    assert data["headline"] == result["headline"]
    by_type = {t["task_type"]: t["by_status"] for t in data["tasks"]}
    # The report's own run is running while it counts.
    assert by_type == {
        "DOCUMENT_IMPORT": {"completed": 3, "failed": 2},
        "REPORT_GENERATE": {"running": 1},
    }
    [reason] = data["failures"]
    assert (reason["reason"], reason["count"], reason["task_types"]) == (
        "CorruptDocument",
        2,
        ["DOCUMENT_IMPORT"],
    )
    assert "broken.pdf is not a readable PDF" in reason["example"]
    assert reason["example"] == failed.last_error
    emb = data["embeddings"]
    assert emb["billed"] == sum(r["embedded"] for r in results) == fake_openai.embedded_count()
    assert emb["reused"] == sum(r["reused"] for r in results) == results[2]["total_chunks"] > 0
    retries = data["retries"]
    assert (retries["manual_started"], retries["retried_runs"]) == (1, 1)
    assert retries["manual_by_actor"] == {"alice": 1}
    [dur] = data["durations"]
    assert dur["task_type"] == "DOCUMENT_IMPORT" and dur["runs"] == 3
    assert 0 < dur["p50_seconds"] <= dur["p95_seconds"] <= dur["max_seconds"] < WAIT
    ended = [(h["completed"], h["failed"]) for h in data["throughput"]]
    assert tuple(map(sum, zip(*ended, strict=True))) == (3, 2)
    kb = data["knowledge_base"]
    assert kb["documents"] == 3 and kb["by_status"] == {"ready": 2, "failed": 1}
    assert kb["chunks"] == results[0]["total_chunks"] + results[2]["total_chunks"]
    assert kb["pages"] == results[0]["pages"] > 0
    page = _read(result["html_path"])
    _assert_self_contained(page)
    assert "<h1>Weekly</h1>" in page and "CorruptDocument" in page

    # Through the HTTP API: a second report started with POST /v1/tasks, list, downloads.
    async with running_api(s) as api:
        r = await api.http.post(
            "/v1/tasks", json={"type": "REPORT_GENERATE", "payload": {"period_days": 2}}
        )
        assert r.status_code == 202, r.text
        second = await api.wait_task(r.json()["task_id"])
        assert second["status"] == "completed", second
        listed = (await api.http.get("/v1/reports")).json()
        assert [x["report_id"] for x in listed] == [second["task_id"], task.task_id]
        assert listed[1]["json_bytes"] == len(_read(result["json_path"]).encode())
        html = await api.http.get(second["result"]["html_url"])
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
        _assert_self_contained(html.text)
        js = await api.http.get(f"/v1/reports/{task.task_id}.json")
        assert js.status_code == 200 and js.json() == data
        for url in ("/v1/reports/nope.html", "/v1/reports/nope.json", "/v1/reports/.work.json"):
            r = await api.http.get(url)
            assert r.status_code == 404, url
            assert r.json()["code"] == "not_found", r.text
        r = await api.http.get("/v1/reports/..%2F..%2Fapp.db.json")
        assert r.status_code == 404 and r.json()["code"] == "not_found", r.text
