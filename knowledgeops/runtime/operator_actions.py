"""What operators do in Temporal itself (its Web UI, the `temporal` CLI) reconciled into our
domain events and audit log, so it shows up like the same action through our API.

Workflow code never sees a termination or an execution timeout, and Temporal records who
cancelled, terminated or reset a run only in the run's history. So a loop in the worker process
reads, for our tasks that closed recently: the closing of a terminated or timed-out run (->
TaskTerminated / TaskTimedOut, which the run itself cannot emit), and the operator actions in
its history (cancel request, termination, reset) -> one audit record each, with the identity
and reason Temporal carries. A reset run emits TaskRetried itself (workflows/base.py).

Actions through our own API and CLI are audited where they happen; their Temporal identity
starts with "knowledgeops" and is skipped here. Everything is written idempotently (event ids
and audit source keys are deterministic), so reading a history twice changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.events import EventType, TaskEvent
from knowledgeops.db.audit import AuditLog, audit_row
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from knowledgeops.registry.task_types import TASK_TYPE_SEARCH_ATTRIBUTE
from knowledgeops.runtime.temporal import OUR_IDENTITY

log = logging.getLogger(__name__)

# Each pass lists every run closed in the last OVERLAP + POLL_SECONDS: at 20 imports/s a 5 s
# poll listed each run 25 times (measured: 2,000 small imports 18.3 documents/s). An operator's
# action shows up in the audit log within this much of the run's close.
POLL_SECONDS = 15.0
# How far back the first pass after a start looks (actions while no worker ran included).
FIRST_LOOKBACK = timedelta(days=1)
# Each later pass re-reads this much before its last one: visibility lags a little.
OVERLAP = timedelta(minutes=2)
_CLOSINGS = {
    WorkflowExecutionStatus.TERMINATED: EventType.TASK_TERMINATED,
    WorkflowExecutionStatus.TIMED_OUT: EventType.TASK_TIMED_OUT,
}
# Statuses an operator may have caused (a cancel can also be ours: its identity tells).
_OPERATOR_CLOSINGS = (
    WorkflowExecutionStatus.CANCELED,
    WorkflowExecutionStatus.TERMINATED,
    WorkflowExecutionStatus.TIMED_OUT,
)
_OURS = OUR_IDENTITY.split(":", 1)[0]


class OperatorActions:
    def __init__(self, client: Client, settings: Settings, db: Database) -> None:
        self.client = client
        self.settings = settings
        self.events = EventStore(db)
        self.audit = AuditLog(db)
        self._since: datetime | None = None
        # Runs already read, by close time: a run is read once, not once per overlapping pass.
        self._seen: dict[tuple[str, str], datetime] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile every POLL_SECONDS until `stop`; a failed pass is logged and retried."""
        while not stop.is_set():
            try:
                await self.reconcile()
            except Exception:  # Temporal or the database briefly away: the next pass retries
                log.exception("reconciling operator actions failed; retrying")
            try:
                await asyncio.wait_for(stop.wait(), POLL_SECONDS)
            except TimeoutError:
                continue

    async def reconcile(self) -> int:
        """One pass over our tasks closed since the last pass; returns records written."""
        started = datetime.now(UTC)
        since = (self._since - OVERLAP) if self._since else started - FIRST_LOOKBACK
        query = (
            f'{TASK_TYPE_SEARCH_ATTRIBUTE.name} IS NOT NULL AND CloseTime >= "{since.isoformat()}"'
        )
        if self.settings.prefix:
            query += f" AND WorkflowId STARTS_WITH {json.dumps(self.settings.prefix)}"
        closed = [w async for w in self.client.list_workflows(query)]
        fresh = [(w.id, w.run_id) for w in closed if (w.id, w.run_id) not in self._seen]
        # One query instead of a describe per run (measured: describing each closed run cost
        # 1000 small imports 16.5 -> 19.6 documents/s): a run that recorded its own first
        # event began here, so only an operator's close of it needs its history read.
        began_here = await self.events.began_here(fresh)
        written = 0
        for w in closed:
            written += await self._closed(w, (w.id, w.run_id) in began_here)
        self._since = started
        self._seen = {k: at for k, at in self._seen.items() if at >= since}
        return written

    async def _closed(self, w: WorkflowExecution, began_here: bool) -> int:
        key = (w.id, w.run_id)
        if key in self._seen:
            return 0
        if w.status not in _OPERATOR_CLOSINGS and (began_here or not await self._is_reset_run(w)):
            self._seen[key] = w.close_time or datetime.now(UTC)
            return 0  # completed / failed on its own: nothing an operator did
        written = 0
        task_type = w.typed_search_attributes.get(TASK_TYPE_SEARCH_ATTRIBUTE) or ""
        terminated_by = ("", "")
        handle = self.client.get_workflow_handle(w.id, run_id=w.run_id)
        async for e in handle.fetch_history_events():
            if e.event_type == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
                t = e.workflow_execution_terminated_event_attributes
                terminated_by = (t.identity or "temporal", t.reason)
            action = _operator_action(e)
            if action is not None:
                kind, actor, reason, details = action
                row = audit_row(actor, kind, [w.id], reason, "done", details | {"run_id": w.run_id})
                written += await self.audit.record_once(f"{w.id}/{w.run_id}/{e.event_id}", row)
        closing = _CLOSINGS.get(w.status) if w.status is not None else None
        if closing is not None:
            written += await self._closing(w, task_type, closing, *terminated_by)
        # Only now: a pass that failed half-way reads this run again next time.
        self._seen[key] = w.close_time or datetime.now(UTC)
        return written

    async def _is_reset_run(self, w: WorkflowExecution) -> bool:
        """A reset run keeps its chain's first run id (no continue-as-new or workflow retry
        policies here; a manual retry starts a new chain). Visibility lists do not carry it
        (measured: empty there), so one describe per closed run, each run once."""
        desc = await self.client.get_workflow_handle(w.id, run_id=w.run_id).describe()
        first = desc.raw_description.workflow_execution_info.first_run_id
        return first not in ("", w.run_id)

    async def _closing(
        self, w: WorkflowExecution, task_type: str, kind: EventType, actor: str, reason: str
    ) -> int:
        """The closing event the run could not emit itself (once per run)."""
        data: dict[str, Any] = {"reason": reason, "by": actor} if actor else {}
        document = await self._document_of(w)
        if document:
            data["document_id"] = document
        error = f"{kind.value.removeprefix('Task')} by {actor}: {reason}" if actor else None
        event = TaskEvent(
            event_type=kind,
            task_id=w.id,
            run_id=w.run_id,
            task_type=task_type,
            at=w.close_time or datetime.now(UTC),
            error=error or "the task ran past its execution timeout",
            data=data,
        )
        return await self.events.record([event])

    async def _document_of(self, w: WorkflowExecution) -> str | None:
        """The document an import run was about (projections key on it), from its input."""
        handle = self.client.get_workflow_handle(w.id, run_id=w.run_id)
        async for e in handle.fetch_history_events(page_size=1):
            payloads = e.workflow_execution_started_event_attributes.input.payloads
            values = await self.client.data_converter.decode(payloads) if payloads else []
            first = values[0] if values else None
            return first.get("document_id") if isinstance(first, dict) else None
        return None


