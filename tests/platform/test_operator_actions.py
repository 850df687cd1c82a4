"""Operators' own tools count: a reset, cancel or termination done with the `temporal` CLI
(the same calls the Web UI makes) shows up like the API's: events and audit records."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.events import EventType
from knowledgeops.db.audit import AuditLog
from knowledgeops.db.events import EventStore
from knowledgeops.runtime.operator_actions import OperatorActions
from starter.dev_server import temporal_binary
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.environment import Env, openai_settings, running_env
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.waiting import eventually


async def temporal_cli(env: Env, *args: str) -> None:
    cmd = [temporal_binary(), "workflow", *args, "--address", env.settings.temporal_address]
    r = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


async def reconcile_until(
    env: Env, done: Callable[[], Awaitable[bool]], seconds: float = 90
) -> OperatorActions:
    """Reconcile as the worker's loop does until `done()` (visibility lags, more under load)."""
    reconciler = OperatorActions(env.client, env.settings, env.db)

    async def reconciled() -> bool:
        await reconciler.reconcile()
        return await done()

    try:
        await eventually(
            reconciled, bool, timeout=seconds, interval=0.3, what="the reconciler's records"
        )
    except AssertionError as e:  # with what Temporal and the audit log hold
        closed = [
            (w.id, w.status, w.close_time)
            async for w in env.client.list_workflows(
                f'WorkflowId STARTS_WITH "{env.settings.prefix}" AND CloseTime IS NOT NULL'
            )
        ]
        audit = [(r.action, r.actor, r.task_ids) for r in await AuditLog(env.db).records()]
        raise AssertionError(f"{e}; closed: {closed}; audit: {audit}") from None
    return reconciler


async def event_types(env: Env, task_id: str) -> list[EventType]:
    return [e.event_type for e in await EventStore(env.db).after(task_id=task_id)]


