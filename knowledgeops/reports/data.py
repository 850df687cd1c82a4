"""The report's data: `ReportData`, the JSON a report is published as and its page is rendered
from, with its parts and the statuses its runs are counted under.

Separate from figures.py, which computes these figures from the period's rows: this is what
a report holds, for whoever renders or reads one.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from knowledgeops.contracts.report import Headline

STATUSES = ("completed", "failed", "cancelled", "running", "pending")
DEFINITIONS = {
    "tasks": "Runs with any event in the period, by their status at its end.",
    "durations": "TaskStarted to TaskCompleted of the same run; failed and cancelled runs "
    "are left out.",
    "throughput": "Runs that ended (completed, failed or cancelled) in each hour, UTC.",
    "retries": "Manual retries: retry requests in the audit log; retried runs: runs started "
    "by a retry (TaskRetried); automatic: runs whose workflow attempt was above 1. Activity "
    "attempts retried inside a run are not domain events and are not counted.",
    "embeddings": "From the results of DOCUMENT_IMPORT runs completed in the period.",
    "knowledge_base": "The document catalogue at the time the report was generated.",
}


class TypeCounts(BaseModel):
    task_type: str
    total: int
    by_status: dict[str, int]


class FailureReason(BaseModel):
    reason: str  # the error kind, e.g. CorruptDocument
    count: int
    task_types: list[str]
    example: str  # the most recent full message
    last_at: datetime


class DurationStats(BaseModel):
    task_type: str
    runs: int
    p50_seconds: float
    p95_seconds: float
    max_seconds: float


class HourCount(BaseModel):
    hour: datetime
    completed: int = 0
    failed: int = 0
    cancelled: int = 0


class Retries(BaseModel):
    manual_requested: int = 0
    manual_started: int = 0
    manual_refused: int = 0
    manual_by_actor: dict[str, int] = Field(default_factory=dict)
    retried_runs: int = 0
    retried_runs_by_type: dict[str, int] = Field(default_factory=dict)
    automatic_runs: int = 0


class KnowledgeBase(BaseModel):
    documents: int = 0
    by_status: dict[str, int] = Field(default_factory=dict)
    chunks: int = 0
    pages: int = 0
    documents_without_pages: int = 0  # formats without pages (txt, md, ...) or results gone
    formats: dict[str, int] = Field(default_factory=dict)


class Embeddings(BaseModel):
    imports: int = 0
    chunks: int = 0
    billed: int = 0
    reused: int = 0

    @property
    def reuse_ratio(self) -> float | None:
        seen = self.billed + self.reused
        return self.reused / seen if seen else None


class ReportData(BaseModel):
    report_id: str
    title: str
    generated_at: datetime
    since: datetime
    until: datetime
    headline: Headline
    tasks: list[TypeCounts]
    failures: list[FailureReason]
    failures_total: int
    failure_reasons_total: int
    durations: list[DurationStats]
    throughput: list[HourCount]  # hours with at least one ended run, in order
    throughput_peak: int
    retries: Retries
    embeddings: Embeddings
    knowledge_base: KnowledgeBase
    definitions: dict[str, str] = Field(default_factory=lambda: dict(DEFINITIONS))
