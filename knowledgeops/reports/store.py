"""Stored reports and the database reads behind them.

Keys in the store (STORAGE_URL's, else the data folder, so `reports/<id>.html` is the file
`data/reports/<id>.html`): `reports/<report id>.html` and `reports/<report id>.json` (the JSON
is written last, so a listed report always has both), and `reports/work/<report id>/` while a
report is being made (its data and the charts rendered so far; removed once it is published).
Report ids are task ids, checked against a pattern with no path separator before they name a
key.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel
from sqlalchemy import select

from knowledgeops.contracts.events import EventType
from knowledgeops.contracts.report import REPORT_ID_PATTERN
from knowledgeops.db.audit import AuditRow
from knowledgeops.db.catalogue import DocumentRow
from knowledgeops.db.events import EventRow
from knowledgeops.files.outputs import LEGACY_WORK, WorkFiles
from knowledgeops.reports.figures import IMPORT_TYPE, aware
from knowledgeops.storage.local import LocalStore
from knowledgeops.storage.store import Store, StoredObjectMissing

if TYPE_CHECKING:
    from knowledgeops.db.database import Database

_ID = re.compile(REPORT_ID_PATTERN)
PAGE = 2000
PREFIX = "reports"
Kind = Literal["html", "json"]


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
    def __init__(self, store: Store, reports_dir: Path | None = None) -> None:
        """`reports_dir`: the data folder's reports/ (settings.reports_dir), where a report in
        the making during an upgrade has its earlier working files; None: not looked at."""
        self.store = store
        self.reports_dir = reports_dir

    def key(self, report_id: str, kind: Kind) -> str:
        return f"{PREFIX}/{check_id(report_id)}.{kind}"

    def location(self, report_id: str, kind: Kind) -> str:
        """Where a published file is, for a task's result: a path with a local folder as the
        store (the file as before), else its key in the store."""
        key = self.key(report_id, kind)
        if isinstance(self.store, LocalStore):
            return str(self.store.root.joinpath(*key.split("/")))
        return f"{key} in {self.store.describe()}"

    async def publish(self, report_id: str, html: bytes, data: bytes) -> None:
        await self.store.put(self.key(report_id, "html"), html)
        # The JSON last: a report is listed (and served) once it is there.
        await self.store.put(self.key(report_id, "json"), data)

    async def sizes(self, report_id: str) -> tuple[int, int] | None:
        """(HTML bytes, JSON bytes) of a published report; None if it is not published."""
        json_size = await self.store.size(self.key(report_id, "json"))
        html_size = await self.store.size(self.key(report_id, "html"))
        if json_size is None or html_size is None:
            return None
        return html_size, json_size

    async def read(self, report_id: str, kind: Kind) -> bytes:
        """A published file of a report; ReportNotFoundError if there is none."""
        missing = ReportNotFoundError(f"No report with id {report_id!r}")
        try:
            if kind == "html" and not await self.store.exists(self.key(report_id, "json")):
                raise missing  # not published yet: its HTML may be there, its JSON is not
            return await self.store.get(self.key(report_id, kind))
        except StoredObjectMissing:
            raise missing from None

    async def list(self) -> list[ReportSummary]:
        """Published reports, newest first."""
        objects = {o.key: o for o in await self.store.list(PREFIX)}
        found = []
        for key, obj in objects.items():
            name = key.removeprefix(f"{PREFIX}/")
            report_id = name.removesuffix(".json")
            html = objects.get(f"{PREFIX}/{report_id}.html")
            # Only a report's own files: not the working files under reports/work/.
            if "/" in name or name == report_id or not _ID.fullmatch(report_id) or html is None:
                continue
            found.append((report_id, html.size, obj.size))
        metas = await asyncio.gather(*(self._meta(report_id) for report_id, _, _ in found))
        out = [
            ReportSummary(
                report_id=report_id,
                title=meta.get("title", ""),
                created_at=meta["generated_at"],
                since=meta["since"],
                until=meta["until"],
                html_bytes=html_bytes,
                json_bytes=json_bytes,
            )
            for (report_id, html_bytes, json_bytes), meta in zip(found, metas, strict=True)
            if meta is not None
        ]
        return sorted(out, key=lambda r: (r.created_at, r.report_id), reverse=True)

    async def _meta(self, report_id: str) -> dict[str, Any] | None:
        try:
            raw = await self.store.get(self.key(report_id, "json"))
        except StoredObjectMissing:
            return None  # deleted since the listing: not a report any more
        meta: dict[str, Any] = json.loads(raw)
        return meta

    # A report's working files, while it is made (named by the activity: data.json, charts).

    def work(self, report_id: str) -> WorkFiles:
        legacy = self.reports_dir / LEGACY_WORK / report_id if self.reports_dir else None
        return WorkFiles(self.store, f"{PREFIX}/work/{check_id(report_id)}", legacy)


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
