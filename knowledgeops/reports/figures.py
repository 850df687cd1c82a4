"""Platform report figures: what REPORT_GENERATE computes, as a pure function over rows.

`EventTally` takes the domain events of the period one at a time (so the caller can stream
them in pages); `build_report` turns the tally, the audit records and the document
catalogue into `ReportData`, the report's JSON. No I/O here: the activity reads the database
(knowledgeops/reports/store.py), the tests feed rows directly.

Definitions (also written into every report, so a reader never has to guess):
- a run is counted when any of its events falls in the period; its status is that of its
  last event in the period (pending: queued, running: started, or completed / failed /
  cancelled);
- a duration runs from TaskStarted to TaskCompleted of the same run; failed and cancelled
  runs are left out, since they end early and would pull the figures down;
- throughput counts runs that ended (completed, failed or cancelled) in each hour;
- embeddings billed / reused come from the results of DOCUMENT_IMPORT runs completed in the
  period (a failed or cancelled import's partial work is not in any result).

The report's data itself (`ReportData`, with these definitions) is in data.py.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from knowledgeops.contracts.events import EventType
from knowledgeops.contracts.report import Headline
from knowledgeops.reports.data import (
    STATUSES,
    DurationStats,
    Embeddings,
    FailureReason,
    HourCount,
    KnowledgeBase,
    ReportData,
    Retries,
    TypeCounts,
)

TERMINAL = {
    EventType.TASK_COMPLETED.value: "completed",
    EventType.TASK_FAILED.value: "failed",
    EventType.TASK_CANCELLED.value: "cancelled",
    # Recorded by the reconciler for runs no workflow code could close (operator, timeout).
    EventType.TASK_TERMINATED.value: "failed",
    EventType.TASK_TIMED_OUT.value: "failed",
}
_STATUS_OF = {
    EventType.TASK_ENQUEUED.value: "pending",
    EventType.TASK_RETRIED.value: "pending",
    EventType.TASK_STARTED.value: "running",
    **TERMINAL,
}
IMPORT_TYPE = "DOCUMENT_IMPORT"


class EventFacts(Protocol):
    event_type: str
    task_id: str
    run_id: str
    task_type: str
    attempt: int
    at: datetime
    error: str | None
    data: dict[str, Any]


class AuditFacts(Protocol):
    at: datetime
    actor: str
    action: str
    outcome: str


class DocumentFacts(Protocol):
    status: str
    indexed_chunks: int
    last_task_id: str


# -- aggregation ---------------------------------------------------------------------------------


@dataclass
class _Run:
    task_type: str
    status: str = "pending"
    started: datetime | None = None
    completed: datetime | None = None


@dataclass
class _Failure:
    count: int = 0
    task_types: set[str] = field(default_factory=set)
    example: str = ""
    last_at: datetime | None = None


def aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def hour_of(dt: datetime) -> datetime:
    return aware(dt).astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def failure_kind(error: str | None) -> str:
    """`CorruptDocument: x.pdf is ...` -> `CorruptDocument`; a message without a kind is its
    own reason (shortened)."""
    text = (error or "").strip() or "(no error message)"
    head, sep, _ = text.partition(": ")
    if sep and head.replace("_", "").replace(".", "").isalnum() and len(head) <= 60:
        return head
    return text if len(text) <= 80 else text[:77] + "..."


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) of sorted `values`."""
    if not values:
        raise ValueError("percentile of no values")
    pos = (len(values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


class EventTally:
    """Everything the report needs from the period's events, fed in `seq` order."""

    def __init__(self) -> None:
        self.events = 0
        self._runs: dict[tuple[str, str], _Run] = {}
        self._failures: dict[str, _Failure] = defaultdict(_Failure)
        self._hours: dict[datetime, Counter[str]] = defaultdict(Counter)
        self._retried: Counter[str] = Counter()
        self._automatic: set[tuple[str, str]] = set()
        self.embeddings = Embeddings()

    def add(self, ev: EventFacts) -> None:
        self.events += 1
        at = aware(ev.at)
        key = (ev.task_id, ev.run_id)
        run = self._runs.setdefault(key, _Run(ev.task_type))
        kind = ev.event_type
        if ev.attempt > 1:
            self._automatic.add(key)
        if kind == EventType.TASK_RETRIED.value:
            self._retried[ev.task_type] += 1
        if kind == EventType.TASK_STARTED.value:
            run.started = at
        # A late duplicate of an earlier event never moves a finished run back.
        if run.status not in TERMINAL.values():
            run.status = _STATUS_OF.get(kind, run.status)
        if kind in TERMINAL:
            self._hours[hour_of(at)][TERMINAL[kind]] += 1
        if kind == EventType.TASK_COMPLETED.value:
            run.completed = at
            if ev.task_type == IMPORT_TYPE:
                d = ev.data or {}
                self.embeddings.imports += 1
                self.embeddings.chunks += int(d.get("total_chunks") or 0)
                self.embeddings.billed += int(d.get("embedded") or 0)
                self.embeddings.reused += int(d.get("reused") or 0)
        if kind == EventType.TASK_FAILED.value:
            f = self._failures[failure_kind(ev.error)]
            f.count += 1
            f.task_types.add(ev.task_type)
            if f.last_at is None or at >= f.last_at:
                f.example, f.last_at = ev.error or "", at

    def task_counts(self) -> list[TypeCounts]:
        per: dict[str, Counter[str]] = defaultdict(Counter)
        for run in self._runs.values():
            per[run.task_type][run.status] += 1
        rows = [
            TypeCounts(
                task_type=t,
                total=sum(c.values()),
                by_status={s: c[s] for s in STATUSES if c[s]},
            )
            for t, c in per.items()
        ]
        return sorted(rows, key=lambda r: (-r.total, r.task_type))

    def failures(self, top: int) -> list[FailureReason]:
        ranked = sorted(self._failures.items(), key=lambda kv: (-kv[1].count, kv[0]))
        return [
            FailureReason(
                reason=reason,
                count=f.count,
                task_types=sorted(f.task_types),
                example=f.example,
                last_at=f.last_at or datetime.min.replace(tzinfo=UTC),
            )
            for reason, f in ranked[:top]
        ]

    def failure_totals(self) -> tuple[int, int]:
        """(failed runs, distinct reasons)."""
        return sum(f.count for f in self._failures.values()), len(self._failures)

    def durations(self) -> list[DurationStats]:
        per: dict[str, list[float]] = defaultdict(list)
        for run in self._runs.values():
            if run.started is not None and run.completed is not None:
                per[run.task_type].append(max(0.0, (run.completed - run.started).total_seconds()))
        out = []
        for task_type, values in sorted(per.items()):
            values.sort()
            out.append(
                DurationStats(
                    task_type=task_type,
                    runs=len(values),
                    p50_seconds=round(percentile(values, 0.50), 3),
                    p95_seconds=round(percentile(values, 0.95), 3),
                    max_seconds=round(values[-1], 3),
                )
            )
        return out

    def throughput(self) -> list[HourCount]:
        return [HourCount(hour=h, **dict(c)) for h, c in sorted(self._hours.items())]

    def retries(self) -> Retries:
        return Retries(
            retried_runs=sum(self._retried.values()),
            retried_runs_by_type=dict(sorted(self._retried.items())),
            automatic_runs=len(self._automatic),
        )


def knowledge_base(
    documents: Iterable[DocumentFacts], import_results: Mapping[str, Mapping[str, Any]]
) -> KnowledgeBase:
    """Catalogue figures; pages and formats from each ready document's last import result
    (`import_results`: task id -> TaskCompleted data)."""
    kb = KnowledgeBase()
    statuses: Counter[str] = Counter()
    formats: Counter[str] = Counter()
    for doc in documents:
        kb.documents += 1
        statuses[doc.status] += 1
        if doc.status != "ready":
            continue
        kb.chunks += doc.indexed_chunks
        result = import_results.get(doc.last_task_id) or {}
        if result.get("format"):
            formats[str(result["format"])] += 1
        if result.get("pages"):
            kb.pages += int(result["pages"])
        else:
            kb.documents_without_pages += 1
    kb.by_status = dict(statuses.most_common())
    kb.formats = dict(formats.most_common())
    return kb


def manual_retries(audit: Iterable[AuditFacts], into: Retries) -> Retries:
    actors: Counter[str] = Counter()
    for row in audit:
        if row.action != "retry":
            continue  # a bulk retry also writes one "retry" record per task it retried
        into.manual_requested += 1
        if row.outcome == "started":
            into.manual_started += 1
            actors[row.actor] += 1
        else:
            into.manual_refused += 1
    into.manual_by_actor = dict(actors.most_common())
    return into


def build_report(
    *,
    report_id: str,
    title: str | None,
    since: datetime,
    until: datetime,
    generated_at: datetime,
    tally: EventTally,
    audit: Iterable[AuditFacts],
    kb: KnowledgeBase,
    top_failures: int,
) -> ReportData:
    tasks = tally.task_counts()
    status_totals: Counter[str] = Counter()
    for row in tasks:
        status_totals.update(row.by_status)
    retries = manual_retries(audit, tally.retries())
    throughput = tally.throughput()
    failed_total, reasons_total = tally.failure_totals()
    emb = tally.embeddings
    return ReportData(
        report_id=report_id,
        title=title or "Platform report",
        generated_at=generated_at,
        since=since,
        until=until,
        headline=Headline(
            tasks=sum(r.total for r in tasks),
            completed=status_totals["completed"],
            failed=status_totals["failed"],
            cancelled=status_totals["cancelled"],
            manual_retries=retries.manual_started,
            documents=kb.documents,
            chunks=kb.chunks,
            embeddings_billed=emb.billed,
            embeddings_reused=emb.reused,
        ),
        tasks=tasks,
        failures=tally.failures(top_failures),
        failures_total=failed_total,
        failure_reasons_total=reasons_total,
        durations=tally.durations(),
        throughput=throughput,
        throughput_peak=max((h.completed + h.failed + h.cancelled for h in throughput), default=0),
        retries=retries,
        embeddings=emb,
        knowledge_base=kb,
    )
