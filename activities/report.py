"""Activities of REPORT_GENERATE: collect the figures, render and publish, discard a failed
attempt's leftovers.

The figures go from the database to the report's working file `data.json` (key
`reports/work/<id>/data.json` in STORAGE_URL's store, so the render may run on another
machine); rendering reads them from there, stores each chart as a working file of its own (so a
retried render reuses the charts already drawn, as its heartbeat checkpoint says), then
publishes `reports/<id>.html` and `reports/<id>.json`. Every object is written whole and named
by the report id, so running either step again never duplicates a report.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from temporalio import activity

from activities.support import Heartbeater, resume_from
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
from knowledgeops.errors import bad_input
from knowledgeops.reports import store as reports
from knowledgeops.reports.data import ReportData
from knowledgeops.reports.figures import EventTally, build_report, knowledge_base
from knowledgeops.reports.render import render_html
from knowledgeops.reports.store import ReportFiles
from knowledgeops.runtime.resources import Resources

if TYPE_CHECKING:
    from knowledgeops.reports.charts import Draw

DATA_FILE = "data.json"
# matplotlib's drawing is not meant for concurrent use: one chart at a time per process.
_DRAW_LOCK = threading.Lock()


class ReportActivities:
    def __init__(self, resources: Resources) -> None:
        self.db = resources.db
        self.files = ReportFiles(resources.storage, resources.settings.reports_dir)

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
            raw = data.model_dump_json(indent=2).encode()
            await self.files.work(req.report_id).save(DATA_FILE, raw)
        return CollectResult(report_id=req.report_id, events=tally.events, headline=data.headline)

    @activity.defn(name=RENDER_REPORT.name)
    async def render_report(self, req: RenderRequest) -> RenderResult:
        report_id = req.report_id
        raw = await self.files.work(report_id).load(DATA_FILE)
        if raw is None:
            if await self.files.sizes(report_id) is not None:
                # Published by an attempt whose completion never reached the server.
                return await self._result(report_id)
            raise bad_input(
                "ReportDataMissing",
                f"the collected figures of report {report_id} are gone "
                f"({self.files.work(report_id).key(DATA_FILE)} in "
                f"{self.files.store.describe()}); start the report again",
            )
        data = ReportData.model_validate_json(raw)
        # matplotlib (~30 MB) loads only in a worker that renders a report, not in every worker.
        drawing = await asyncio.to_thread(importlib.import_module, "knowledgeops.reports.charts")
        charts_to_draw = drawing.CHARTS
        checkpoint = resume_from(
            RenderCheckpoint(total=len(charts_to_draw)), lambda cp: cp.total == len(charts_to_draw)
        )
        hb = Heartbeater(checkpoint.model_dump())
        charts: dict[str, str | None] = {}
        async with hb:
            for i, (name, draw) in enumerate(charts_to_draw):
                reuse = i < checkpoint.done
                charts[name] = await self._chart(report_id, name, draw, data, reuse)
                hb.update(RenderCheckpoint(done=i + 1, total=len(charts_to_draw)).model_dump())
            page = await asyncio.to_thread(render_html, data, charts)
            # The published JSON is the collected data as stored, byte for byte.
            await self.files.publish(report_id, page.encode(), raw)
            await self.files.work(report_id).discard()
        return await self._result(report_id, page)

    async def _chart(
        self, report_id: str, name: str, draw: Draw, data: ReportData, reuse: bool
    ) -> str | None:
        """A chart's SVG (None: nothing to show), drawn now or, on a retry, read back."""
        svg_file, none_file = f"{name}.svg", f"{name}.none"
        if reuse:
            stored = await self.files.work(report_id).load(svg_file)
            if stored is not None:
                return stored.decode("utf-8")
            if await self.files.work(report_id).load(none_file) is not None:
                return None
        # In a thread: drawing is CPU work that would stall heartbeats and polls.
        svg = await asyncio.to_thread(_draw, draw, data)
        await self.files.work(report_id).save(svg_file if svg else none_file, (svg or "").encode())
        return svg

    async def _result(self, report_id: str, page: str | None = None) -> RenderResult:
        """The published report's result (`page`: its HTML, when at hand)."""
        sizes = await self.files.sizes(report_id)
        if sizes is None:
            raise bad_input(
                "ReportMissing",
                f"report {report_id} was published but is gone from "
                f"{self.files.store.describe()} (removed by hand?); start the report again",
            )
        if page is None:
            page = (await self.files.read(report_id, "html")).decode("utf-8")
        return RenderResult(
            report_id=report_id,
            html_path=self.files.location(report_id, "html"),
            json_path=self.files.location(report_id, "json"),
            html_bytes=sizes[0],
            json_bytes=sizes[1],
            charts=page.count("<svg"),
        )

    @activity.defn(name=DISCARD_REPORT_WORK.name)
    async def discard_report_work(self, req: RenderRequest) -> int:
        """Remove a failed or cancelled report's working files (a published report stays)."""
        return await self.files.work(req.report_id).discard()


def _draw(draw: Draw, data: ReportData) -> str | None:
    with _DRAW_LOCK:
        return draw(data)
