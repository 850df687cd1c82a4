"""Activities of REPORT_GENERATE: collect the figures, render and publish, discard a failed
attempt's leftovers.

The figures go from the database to `.work/<id>/data.json`; rendering reads them from there,
writes each chart to its own file (so a retried render reuses the charts already drawn, as its
heartbeat checkpoint says), then publishes `<id>.html` and `<id>.json`. Everything is written
atomically and named by the report id, so running either step again never duplicates a report.
"""

from __future__ import annotations

import asyncio
import importlib
import shutil
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio import activity

from activities.support import Heartbeater, bad_input, resume_from
from knowledgeops.contracts.base import Checkpoint
from knowledgeops.contracts.report import (
    COLLECT_REPORT_DATA,
    DISCARD_REPORT_WORK,
    RENDER_REPORT,
    CollectRequest,
    CollectResult,
    RenderCheckpoint,
    RenderRequest,
    RenderResult,
)
from knowledgeops.report_data import ReportData
from knowledgeops.report_render import render_html
from knowledgeops.reporting import EventTally, build_report, knowledge_base
from knowledgeops.resources import Resources
from knowledgeops.stores import reports
from knowledgeops.stores.file_store import write_atomically as write_atomic
from knowledgeops.stores.reports import ReportFiles

if TYPE_CHECKING:
    from knowledgeops.report_charts import Draw

DATA_FILE = "data.json"
# matplotlib's drawing is not meant for concurrent use: one chart at a time per process.
_DRAW_LOCK = threading.Lock()


class ReportActivities:
    def __init__(self, resources: Resources) -> None:
        self.db = resources.db
        self.files = ReportFiles(resources.settings.reports_dir)

    @activity.defn(name=COLLECT_REPORT_DATA.name)
    async def collect_report_data(self, req: CollectRequest) -> CollectResult:
        # A read only (seconds even for 100,000 events): a retry simply reads again.
        hb = Heartbeater(Checkpoint().model_dump())
        async with hb:
            tally = EventTally()
            async for page in reports.events_between(self.db, req.since, req.until):
                for row in page:
                    tally.add(row)
                hb.update(Checkpoint(done=tally.events).model_dump())
            docs = await reports.documents(self.db)
            results = await reports.import_results(
                self.db, {d.last_task_id for d in docs if d.status == "ready"}
            )
            data = build_report(
                report_id=req.report_id,
                title=req.title,
                since=req.since,
                until=req.until,
                generated_at=datetime.now(UTC),
                tally=tally,
                audit=await reports.audit_between(self.db, req.since, req.until),
                kb=knowledge_base(docs, results),
                top_failures=req.top_failures,
            )
            path = self.files.work(req.report_id) / DATA_FILE
            await asyncio.to_thread(write_atomic, path, data.model_dump_json(indent=2).encode())
        return CollectResult(report_id=req.report_id, events=tally.events, headline=data.headline)

    @activity.defn(name=RENDER_REPORT.name)
    async def render_report(self, req: RenderRequest) -> RenderResult:
        work = self.files.work(req.report_id)
        html_path, json_path = self.files.html(req.report_id), self.files.json(req.report_id)
        raw = await asyncio.to_thread(_read_data, work)
        if raw is None:
            if html_path.is_file() and json_path.is_file():
                # Published by an attempt whose completion never reached the server.
                return await asyncio.to_thread(self._result, req.report_id)
            raise bad_input(
                "ReportDataMissing",
                f"the collected figures of report {req.report_id} are gone ({work}); "
                "start the report again",
            )
        data = ReportData.model_validate_json(raw)
        # matplotlib (~30 MB) loads only in a worker that renders a report, not in every worker.
        drawing = await asyncio.to_thread(importlib.import_module, "knowledgeops.report_charts")
        charts_to_draw = drawing.CHARTS
        checkpoint = resume_from(
            RenderCheckpoint(total=len(charts_to_draw)), lambda cp: cp.total == len(charts_to_draw)
        )
        hb = Heartbeater(checkpoint.model_dump())
        charts: dict[str, str | None] = {}
        async with hb:
            for i, (name, draw) in enumerate(charts_to_draw):
                reuse = i < checkpoint.done
                # In a thread: drawing is CPU work that would stall heartbeats and polls.
                charts[name] = await asyncio.to_thread(_chart, work, name, draw, data, reuse)
                hb.update(RenderCheckpoint(done=i + 1, total=len(charts_to_draw)).model_dump())
            page = await asyncio.to_thread(render_html, data, charts)
            await asyncio.to_thread(_publish, work, page, html_path, json_path)
        return await asyncio.to_thread(self._result, req.report_id)

    def _result(self, report_id: str) -> RenderResult:
        html_path, json_path = self.files.html(report_id), self.files.json(report_id)
        return RenderResult(
            report_id=report_id,
            html_path=str(html_path),
            json_path=str(json_path),
            html_bytes=html_path.stat().st_size,
            json_bytes=json_path.stat().st_size,
            charts=html_path.read_text(encoding="utf-8").count("<svg"),
        )

    @activity.defn(name=DISCARD_REPORT_WORK.name)
    async def discard_report_work(self, req: RenderRequest) -> int:
        """Remove a failed or cancelled report's working files (a published report stays)."""
        return await asyncio.to_thread(_discard, self.files.work(req.report_id))


def _read_data(work: Path) -> bytes | None:
    path = work / DATA_FILE
    return path.read_bytes() if path.is_file() else None


def _chart(work: Path, name: str, draw: Draw, data: ReportData, reuse: bool) -> str | None:
    """A chart's SVG (None: nothing to show), drawn now or, on a retry, read back."""
    svg_file, none_file = work / f"{name}.svg", work / f"{name}.none"
    if reuse and svg_file.is_file():
        return svg_file.read_text(encoding="utf-8")
    if reuse and none_file.is_file():
        return None
    with _DRAW_LOCK:
        svg = draw(data)
    write_atomic(svg_file if svg else none_file, (svg or "").encode())
    return svg


def _publish(work: Path, page: str, html_path: Path, json_path: Path) -> None:
    write_atomic(html_path, page.encode())
    # The JSON last: a report is listed once both of its files exist.
    write_atomic(json_path, (work / DATA_FILE).read_bytes())
    shutil.rmtree(work, ignore_errors=True)


def _discard(work: Path) -> int:
    if not work.is_dir():
        return 0
    removed = sum(1 for p in work.iterdir() if p.is_file())
    shutil.rmtree(work)
    return removed
