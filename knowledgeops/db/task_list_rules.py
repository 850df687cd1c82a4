"""How domain events become a task's row in the admin task list (knowledgeops/db/task_list.py):
pure functions, the same for events as they are stored, for the migration that builds the list
from events stored before it, and for the benchmark.

A row shows a task id's newest run, whatever order its events arrive in (each comes once:
EventStore projects only events it stored for the first time). Each run's events are folded
into a summary of that run (`RunState`: earliest, latest, strongest of each), and the row is a
function of those summaries and a count, so no order of arrival gives another row:
- Temporal runs one execution of a task id at a time, so every event of an older run is dated
  no later than any event of a newer run: the newest run is the one whose events are latest.
- A run's first event (TaskEnqueued / TaskRetried) is dated at its start in Temporal (until it
  comes, the service's note stands for it); the row's `started_at` (the list's order) is the
  latest such start no later than the newest run. A run without one (a continue-as-new of the
  same chain records none; or its first event is still to come) thus keeps its chain's place.
- `attempts`: runs of the task id that recorded a first event (the first run, manual retries,
  re-imports, resets): one per first event, which is projected once.
- Status: "pending" while a run has only the service's note that it started it (`apply_seed`,
  written before any worker ran it), "running" once it recorded its start (it may still wait
  for a worker to begin an activity: only Temporal knows that, see
  starter/services/task_listing.py), then how it closed. A late event of a run never undoes its
  closing.

Summaries of runs older than the one that gives `started_at` can no longer change the row and
are dropped, so a row keeps one or two of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from knowledgeops.contracts.events import EventType
from knowledgeops.db.sql import aware

# Column sizes, which values from event data are clipped to (PostgreSQL enforces them).
DOCUMENT_ID_CHARS = 300
OWNER_CHARS = 200
# Event data keys naming the document a task is about (a deletion names it apart, so the
# catalogue does not take it for an import's event).
DOCUMENT_KEYS = ("document_id", "deleted_document_id")

FIRST_EVENTS = frozenset({EventType.TASK_ENQUEUED, EventType.TASK_RETRIED})
OPEN_STATUSES = ("pending", "running")
_STATUS = {
    EventType.TASK_ENQUEUED: "running",
    EventType.TASK_RETRIED: "running",
    EventType.TASK_STARTED: "running",
    EventType.TASK_COMPLETED: "completed",
    EventType.TASK_FAILED: "failed",
    EventType.TASK_CANCELLED: "cancelled",
    EventType.TASK_TERMINATED: "terminated",
    EventType.TASK_TIMED_OUT: "timed_out",
}


def utc(dt: datetime) -> datetime:
    # SQLite keeps a datetime's fields without its offset: everything stored is in UTC.
    return aware(dt).astimezone(UTC)


def _strength(status: str) -> tuple[int, str]:
    """pending < running < any closing (two closings of one run: a fixed, if arbitrary, one)."""
    rank = OPEN_STATUSES.index(status) if status in OPEN_STATUSES else len(OPEN_STATUSES)
    return rank, status


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass(frozen=True)
class RunState:
    """What the events of one run said so far."""

    run_id: str
    task_type: str
    status: str
    seen_at: datetime  # its earliest event
    first_at: datetime | None  # its first event: the run's start in Temporal
    picked_up_at: datetime | None  # TaskStarted: a worker took it up
    closed_at: datetime | None
    document_id: str | None
    owner: str | None

    @property
    def at(self) -> datetime:
        return self.first_at or self.seen_at

    def to_json(self) -> dict[str, Any]:
        def iso(dt: datetime | None) -> str | None:
            return dt.isoformat() if dt else None

        return {
            "run_id": self.run_id,
            "task_type": self.task_type,
            "status": self.status,
            "seen_at": self.seen_at.isoformat(),
            "first_at": iso(self.first_at),
            "picked_up_at": iso(self.picked_up_at),
            "closed_at": iso(self.closed_at),
            "document_id": self.document_id,
            "owner": self.owner,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunState:
        def dt(key: str) -> datetime | None:
            return utc(datetime.fromisoformat(d[key])) if d.get(key) else None

        return cls(
            run_id=d["run_id"],
            task_type=d["task_type"],
            status=d["status"],
            seen_at=utc(datetime.fromisoformat(d["seen_at"])),
            first_at=dt("first_at"),
            picked_up_at=dt("picked_up_at"),
            closed_at=dt("closed_at"),
            document_id=d.get("document_id"),
            owner=d.get("owner"),
        )


@dataclass(frozen=True)
class TaskListEntry:
    """A task as the list shows it."""

    task_id: str
    task_type: str
    run_id: str
    status: str
    started_at: datetime
    picked_up_at: datetime | None
    closed_at: datetime | None
    document_id: str | None
    owner: str | None
    attempts: int

    @property
    def duration_seconds(self) -> float | None:
        """From the run's start (enqueue) to its close; None while it is open."""
        if self.closed_at is None:
            return None
        return round((self.closed_at - self.started_at).total_seconds(), 3)


