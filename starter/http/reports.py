"""Reports made by REPORT_GENERATE: list, and download as HTML or JSON.

A report is started like any task (`POST /v1/tasks {"type": "REPORT_GENERATE", ...}`); its
id is the task id. Ids are checked against the report id pattern before any file is touched,
so no id can name a path outside the reports directory.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse

from knowledgeops.stores.reports import ReportFiles, ReportNotFoundError, ReportSummary
from starter.http.access import CallerDep, unscoped
from starter.http.errors import ERROR_RESPONSES, ApiError
from starter.http.runtime import RuntimeDep


def _whole_system(who: CallerDep) -> None:
    unscoped(who, "read the system's reports")


router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, dependencies=[Depends(_whole_system)])


def _file(rt: RuntimeDep, report_id: str, kind: str) -> FileResponse:
    try:
        path = ReportFiles(rt.settings.reports_dir).existing(report_id, kind)
    except ReportNotFoundError as e:
        raise ApiError(404, "not_found", str(e)) from None
    media = "text/html; charset=utf-8" if kind == "html" else "application/json"
    return FileResponse(path, media_type=media)


@router.get("/reports", response_model=list[ReportSummary])
async def list_reports(rt: RuntimeDep) -> list[ReportSummary]:
    """Published reports, newest first: id, title, creation time, time range, file sizes."""
    return ReportFiles(rt.settings.reports_dir).list()


@router.get("/reports/{report_id}.html", response_class=FileResponse)
async def report_html(rt: RuntimeDep, report_id: str) -> FileResponse:
    """The report as a self-contained HTML page (charts inline)."""
    return _file(rt, report_id, "html")


@router.get("/reports/{report_id}.json", response_class=FileResponse)
async def report_json(rt: RuntimeDep, report_id: str) -> FileResponse:
    """The report's figures as JSON."""
    return _file(rt, report_id, "json")
