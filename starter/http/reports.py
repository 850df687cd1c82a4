"""Reports made by REPORT_GENERATE: list, and download as HTML or JSON.

A report is started like any task (`POST /v1/tasks {"type": "REPORT_GENERATE", ...}`); its
id is the task id. Ids are checked against the report id pattern before any file is touched,
so no id can name a key outside the reports folder of the store.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse, JSONResponse, Response

from knowledgeops.reports.store import Kind, ReportFiles, ReportNotFoundError, ReportSummary
from starter.http.access import CallerDep, unscoped
from starter.http.errors import ERROR_RESPONSES, ApiError
from starter.http.runtime import RuntimeDep


def _whole_system(who: CallerDep) -> None:
    unscoped(who, "read the system's reports")


router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, dependencies=[Depends(_whole_system)])
MEDIA_TYPES = {"html": "text/html; charset=utf-8", "json": "application/json"}


async def _file(rt: RuntimeDep, report_id: str, kind: Kind) -> Response:
    # From the store (STORAGE_URL's, else the data folder): a report published on another
    # machine is served too. Reports are a few hundred KB: read whole, not streamed.
    try:
        data = await ReportFiles(rt.resources.storage).read(report_id, kind)
    except ReportNotFoundError as e:
        raise ApiError(404, "not_found", str(e)) from None
    return Response(content=data, media_type=MEDIA_TYPES[kind])


@router.get("/reports", response_model=list[ReportSummary])
async def list_reports(rt: RuntimeDep) -> list[ReportSummary]:
    """Published reports, newest first: id, title, creation time, time range, file sizes."""
    return await ReportFiles(rt.resources.storage).list()


@router.get("/reports/{report_id}.html", response_class=HTMLResponse)
async def report_html(rt: RuntimeDep, report_id: str) -> Response:
    """The report as a self-contained HTML page (charts inline)."""
    return await _file(rt, report_id, "html")


@router.get("/reports/{report_id}.json", response_class=JSONResponse)
async def report_json(rt: RuntimeDep, report_id: str) -> Response:
    """The report's figures as JSON."""
    return await _file(rt, report_id, "json")