@dataclass(frozen=True)
class TaskState:
    """A task's row: what the list shows, and the summaries of the runs it is made from."""

    entry: TaskListEntry
    runs: tuple[RunState, ...]  # by run id


def _text(data: Mapping[str, Any], keys: Iterable[str], chars: int) -> str | None:
    for k in keys:
        value = data.get(k)
        if isinstance(value, str) and value:
            return value[:chars]
    return None


def _fold(state: TaskState | None, task_id: str, seen: RunState, *, first: bool) -> TaskState:
    """`state` with one more event (or the service's note), summarised as a one-event run."""
    runs = {r.run_id: r for r in state.runs} if state else {}
    run = runs.get(seen.run_id)
    if run is not None:
        seen = RunState(
            run_id=run.run_id,
            task_type=run.task_type or seen.task_type,
            status=max(run.status, seen.status, key=_strength),
            seen_at=min(run.seen_at, seen.seen_at),
            first_at=_earliest(run.first_at, seen.first_at),
            picked_up_at=_earliest(run.picked_up_at, seen.picked_up_at),
            closed_at=_latest(run.closed_at, seen.closed_at),
            document_id=run.document_id or seen.document_id,
            owner=run.owner or seen.owner,
        )
    runs[seen.run_id] = seen
    attempts = (state.entry.attempts if state else 0) + int(first)
    return _derive(task_id, runs, attempts, state.entry if state else None)


def _derive(
    task_id: str, runs: dict[str, RunState], attempts: int, before: TaskListEntry | None
) -> TaskState:
    newest = max(runs.values(), key=lambda r: (r.at, r.run_id))
    started = [r for r in runs.values() if r.first_at is not None and r.first_at <= newest.at]
    # The run whose start is the chain's: the newest run itself, or the one it continues.
    chain = max(started, key=lambda r: (r.at, r.run_id)) if started else newest
    # A task id is about one document and owner: the newest run that says, else as before.
    latest_first = sorted(runs.values(), key=lambda r: (r.at, r.run_id), reverse=True)
    entry = TaskListEntry(
        task_id=task_id,
        task_type=next(
            (r.task_type for r in latest_first if r.task_type), before.task_type if before else ""
        ),
        run_id=newest.run_id,
        status=newest.status,
        started_at=chain.at,
        picked_up_at=newest.picked_up_at or chain.picked_up_at,
        closed_at=newest.closed_at,
        document_id=next(
            (r.document_id for r in latest_first if r.document_id),
            before.document_id if before else None,
        ),
        owner=next((r.owner for r in latest_first if r.owner), before.owner if before else None),
        attempts=attempts,
    )
    # Runs before the chain's start are older runs: none can be the newest or the chain again.
    # With no first event yet there is no such start to go by: everything is kept.
    kept = sorted(
        (r for r in runs.values() if not started or r.at >= chain.at), key=lambda r: r.run_id
    )
    return TaskState(entry, tuple(kept))


def apply_event(
    state: TaskState | None,
    *,
    task_id: str,
    run_id: str,
    task_type: str,
    kind: EventType,
    at: datetime,
    data: Mapping[str, Any],
) -> TaskState:
    """The row after one event (see the module docstring)."""
    at = utc(at)
    first = kind in FIRST_EVENTS
    status = _STATUS[kind]
    seen = RunState(
        run_id=run_id,
        task_type=task_type,
        status=status,
        seen_at=at,
        first_at=at if first else None,
        picked_up_at=at if kind == EventType.TASK_STARTED else None,
        closed_at=None if status in OPEN_STATUSES else at,
        document_id=_text(data, DOCUMENT_KEYS, DOCUMENT_ID_CHARS),
        owner=_text(data, ("owner",), OWNER_CHARS),
    )
    return _fold(state, task_id, seen, first=first)


def apply_seed(
    state: TaskState | None,
    *,
    task_id: str,
    run_id: str,
    task_type: str,
    at: datetime,
    document_id: str | None,
    owner: str | None,
) -> TaskState:
    """The row after the service started run `run_id` at `at` (its clock, just after the
    start): listed as pending until the run's own events say more. A run the service starts
    is a new one, so `at` stands for its start until its first event gives Temporal's (the
    earlier of the two is kept); it counts no attempt (the first event does)."""
    at = utc(at)
    seen = RunState(
        run_id=run_id,
        task_type=task_type,
        status="pending",
        seen_at=at,
        first_at=at,
        picked_up_at=None,
        closed_at=None,
        document_id=document_id[:DOCUMENT_ID_CHARS] if document_id else None,
        owner=owner[:OWNER_CHARS] if owner else None,
    )
    return _fold(state, task_id, seen, first=False)
