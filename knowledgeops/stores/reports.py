"""Stored reports and the database reads behind them.

Layout under `settings.reports_dir`: `<report id>.html` and `<report id>.json` (the JSON is
written last, so a listed report always has both), and `.work/<report id>/` while a report is
being made (its data and the charts rendered so far; removed once it is published). Report ids
are task ids, checked against a pattern with no path separator before they touch the disk.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from sqlalchemy import select

from knowledgeops.contracts.events import EventType
from knowledgeops.contracts.report import REPORT_ID_PATTERN
from knowledgeops.reporting import IMPORT_TYPE, aware
from knowledgeops.stores.audit import AuditRow
from knowledgeops.stores.catalogue import DocumentRow
from knowledgeops.stores.events import EventRow

if TYPE_CHECKING:
    from knowledgeops.stores.database import Database

_ID = re.compile(REPORT_ID_PATTERN)
PAGE = 2000


class ReportNotFoundError(LookupError):
    pass


class ReportSummary(BaseModel):
    report_id: str
    title: str
    created_at: datetime
    since: datetime
    until: datetime
    html_bytes: int
    json_bytes: int


def check_id(report_id: str) -> str:
    if not _ID.fullmatch(report_id):
        raise ReportNotFoundError(
            f"{report_id!r} is not a report id (letters, digits and _.:- only)"
        )
    return report_id


class ReportFiles:
    def __init__(self, reports_dir: Path) -> None:
        self.root = reports_dir

    def html(self, report_id: str) -> Path:
        return self.root / f"{check_id(report_id)}.html"

    def json(self, report_id: str) -> Path:
        return self.root / f"{check_id(report_id)}.json"

    def work(self, report_id: str) -> Path:
        return self.root / ".work" / check_id(report_id)

    def existing(self, report_id: str, kind: str) -> Path:
        """The published file (`html` or `json`) of a report; ReportNotFoundError if none."""
        path = self.html(report_id) if kind == "html" else self.json(report_id)
        if not (path.is_file() and self.json(report_id).is_file()):
            raise ReportNotFoundError(f"No report with id {report_id!r}")
        return path

    def list(self) -> list[ReportSummary]:
        """Published reports, newest first."""
        out = []
        for path in self.root.glob("*.json") if self.root.is_dir() else []:
            report_id = path.stem
            html = self.root / f"{report_id}.html"
            if not _ID.fullmatch(report_id) or not html.is_file():
                continue
            meta = json.loads(path.read_text(encoding="utf-8"))
            out.append(
                ReportSummary(
                    report_id=report_id,
                    title=meta.get("title", ""),
                    created_at=meta["generated_at"],
                    since=meta["since"],
                    until=meta["until"],
                    html_bytes=html.stat().st_size,
                    json_bytes=path.stat().st_size,
                )
            )
        return sorted(out, key=lambda r: (r.created_at, r.report_id), reverse=True)


# -- database reads ------------------------------------------------------------------------------


async def events_between(
    db: Database, since: datetime, until: datetime
) -> AsyncIterator[list[EventRow]]:
    """Domain events with since <= at < until, in seq order, a page at a time."""
    after = 0
    while True:
        q = (
            select(EventRow)
            .where(EventRow.seq > after, EventRow.at >= since, EventRow.at < until)
            .order_by(EventRow.seq)
            .limit(PAGE)
        )
        async with db.sessions() as s:
            rows = list((await s.execute(q)).scalars())
        for r in rows:
            r.at = aware(r.at)
        if not rows:
            return
        yield rows
        after = rows[-1].seq


async def audit_between(db: Database, since: datetime, until: datetime) -> list[AuditRow]:
    q = select(AuditRow).where(
        AuditRow.action == "retry", AuditRow.at >= since, AuditRow.at < until
    )
    async with db.sessions() as s:
        return list((await s.execute(q)).scalars())


async def documents(db: Database) -> list[DocumentRow]:
    async with db.sessions() as s:
        return list((await s.execute(select(DocumentRow))).scalars())


async def import_results(db: Database, task_ids: set[str]) -> dict[str, dict[str, Any]]:
    """task id -> the data of its latest TaskCompleted (the DocumentImportResult)."""
    out: dict[str, dict[str, Any]] = {}
    ids = sorted(task_ids)
    for i in range(0, len(ids), 500):  # keep each IN list well under SQL parameter limits
        q = (
            select(EventRow.task_id, EventRow.data)
            .where(
                EventRow.task_id.in_(ids[i : i + 500]),
                EventRow.task_type == IMPORT_TYPE,
                EventRow.event_type == EventType.TASK_COMPLETED.value,
            )
            .order_by(EventRow.seq)
        )
        async with db.sessions() as s:
            for task_id, data in (await s.execute(q)).all():
                out[task_id] = data or {}
    return out
