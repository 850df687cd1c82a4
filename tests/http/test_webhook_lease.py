"""One process at a time delivers webhooks, through a database lease: candidate processes sharing
one database (SQLite file; PostgreSQL when KNOWLEDGEOPS_TEST_POSTGRES_URL is set) and a real
receiver. A killed holder is replaced within the lease's stated bound, and every event still
arrives in order, exactly once but for the one in flight at the kill (sent again under the same
`webhook-id`); a stopped holder releases the lease, so another takes over at its next try."""

from __future__ import annotations

import asyncio
import base64
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, Table
from sqlalchemy.engine import Connection
from standardwebhooks import Webhook

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.events import EventType, TaskEvent
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from knowledgeops.db.leases import Lease, LeaseLost, LeaseRow, Leases, fence
from knowledgeops.db.webhook_cursors import WebhookCursors
from starter.services.webhook_lease import LEASE_NAME, LeaseKeeper
from tests.helpers.environment import ROOT, HermeticSettings, settings_env
from tests.helpers.waiting import eventually

SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
# Short, so the test is: the takeover bound is TTL + TTL/3 (4 s); production's TTL is 15 s.
TTL = 3.0
RENEW = TTL / 3
# What three processes on a busy two-core machine add to the bound: the 20 ms polls here,
# each process's scheduling, SQLite's lock waits.
SLACK = 1.0


class Receiver:
    """A webhook endpoint recording each request's `webhook-id` as it arrives. The first
    request for `hold` waits (in flight) until `release` is set."""

    def __init__(self, hold: str) -> None:
        self.arrivals: list[tuple[str, float]] = []
        self.hold, self.held, self.release = hold, threading.Event(), threading.Event()
        # Requests whose sender was gone when the answer was written (the killed holder's).
        self.unanswered: list[str] = []
        verifier, receiver = Webhook(SECRET), self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                verifier.verify(body, headers)
                event_id = headers["webhook-id"]
                receiver.arrivals.append((event_id, time.monotonic()))
                if event_id == receiver.hold and not receiver.held.is_set():
                    receiver.held.set()
                    receiver.release.wait(30)
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except (BrokenPipeError, ConnectionResetError):
                    receiver.unanswered.append(event_id)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def ids(self) -> list[str]:
        return [event_id for event_id, _ in self.arrivals]


