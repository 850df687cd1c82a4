"""REPORT_GENERATE's contract: payload, activity requests / results, checkpoint, result.

The report itself (figures, tables, charts) is written to the reports directory by the
activities; only the report id, the time range and a few headline numbers cross Temporal.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field, model_validator

from knowledgeops.contracts.base import ActivityRef, Checkpoint

# A report id is its task id: letters, digits and `_.:-`, never a path separator.
REPORT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,299}$"
MAX_RANGE = timedelta(days=366)


class ReportGeneratePayload(BaseModel):
    """The time range of a report: `since` / `until` (UTC), or the `period_days` before
    `until` (default: the task's start), and how many failure reasons to list."""

    since: datetime | None = None
    until: datetime | None = None
    period_days: int = Field(default=7, ge=1, le=366)
    top_failures: int = Field(default=10, ge=1, le=100)
    title: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _range_is_sane(self) -> ReportGeneratePayload:
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} needs a time zone, e.g. 2025-01-31T00:00:00Z")
        if self.since and self.until:
            if self.since >= self.until:
                raise ValueError("since must be before until")
            if self.until - self.since > MAX_RANGE:
                raise ValueError("the time range is limited to 366 days; split the report")
        return self

    def time_range(self, now: datetime) -> tuple[datetime, datetime]:
        """(since, until) with `now` (the workflow's clock) filling what is not given."""
        until = self.until or (self.since + timedelta(days=self.period_days) if self.since else now)
        since = self.since or until - timedelta(days=self.period_days)
        return since, until


class Headline(BaseModel):
    """The few numbers a status or a notification shows; the rest is in the report files."""

    tasks: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    manual_retries: int = 0
    documents: int = 0
    chunks: int = 0
    embeddings_billed: int = 0
    embeddings_reused: int = 0


class CollectRequest(BaseModel):
    report_id: str = Field(pattern=REPORT_ID_PATTERN)
    since: datetime
    until: datetime
    top_failures: int
    title: str | None = None


class CollectResult(BaseModel):
    report_id: str
    events: int
    headline: Headline


class RenderRequest(BaseModel):
    report_id: str = Field(pattern=REPORT_ID_PATTERN)


class RenderCheckpoint(Checkpoint):
    """Heartbeat of the render activity: `done` charts of `total` are written (a retry reuses
    them)."""


class RenderResult(BaseModel):
    report_id: str
    html_path: str
    json_path: str
    html_bytes: int
    json_bytes: int
    charts: int


class ReportResult(BaseModel):
    report_id: str
    since: datetime
    until: datetime
    html_path: str
    json_path: str
    html_url: str
    json_url: str
    headline: Headline


COLLECT_REPORT_DATA: ActivityRef[CollectRequest, CollectResult] = ActivityRef(
    "collect_report_data", CollectRequest, CollectResult
)
RENDER_REPORT: ActivityRef[RenderRequest, RenderResult] = ActivityRef(
    "render_report", RenderRequest, RenderResult
)
DISCARD_REPORT_WORK: ActivityRef[RenderRequest, int] = ActivityRef(
    "discard_report_work", RenderRequest, int
)