async def test_a_reset_in_temporal_is_a_retry_and_is_audited(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    doc = tmp_path / "r.txt"
    doc.write_text(numbered_paragraphs(20))
    fake_openai.api_key = "rotated-key"  # the worker's key is refused: the import fails
    async with running_env(openai_settings(settings, fake_openai, openai_api_key="old")) as env:
        ref = await env.documents.import_file(doc)
        failed = await env.service.wait(ref.task_id, timeout=60)
        assert failed.status == "failed"
        old_run = (await env.client.get_workflow_handle(ref.task_id).describe()).run_id
        fake_openai.api_key = "old"  # fixed at the provider; the operator retries in Temporal
        await temporal_cli(
            env,
            "reset",
            "-w",
            ref.task_id,
            "--type",
            "FirstWorkflowTask",
            "--reason",
            "operator retry via CLI",
        )
        done = await env.service.wait(ref.task_id, timeout=60)
        assert done.status == "completed", done.last_error

        async def audited() -> bool:
            return bool(await AuditLog(env.db).records(action="reset"))

        await reconcile_until(env, audited)
        [record] = await AuditLog(env.db).records(action="reset")
        assert record.task_ids == [ref.task_id] and record.reason == "operator retry via CLI"
        assert record.actor not in ("", "temporal", "history-service")
        assert record.details["base_run_id"] == old_run
        events = await EventStore(env.db).after(task_id=ref.task_id)
        assert [e.event_type for e in events] == [
            EventType.TASK_ENQUEUED,
            EventType.TASK_STARTED,
            EventType.TASK_FAILED,
            EventType.TASK_RETRIED,
            EventType.TASK_STARTED,
            EventType.TASK_COMPLETED,
        ]
        assert (events[3].data["retry_of"], events[3].data["via"]) == (old_run, "reset")
        row = await env.documents.catalogue.get(ref.document_id)
        assert row is not None and row.status == "ready"


async def test_cancel_and_terminate_in_temporal_are_audited_and_closed(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    docs = []
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.txt").write_text(numbered_paragraphs(200) + name)
        docs.append(tmp_path / f"{name}.txt")
    # Every embedding request waits at the fake's gate: each import stays in its embed step
    # until the operators have acted and the tasks have closed, however slow the machine
    # (a client timeout long enough that no held request is given up and sent again).
    fake_openai.hold = lambda kind, n: kind == "embeddings"
    cfg = openai_settings(settings, fake_openai, openai_timeout_seconds=120.0)
    async with running_env(cfg) as env:
        a, b, c = [await env.documents.import_file(d) for d in docs]

        async def state() -> tuple[list[str], int]:
            statuses = [(await env.service.get_status(r.task_id)).status for r in (a, b, c)]
            return statuses, fake_openai.held

        await eventually(
            state,
            lambda s: s == (["running"] * 3, 3),
            timeout=90,
            what="three running imports, each with a request held",
        )
        await temporal_cli(env, "cancel", "-w", a.task_id)
        await temporal_cli(env, "terminate", "-w", b.task_id, "--reason", "stuck on a bad file")
        await env.service.cancel(c.task_id, reason="not needed", actor="alice")
        closed = [await env.service.wait(ref.task_id, timeout=60) for ref in (a, b, c)]
        # All three closed while their requests were still held: none was asked anything after.
        assert (fake_openai.held, fake_openai.requests) == (3, 3)
        fake_openai.release()
        await eventually(lambda: fake_openai.in_flight, lambda n: n == 0, what="the answers")
        assert [st.status for st in closed] == ["cancelled", "terminated", "cancelled"]

        async def all_recorded() -> bool:
            actions = {r.action for r in await AuditLog(env.db).records(task_id=b.task_id)}
            return "terminate" in actions and bool(
                await AuditLog(env.db).records(task_id=a.task_id, action="cancel")
            )

        await reconcile_until(env, all_recorded)
        [cancel_a] = await AuditLog(env.db).records(task_id=a.task_id)
        assert cancel_a.action == "cancel" and cancel_a.actor.startswith("temporal-cli")
        assert await event_types(env, a.task_id) == [
            EventType.TASK_ENQUEUED,
            EventType.TASK_STARTED,
            EventType.TASK_CANCELLED,
        ]
        [term_b] = await AuditLog(env.db).records(task_id=b.task_id)
        assert (term_b.action, term_b.reason) == ("terminate", "stuck on a bad file")
        events_b = await EventStore(env.db).after(task_id=b.task_id)
        assert [e.event_type for e in events_b][-1] == EventType.TASK_TERMINATED
        assert "stuck on a bad file" in (events_b[-1].error or "")
        row_b = await env.documents.catalogue.get(b.document_id)
        assert row_b is not None and row_b.status == "failed"
        # Our own cancel was audited where it happened, once; the reconciler skips it.
        assert [(r.action, r.actor) for r in await AuditLog(env.db).records(task_id=c.task_id)] == [
            ("cancel", "alice")
        ]
        # A restarted reconciler reads the same histories and writes nothing twice.
        assert await OperatorActions(env.client, env.settings, env.db).reconcile() == 0


async def test_a_reset_to_the_last_workflow_task_replays_and_is_audited(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    doc = tmp_path / "late.txt"
    doc.write_text(numbered_paragraphs(10))
    async with running_env(openai_settings(settings, fake_openai)) as env:
        ref = await env.documents.import_file(doc)
        assert (await env.service.wait(ref.task_id, timeout=60)).status == "completed"
        await temporal_cli(
            env, "reset", "-w", ref.task_id, "--type", "LastWorkflowTask", "--reason", "late"
        )
        # The new run replays the copied history (no non-determinism) and completes again.
        st = await env.service.wait(ref.task_id, timeout=60)
        assert st.status == "completed", st.last_error

        async def audited() -> bool:
            return bool(await AuditLog(env.db).records(action="reset", task_id=ref.task_id))

        await reconcile_until(env, audited)
        [record] = await AuditLog(env.db).records(action="reset", task_id=ref.task_id)
        assert record.reason == "late"