class Candidate:
    """A process delivering webhooks as every API process does (tests/helpers/webhook_candidate)."""

    def __init__(self, settings: Settings, log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.helpers.webhook_candidate", str(TTL)],
                cwd=ROOT,
                env=settings_env(settings),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text()

    async def holder(self) -> str:
        """Its claim's name, once it is about to take part."""

        def ready() -> str:
            assert self.proc.poll() is None, f"the candidate exited:\n{self.output()}"
            found = re.search(r"ready: (\S+)", self.output())
            return found.group(1) if found else ""

        return await eventually(ready, bool, timeout=30, interval=0.05, what=f"{self.log.name}")

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def _event(n: int) -> TaskEvent:
    return TaskEvent(
        event_id=f"ev{n}",
        event_type=EventType.TASK_STARTED,
        task_id=f"t{n}",
        run_id="r1",
        task_type="REPORT_GENERATE",
        at=datetime.now(UTC),
    )


def _ids(first: int, last: int) -> list[str]:
    return [f"ev{n}" for n in range(first, last + 1)]


@pytest.fixture
async def db(tmp_path: Path, database_url: str) -> AsyncIterator[Database]:
    # No Temporal: only the database (fresh per test, SQLite or PostgreSQL) is needed.
    settings = HermeticSettings(DATABASE_URL=database_url, KNOWLEDGEOPS_DATA_DIR=tmp_path / "data")
    opened = await Database.open(settings)  # migrated to head
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def candidates() -> Iterator[list[Candidate]]:
    started: list[Candidate] = []
    try:
        yield started
    finally:
        for candidate in started:
            candidate.end()


async def test_one_process_delivers_and_a_killed_holder_is_replaced_in_time(
    tmp_path: Path, db: Database, database_url: str, candidates: list[Candidate]
) -> None:
    leases, events, receiver = Leases(db), EventStore(db), Receiver(hold="ev15")
    settings = HermeticSettings(
        DATABASE_URL=database_url,
        KNOWLEDGEOPS_DATA_DIR=tmp_path / "data",
        WEBHOOK_URLS=receiver.url,
        WEBHOOK_SECRET=SECRET,
    )
    bound = LeaseKeeper(leases, LEASE_NAME, TTL).takeover_seconds

    async def holder() -> str:
        hold = await leases.current(LEASE_NAME)
        return hold.holder if hold else ""

    async def held_by(claim: str, what: str) -> None:
        def done(found: str) -> bool:
            return found == claim

        await eventually(holder, done, interval=0.02, what=what)

    async def arrived(count: int) -> None:
        await eventually(
            lambda: len(receiver.arrivals), lambda n: n >= count, interval=0.02, what="deliveries"
        )

    try:
        # Two candidates; 10 events: each arrives once, in order, from whichever holds.
        candidates += [Candidate(settings, tmp_path / f"{n}.log") for n in "ab"]
        claims = {await c.holder(): c for c in candidates}
        await events.record([_event(n) for n in range(1, 11)])
        await arrived(10)
        first = claims[await holder()]
        ((survivor_claim, survivor),) = [(h, c) for h, c in claims.items() if c is not first]

        # 10 more: the holder is killed while the receiver holds ev15's request.
        await events.record([_event(n) for n in range(11, 21)])
        await eventually(receiver.held.is_set, bool, interval=0.02, what="ev15 in flight")
        assert claims[await holder()] is first
        first.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        receiver.release.set()
        await events.record([_event(n) for n in range(21, 26)])  # while nobody holds it
        await held_by(survivor_claim, "the takeover")
        takeover = time.monotonic() - killed
        await arrived(26)  # 25 events, ev15 twice
        resumed = receiver.arrivals[15][1] - killed  # the first request after the kill
        # Not before the killed holder's hold lapsed (at least TTL - TTL/3 after its last
        # renewal), and within the stated bound.
        assert TTL - RENEW - 0.5 < takeover < bound + SLACK, (takeover, bound)
        assert resumed < bound + SLACK, (resumed, bound)

        # A third candidate; the survivor stops cleanly: it releases the lease, so the third
        # takes over at its next try, not once a hold lapses (>= TTL - TTL/3 later).
        candidates.append(Candidate(settings, tmp_path / "c.log"))
        third = await candidates[-1].holder()
        survivor.proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        await held_by(third, "the takeover at the release")
        handover = time.monotonic() - stopped
        assert survivor.proc.wait(10) == 0, survivor.output()
        assert handover < RENEW + 0.8 < TTL - RENEW, handover
        await events.record([_event(n) for n in range(26, 29)])
        await arrived(29)
        # Every cursor write went through: it is at the last event.
        last = (await events.after(0, 100))[-1].seq

        def at_last(seq: int) -> bool:
            return seq == last

        await eventually(lambda: WebhookCursors(db).get(receiver.url), at_last, what="cursor")
        candidates[-1].proc.send_signal(signal.SIGTERM)
        assert candidates[-1].proc.wait(10) == 0, candidates[-1].output()
    finally:
        receiver.release.set()
        receiver.server.shutdown()

    # Each event once, in order; ev15 (in flight at the kill: no cursor write) twice, under
    # its webhook-id, once from each holder.
    assert receiver.ids() == _ids(1, 15) + _ids(15, 28), receiver.ids()
    assert await leases.current(LEASE_NAME) is None  # the last one released it too
    logs = {c.log.name: c.output() for c in candidates}
    assert [log.count("took the lease") for log in logs.values()] == [1, 1, 1], logs
    assert "released the lease" in survivor.output()
    print(
        f"takeover after SIGKILL: {takeover:.2f} s (bound {bound:g} s); at release {handover:.2f} s"
    )


async def test_leases_one_holder_expiry_and_fence(db: Database) -> None:
    leases = Leases(db)
    a, b = Lease("job", "a"), Lease("job", "b")

    # Claims racing for a lease nobody held: exactly one gets it.
    racing = [Lease("race", f"r{n}") for n in range(6)]
    won = await asyncio.gather(*(leases.acquire(c, 30) for c in racing))
    assert sorted(won) == [False] * 5 + [True], won
    hold = await leases.current("race")
    assert hold is not None and hold.holder == racing[won.index(True)].holder

    assert await leases.acquire(a, 0.5) and not await leases.acquire(b, 0.5)
    hold = await leases.current("job")
    assert hold is not None and hold.holder == "a" and hold.expires_at > hold.acquired_at
    assert await leases.acquire(a, 0.5)  # a renewal keeps when it was taken
    renewed = await leases.current("job")
    assert renewed is not None and renewed.acquired_at == hold.acquired_at
    async with db.write() as s:
        await fence(s, a)  # held: passes

    # Unrenewed, the hold lapses and b takes it; a's fenced writes are refused from then on.
    await eventually(lambda: leases.acquire(b, 30), bool, interval=0.05, what="b takes over")
    hold = await leases.current("job")
    assert hold is not None and hold.holder == "b"
    with pytest.raises(LeaseLost, match="no longer holds the lease 'job'"):
        await WebhookCursors(db).set("http://x.example/hook", 5, fenced_by=a)
    assert await WebhookCursors(db).get("http://x.example/hook") == 0  # nothing written
    await WebhookCursors(db).set("http://x.example/hook", 5, fenced_by=b)
    assert await WebhookCursors(db).get("http://x.example/hook") == 5

    # Released: nobody holds it, and the next claim takes it at once.
    assert not await leases.release(a) and await leases.release(b)
    assert await leases.current("job") is None
    assert await leases.acquire(a, 30)


async def test_the_leases_table_matches_its_migration(db: Database) -> None:
    # Only this table: the ORM's other tables are not all imported here.
    only = MetaData()
    cast(Table, LeaseRow.__table__).to_metadata(only)

    def diff(connection: Connection) -> list[Any]:
        found = compare_metadata(MigrationContext.configure(connection), only)
        return [d for d in found if "leases" in repr(d)]

    async with db.engine.connect() as connection:
        assert await connection.run_sync(diff) == []
