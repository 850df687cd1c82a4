"""The admin task list (GET /v1/admin/tasks) as the projection of the domain events: its rows
whatever order events arrive in, the migration that builds it from stored events, and the API
over it with real imports, filters and keyset cursors. Runs on SQLite, and on PostgreSQL when
KNOWLEDGEOPS_TEST_POSTGRES_URL is set (CI does)."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from alembic import command
from alembic.config import Config

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.events import EventType, TaskEvent
from knowledgeops.db.database import MIGRATIONS_DIR, Database
from knowledgeops.db.events import EventStore
from knowledgeops.db.task_list import TABLE, TaskList, TaskListEntry, row_of, state_of
from tests.helpers.environment import EXAMPLES, running_api

E = EventType
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def ev(
    task: str,
    run: str,
    kind: EventType,
    seconds: float,
    task_type: str = "DOCUMENT_IMPORT",
    **data: Any,
) -> TaskEvent:
    return TaskEvent(
        event_type=kind,
        task_id=task,
        run_id=run,
        task_type=task_type,
        at=T0 + timedelta(seconds=seconds),
        data=data,
    )


def entry(
    task: str,
    run: str,
    status: str,
    started: float,
    picked: float | None,
    closed: float | None,
    attempts: int,
) -> TaskListEntry:
    def at(s: float | None) -> datetime | None:
        return None if s is None else T0 + timedelta(seconds=s)

    return TaskListEntry(
        task_id=task, task_type="DOCUMENT_IMPORT", run_id=run, status=status,
        started_at=T0 + timedelta(seconds=started), picked_up_at=at(picked), closed_at=at(closed),
        document_id="d1", owner="ann", attempts=attempts,
    )  # fmt: skip


# Histories as workflows and the reconciler record them, with the row each must end up as.
SCENARIOS: dict[str, tuple[list[tuple[str, EventType, float, dict[str, Any]]], tuple[Any, ...]]] = {
    # Failed, then a manual retry completed: the newest run shows, both count.
    "retried": (
        [
            ("r1", E.TASK_ENQUEUED, 0, {"document_id": "d1", "owner": "ann"}),
            ("r1", E.TASK_STARTED, 1, {"document_id": "d1"}),
            ("r1", E.TASK_FAILED, 5, {"document_id": "d1"}),
            ("r2", E.TASK_RETRIED, 60, {"document_id": "d1", "retry_of": "r1"}),
            ("r2", E.TASK_STARTED, 61, {"document_id": "d1"}),
            ("r2", E.TASK_COMPLETED, 70, {}),
        ],
        ("r2", "completed", 60, 61, 70, 2),
    ),
    # A continue-as-new: the last run records only its closing; the chain keeps its place.
    "continued": (
        [
            ("r1", E.TASK_ENQUEUED, 0, {"document_id": "d1", "owner": "ann"}),
            ("r1", E.TASK_STARTED, 1, {"document_id": "d1"}),
            ("r2", E.TASK_COMPLETED, 30, {}),
        ],
        ("r2", "completed", 0, 1, 30, 1),
    ),
    # A re-import cancelled while queued (first event and TaskCancelled, never picked up),
    # and the first run's termination recorded late by the reconciler.
    "requeued": (
        [
            ("r1", E.TASK_ENQUEUED, 0, {"document_id": "d1", "owner": "ann"}),
            ("r1", E.TASK_STARTED, 1, {"document_id": "d1"}),
            ("r1", E.TASK_TERMINATED, 9, {"document_id": "d1"}),
            ("r2", E.TASK_ENQUEUED, 60, {"document_id": "d1", "owner": "ann"}),
            ("r2", E.TASK_CANCELLED, 65, {"document_id": "d1"}),
        ],
        ("r2", "cancelled", 60, None, 65, 2),
    ),
}


async def record_scenario(db: Database, task: str, name: str, rng: random.Random) -> None:
    """Each event in its own transaction, in a shuffled order; some sent twice (a retried
    recording activity)."""
    history = [ev(task, run, kind, at, **data) for run, kind, at, data in SCENARIOS[name][0]]
    rng.shuffle(history)
    for e in history:
        assert await EventStore(db).record([e]) == 1
        if rng.random() < 0.3:
            assert await EventStore(db).record([e]) == 0


async def test_rows_are_the_same_whatever_order_events_arrive_in(settings: Settings) -> None:
    db = await Database.open(settings)
    try:
        rng = random.Random(20)
        for name, (_, want) in SCENARIOS.items():
            for n in range(15):
                task = f"{name}-{n}"
                await record_scenario(db, task, name, rng)
                assert await TaskList(db).get(task) == entry(task, *want), (name, n)
    finally:
        await db.close()


async def test_the_service_lists_a_run_before_its_events_and_they_win(settings: Settings) -> None:
    db = await Database.open(settings)
    start = datetime.now(UTC) - timedelta(seconds=1)  # Temporal's start, before the service's note

    def at(task: str, kind: EventType, s: float) -> TaskEvent:
        e = ev(task, "r1", kind, 0, "AI_ANALYSIS", document_id="d9")
        return e.model_copy(update={"at": start + timedelta(seconds=s)})

    try:
        orders = {
            "seed-first": ["seed", E.TASK_ENQUEUED, E.TASK_STARTED, E.TASK_COMPLETED],
            "seed-between": [E.TASK_ENQUEUED, E.TASK_STARTED, "seed", E.TASK_COMPLETED],
            "seed-last": [E.TASK_ENQUEUED, E.TASK_STARTED, E.TASK_COMPLETED, "seed"],
        }
        for task, order in orders.items():
            for step in order:
                if step == "seed":
                    await TaskList(db).seed(
                        task_id=task, run_id="r1", task_type="AI_ANALYSIS",
                        document_id="d9", owner="bob",
                    )  # fmt: skip
                    continue
                offset = {E.TASK_ENQUEUED: 0.0, E.TASK_STARTED: 0.2, E.TASK_COMPLETED: 0.5}[step]
                await EventStore(db).record([at(task, step, offset)])
            row = await TaskList(db).get(task)
            assert row is not None
            # The event's start (Temporal's) replaces the service's note; the owner only the
            # service knew stays.
            assert (row.status, row.started_at, row.attempts) == ("completed", start, 1), task
            assert (row.document_id, row.owner, row.task_type) == ("d9", "bob", "AI_ANALYSIS")
        await TaskList(db).seed(task_id="queued", run_id="q1", task_type="AI_ANALYSIS")
        queued = await TaskList(db).get("queued")
        assert queued is not None and (queued.status, queued.attempts) == ("pending", 0)
        assert queued.picked_up_at is None and queued.closed_at is None
    finally:
        await db.close()


def _alembic(settings: Settings) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", settings.resolved_database_url)
    return cfg


async def test_the_migration_builds_the_list_from_stored_events(settings: Settings) -> None:
    db = await Database.open(settings)
    rng = random.Random(5)
    try:
        for name in SCENARIOS:
            for n in range(4):
                await record_scenario(db, f"{name}-{n}", name, rng)
        async with db.sessions() as s:
            live = sorted(
                (row_of(state_of(r)) for r in (await s.execute(TABLE.select())).mappings()),
                key=lambda r: r["task_id"],
            )
    finally:
        await db.close()
    assert len(live) == 12
    # As a database of the previous release: its events stored, no task list.
    await asyncio.to_thread(command.downgrade, _alembic(settings), "0005")
    db = await Database.open(settings)  # upgrades to head, building the list
    try:
        async with db.sessions() as s:
            built = sorted(
                (row_of(state_of(r)) for r in (await s.execute(TABLE.select())).mappings()),
                key=lambda r: r["task_id"],
            )
        assert built == live
    finally:
        await db.close()


def upload(name: str, content: bytes, **form: str) -> dict[str, Any]:
    return {"files": {"file": (name, content)}, "data": form}


async def test_admin_list_is_the_projection_of_real_imports(settings: Settings) -> None:
    first_text = (EXAMPLES / "spaced-repetition.txt").read_bytes()
    second_text = b"A short note about tides and the moon.\n"

    async def listed(api: Any, **params: Any) -> dict[str, Any]:
        r = await api.http.get("/v1/admin/tasks", params=params, headers=api.admin)
        assert r.status_code == 200, r.text
        return dict(r.json())

    async with running_api(settings, workers=False) as api:
        first = await api.http.post("/v1/documents", **upload("a.txt", first_text, owner="ann"))
        assert first.status_code == 202, first.text
        a = first.json()
        # Listed at once, as no worker ran it yet: the service's note, with what it knows.
        [row] = (await listed(api))["items"]
        assert (row["task_id"], row["status"], row["task_type"]) == (
            a["task_id"], "pending", "DOCUMENT_IMPORT",
        )  # fmt: skip
        assert (row["document_id"], row["owner"], row["attempts"]) == (a["document_id"], "ann", 0)
        assert row["picked_up_at"] is None and row["duration_seconds"] is None
    async with running_api(settings) as api:
        assert (await api.wait_task(a["task_id"]))["status"] == "completed"
        b = (await api.http.post("/v1/documents", **upload("b.txt", second_text))).json()
        assert (await api.wait_task(b["task_id"]))["status"] == "completed"
        page = await listed(api)
        assert [t["task_id"] for t in page["items"]] == [b["task_id"], a["task_id"]]
        assert page["next_cursor"] is None
        newer, older = page["items"]
        assert (older["owner"], older["document_id"]) == ("ann", a["document_id"])
        assert (newer["owner"], newer["document_id"]) == (None, b["document_id"])
        for t in page["items"]:
            assert (t["status"], t["attempts"], t["task_type"]) == (
                "completed", 1, "DOCUMENT_IMPORT",
            )  # fmt: skip
            started, closed = (datetime.fromisoformat(t[k]) for k in ("started_at", "closed_at"))
            picked = datetime.fromisoformat(t["picked_up_at"])
            assert started <= picked <= closed
            assert t["duration_seconds"] == round((closed - started).total_seconds(), 3)

        # Filters, each an index of the projection.
        imports = await listed(api, type="DOCUMENT_IMPORT", status="completed")
        assert [t["task_id"] for t in imports["items"]] == [b["task_id"], a["task_id"]]
        assert (await listed(api, type="REPORT_GENERATE"))["items"] == []
        assert (await listed(api, status="failed"))["items"] == []
        assert (await listed(api, status="running"))["items"] == []
        since = await listed(api, since=newer["started_at"])
        assert [t["task_id"] for t in since["items"]] == [b["task_id"]]
        until = await listed(api, until=newer["started_at"])
        assert [t["task_id"] for t in until["items"]] == [a["task_id"]]

        # A re-import is a new run of the same task: one row, at the top, two attempts.
        again = await api.http.post("/v1/documents", **upload("a.txt", first_text, owner="ann"))
        assert again.json()["task_id"] == a["task_id"]
        assert (await api.wait_task(a["task_id"]))["status"] == "completed"
        detail = (await api.http.get(f"/v1/admin/tasks/{a['task_id']}", headers=api.admin)).json()
        top, second = (await listed(api))["items"]
        assert (top["task_id"], second["task_id"]) == (a["task_id"], b["task_id"])
        assert (top["attempts"], top["run_id"]) == (2, detail["runs"][0]["run_id"])
        assert len(detail["runs"]) == 2
        assert datetime.fromisoformat(top["started_at"]) > datetime.fromisoformat(
            newer["started_at"]
        )

        # Keyset pages of one: each task once, then no cursor.
        one = await listed(api, limit=1)
        assert [t["task_id"] for t in one["items"]] == [a["task_id"]] and one["next_cursor"]
        two = await listed(api, limit=1, cursor=one["next_cursor"])
        assert [t["task_id"] for t in two["items"]] == [b["task_id"]]
        assert two["next_cursor"] is None
        for bad in ("garbage", newer["started_at"]):  # the old cursor was a bare time
            r = await api.http.get("/v1/admin/tasks", params={"cursor": bad}, headers=api.admin)
            assert r.status_code == 400 and r.json()["code"] == "invalid_cursor"


TYPES = ("DOCUMENT_IMPORT", "AI_ANALYSIS", "REPORT_GENERATE")
CLOSINGS = (E.TASK_COMPLETED, E.TASK_FAILED, None)  # None: still running


async def test_cursor_walks_every_task_once_newest_first(settings: Settings) -> None:
    """A walk of small pages over many tasks, three of them to a start time (the task id
    breaks the tie), through each filter: every matching task once, in list order."""
    db = await Database.open(settings)
    tasks: list[dict[str, Any]] = []
    try:
        events: list[TaskEvent] = []
        for i in range(75):
            task = f"{settings.prefix}walk-{i:03d}"
            t = {
                "task_id": task,
                "type": TYPES[i % 3],
                "at": i // 3,
                "closing": CLOSINGS[i % 5 % 3],
            }
            tasks.append(t)
            events.append(ev(task, "r1", E.TASK_ENQUEUED, t["at"], t["type"]))
            if t["closing"] is not None:
                events.append(ev(task, "r1", t["closing"], t["at"] + 0.5, t["type"]))
        # Another deployment's task (another prefix) in the same database: never listed.
        events.append(ev("elsewhere-1", "r1", E.TASK_ENQUEUED, 10, "AI_ANALYSIS"))
        await EventStore(db).record(events)
    finally:
        await db.close()
    status = {E.TASK_COMPLETED: "completed", E.TASK_FAILED: "failed", None: "running"}
    order = sorted(tasks, key=lambda t: (t["at"], t["task_id"]), reverse=True)

    async with running_api(settings, workers=False) as api:

        async def walk(**params: Any) -> list[str]:
            seen: list[str] = []
            cursor = None
            while True:
                query = params | {"limit": 7} | ({"cursor": cursor} if cursor else {})
                r = await api.http.get("/v1/admin/tasks", params=query, headers=api.admin)
                assert r.status_code == 200, r.text
                seen += [t["task_id"] for t in r.json()["items"]]
                cursor = r.json()["next_cursor"]
                if cursor is None:
                    return seen

        since, until = (T0 + timedelta(seconds=s) for s in (5, 15))
        cases: list[tuple[dict[str, Any], Any]] = [
            ({}, lambda t: True),
            ({"type": "AI_ANALYSIS"}, lambda t: t["type"] == "AI_ANALYSIS"),
            ({"status": "failed"}, lambda t: status[t["closing"]] == "failed"),
            (
                {"type": "DOCUMENT_IMPORT", "status": "completed"},
                lambda t: t["type"] == "DOCUMENT_IMPORT" and t["closing"] == E.TASK_COMPLETED,
            ),
            (
                {"since": since.isoformat(), "until": until.isoformat()},
                lambda t: 5 <= t["at"] < 15,
            ),
            # Open in the list, unknown to Temporal: neither pending nor running there.
            ({"status": "running"}, lambda t: False),
        ]
        for params, keep in cases:
            want = [t["task_id"] for t in order if keep(t)]
            assert await walk(**params) == want, params
        # The last case can fail only with open rows to turn away.
        assert any(t["closing"] is None for t in tasks)