def _is_reset(e: HistoryEvent) -> bool:
    return (
        e.event_type == HistoryEventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        and e.workflow_task_failed_event_attributes.cause
        == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW
    )


def _operator_action(e: HistoryEvent) -> tuple[str, str, str, dict[str, Any]] | None:
    """(action, actor, reason, details) of an operator's action in a history event, or None
    for anything else, including actions of our own clients."""
    if e.event_type == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
        a = e.workflow_execution_cancel_requested_event_attributes
        identity = a.identity
        if identity.startswith(_OURS):
            return None
        return "cancel", identity or "temporal", a.cause, {"source": "temporal"}
    if e.event_type == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
        t = e.workflow_execution_terminated_event_attributes
        if t.identity.startswith(_OURS):
            return None
        return "terminate", t.identity or "temporal", t.reason, {"source": "temporal"}
    if _is_reset(e):
        f = e.workflow_task_failed_event_attributes
        # The server records itself as the identity of a reset; the CLI puts the operator's
        # user name before the reason ("alice: why").
        user, sep, reason = f.failure.message.partition(": ")
        actor = user if sep and " " not in user else "temporal"
        details = {"source": "temporal", "base_run_id": f.base_run_id, "new_run_id": f.new_run_id}
        return "reset", actor, reason if sep else f.failure.message, details
    return None
