"""Maintenance schedules on the real dev server: created idempotently, listed, paused (and
still paused after a restart), triggered by hand (its workflow runs), removed when unset."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime

from knowledgeops.db.audit import AuditLog
from knowledgeops.registry.task_types import TASK_TYPE_SEARCH_ATTRIBUTE, TaskType
from knowledgeops.runtime import schedules
from tests.helpers.environment import ROOT, Env, settings_env
from tests.helpers.waiting import eventually


async def _our_schedule_ids(env: Env) -> list[str]:
    async def listed() -> list[str]:
        found = [s.id async for s in await env.client.list_schedules()]
        return sorted(i for i in found if i.startswith(env.settings.prefix))

    # Schedule listing is eventually consistent: wait for it to settle.
    return await eventually(
        listed,
        lambda ids: len(ids) == len(schedules.scheduled_specs()),
        timeout=10,
        what="our schedules listed, one per scheduled task type",
    )


async def test_schedules_are_idempotent_and_trigger_their_workflow(env: Env) -> None:
    first = await schedules.ensure_schedules(env.client, env.settings)
    second = await schedules.ensure_schedules(env.client, env.settings)
    expected = sorted(
        schedules.schedule_id(env.settings, s.task_type) for s in schedules.scheduled_specs()
    )
    assert sorted(first) == sorted(second) == expected
    assert {TaskType.BACKUP_EXECUTE, TaskType.CLEANUP_EXECUTE, TaskType.REPORT_GENERATE} <= {
        s.task_type for s in schedules.scheduled_specs()
    }
    assert await _our_schedule_ids(env) == expected, "starting twice made a second schedule"

    listed = {s.task_type: s for s in await schedules.list_schedules(env.client, env.settings)}
    report = listed["REPORT_GENERATE"]
    assert report.cron == [env.settings.report_schedule] and not report.paused
    # The server runs the configured cron ("0 6 * * 1"): Mondays at 06:00 UTC.
    next_run = datetime.fromisoformat(report.next_runs[0])
    assert (next_run.weekday(), next_run.hour, next_run.minute) == (0, 6, 0)

    await schedules.pause(env.client, env.settings, "REPORT_GENERATE", "maintenance window")
    await schedules.ensure_schedules(env.client, env.settings)  # a restart keeps the pause
    listed = {s.task_type: s for s in await schedules.list_schedules(env.client, env.settings)}
    assert listed["REPORT_GENERATE"].paused and listed["REPORT_GENERATE"].note
    await schedules.unpause(env.client, env.settings, "REPORT_GENERATE", "done")

    # Triggered by hand through the CLI (audited), the workflow runs on the worker.
    r = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "starter.cli.main", "schedules", "trigger", "REPORT_GENERATE"],
        cwd=ROOT,
        env=settings_env(env.settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    prefix = env.settings.task_id("report_generate-scheduled")
    query = f'{TASK_TYPE_SEARCH_ATTRIBUTE.name} = "REPORT_GENERATE"'

    async def scheduled_runs() -> list[str]:
        return [w.id async for w in env.client.list_workflows(query) if w.id.startswith(prefix)]

    runs = await eventually(scheduled_runs, bool, timeout=20, what="the triggered run listed")
    assert len(runs) == 1, runs
    st = await env.service.wait(runs[0], timeout=90)
    assert st.status == "completed", st.last_error
    audit = await AuditLog(env.db).records(action="schedule_trigger")
    assert [a.task_ids for a in audit] == [
        [schedules.schedule_id(env.settings, TaskType.REPORT_GENERATE)]
    ]

    # An empty setting removes that schedule; the others stay.
    unset = env.settings.model_copy(update={"report_schedule": ""})
    kept = await schedules.ensure_schedules(env.client, unset)
    assert schedules.schedule_id(env.settings, TaskType.REPORT_GENERATE) not in kept
    listed_json = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "starter.cli.main", "schedules", "list", "--json"],
        cwd=ROOT,
        env=settings_env(unset),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed_json.returncode == 0, listed_json.stderr
    assert "REPORT_GENERATE" not in {s["task_type"] for s in json.loads(listed_json.stdout)}
