"""Workflow code checked against histories.

Recorded histories of every workflow type (tests/data/histories, one completed task each)
replay against the current code: a change that a task already running would not survive (a
new, removed or reordered command without `workflow.patched()`) fails here before it is
deployed. And DOCUMENT_IMPORT runs outside the workflow sandbox (for speed, see workflows/
document_import.py), so its code is checked in the sandbox here: histories of real imports, on
both paths (a small document's local steps, a bigger file's queued activities) and a failure's
cleanup, replay in the sandboxed runner. That fails on a call the sandbox forbids (time,
randomness, I/O, a module global) and on any change in the order of commands."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from knowledgeops.registry.task_types import REGISTRY, load
from knowledgeops.runtime.express import ExpressInterceptor
from starter.services.task_queries import execution_log
from tests.helpers.environment import EXAMPLES, HISTORIES, Env
from workflows.document_import import DocumentImportWorkflow


async def test_recorded_histories_of_every_workflow_type_replay() -> None:
    workflows = {
        s.workflow_name: load(s.workflow_class) for s in REGISTRY.values() if s.workflow_class
    }
    recorded = {p.stem: p for p in sorted(HISTORIES.glob("*.json"))}
    assert sorted(set(workflows) - set(recorded)) == [], "workflow types with no recorded history"
    sandboxed = SandboxedWorkflowRunner()
    replayer = Replayer(
        workflows=list(set(workflows.values())),
        data_converter=pydantic_data_converter,
        workflow_runner=sandboxed,
        unsandboxed_workflow_runner=sandboxed,
        interceptors=[ExpressInterceptor()],  # as the worker runs them
    )
    failures = {}
    for name, path in recorded.items():
        history = WorkflowHistory.from_json(f"recorded-{name}", path.read_text())
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failures[name] = repr(result.replay_failure)
    assert failures == {}


def _activity_kinds(history: WorkflowHistory) -> tuple[int, int]:
    """(queued activities, local activities) in a history."""
    kinds = [e.event_type for e in history.events]
    markers = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    return kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED), len(markers)


async def test_import_histories_replay_in_the_sandbox(env: Env, tmp_path: Path) -> None:
    corrupt = tmp_path / "broken.pdf"
    corrupt.write_bytes(b"%PDF-1.7 this is not a PDF")
    files = [*sorted(EXAMPLES.iterdir()), corrupt]
    refs = [await env.documents.import_file(p) for p in files]
    statuses = await asyncio.gather(*(env.service.wait(r.task_id, timeout=90) for r in refs))
    assert [s.status for s in statuses] == ["completed"] * (len(files) - 1) + ["failed"]
    histories = [await env.client.get_workflow_handle(r.task_id).fetch_history() for r in refs]
    by_name = {p.name: _activity_kinds(h) for p, h in zip(files, histories, strict=True)}
    # Both paths ran: the 37 KB docx (over SMALL_DOCUMENT_BYTES) through the task queues,
    # the small ones as local activities of their workflow task.
    queued, _ = by_name["chemistry-plan.docx"]
    assert queued >= 5, by_name  # parse, chunk, embed, upsert, publish
    for name in ("spaced-repetition.txt", "water-cycle.pdf", "broken.pdf"):
        queued, local = by_name[name]
        # Only a failure's cleanup (discard_version) is queued; events are local anyway.
        assert queued <= 1 and local >= 3, (name, by_name[name])

    # The task's execution log (admin API, `status --log`) lists a small document's steps.
    log = await execution_log(
        env.client, refs[files.index(EXAMPLES / "spaced-repetition.txt")].task_id
    )
    steps = [(a["activity"], a["local"], a["outcome"]) for a in log["activities"]]
    assert steps == [
        (name, True, "completed")
        for name in (
            "parse_document",
            "chunk_document",
            "embed_chunks",
            "upsert_chunks",
            "publish_version",
        )
    ]

    sandboxed = SandboxedWorkflowRunner()
    replayer = Replayer(
        workflows=[DocumentImportWorkflow],
        data_converter=env.client.data_converter,
        workflow_runner=sandboxed,
        # DocumentImport is declared unsandboxed; replay it in the sandbox anyway.
        unsandboxed_workflow_runner=sandboxed,
        interceptors=[ExpressInterceptor()],
    )
    failures = {}
    for history in histories:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failures[history.workflow_id] = repr(result.replay_failure)
    assert not failures
