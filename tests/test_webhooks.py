"""Domain events delivered as Standard Webhooks: signed so an off-the-shelf library verifies
them (and refuses a replay), in order, retried, given up as dead after a bounded number of
attempts so later events flow, and never at the cost of the process."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import standardwebhooks.webhooks
from pydantic import ValidationError
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from knowledgeops.contracts.events import EventType, TaskEvent
from knowledgeops.settings import Settings, SettingsError, load_settings
from knowledgeops.stores.database import Database
from starter.dev_server import free_port
from starter.webhooks import WebhookDispatcher
from tests.conftest import API_TOKEN, EXAMPLES, Api, HermeticSettings, running_api
from tests.helpers import eventually

SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


class Receiver:
    """A webhook endpoint answering each delivery with `answer(event_id, attempt number)`."""

    def __init__(self, answer: Callable[[str, int], int] = lambda _id, _n: 200) -> None:
        self.answer = answer
        self.accepted: list[tuple[dict[str, str], bytes]] = []
        self.attempts: Counter[str] = Counter()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                event_id = json.loads(body)["event_id"]
                receiver.attempts[event_id] += 1
                status = receiver.answer(event_id, receiver.attempts[event_id])
                if status == 200:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.accepted.append((headers, body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def kinds(self) -> list[str]:
        return [json.loads(body)["event_type"] for _, body in self.accepted]


async def _import(api: Api) -> None:
    r = await api.http.post(
        "/v1/documents",
        files={"file": ("n.txt", (EXAMPLES / "spaced-repetition.txt").read_bytes())},
        # A header a browser cannot send cross-site (the open API's CSRF guard asks for one).
        headers={"X-Requested-With": "test"},
    )
    assert r.status_code == 202, r.text
    await api.wait_task(r.json()["task_id"])


async def _until(check: Callable[[], bool], seconds: float) -> None:
    async def probe() -> bool:
        return check()

    await eventually(probe, bool, timeout=seconds, interval=0.1, what="the deliveries")


async def test_events_are_standard_webhooks_in_order_and_retried(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver(lambda _id, n: 503 if receiver.attempts.total() <= 2 else 200)
    cfg = settings.model_copy(update={"webhook_urls": receiver.url, "webhook_secret": SECRET})
    try:
        async with running_api(cfg) as api:
            await _import(api)
            await _until(lambda: len(receiver.accepted) >= 3, 15)  # backoff 1 s + 2 s
    finally:
        receiver.server.shutdown()
    assert receiver.attempts.total() == 2 + len(receiver.accepted)
    # What a receiver does: the off-the-shelf Standard Webhooks library, the secret as given.
    verifier = Webhook(SECRET)
    for headers, body in receiver.accepted:
        event = verifier.verify(body, headers)
        assert headers["webhook-id"] == event["event_id"]
        assert headers["x-knowledgeops-event-type"] == event["event_type"]
        assert "x-knowledgeops-signature" not in headers  # the unsigned-timestamp scheme is gone
    assert receiver.kinds() == ["TaskEnqueued", "TaskStarted", "TaskCompleted"]

    headers, body = receiver.accepted[0]
    # The timestamp is signed: moving it invalidates the signature ...
    moved = headers | {"webhook-timestamp": str(int(datetime.now(UTC).timestamp()) + 1)}
    with pytest.raises(WebhookVerificationError, match="signature"):
        verifier.verify(body, moved)
    # ... and the same request replayed 6 minutes later is refused by the library.
    later = datetime.now(UTC) + timedelta(minutes=6)

    class Later(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return later

    monkeypatch.setattr(standardwebhooks.webhooks, "datetime", Later)
    with pytest.raises(WebhookVerificationError, match="too old"):
        verifier.verify(body, headers)


async def test_a_broken_url_never_stops_the_process_and_is_listed_dead(
    settings: Settings,
) -> None:
    good = Receiver()
    broken = [
        "http://[::1/hook",  # httpx.InvalidURL, not an httpx.HTTPError
        "http://xn--a.com/hook",  # a host name IDNA refuses: UnicodeError
        f"http://127.0.0.1:{free_port()}/hook",  # nothing listens
    ]
    cfg = settings.model_copy(
        update={"webhook_urls": ",".join([*broken, good.url]), "webhook_secret": SECRET}
    )
    try:
        async with running_api(cfg) as api:
            await _import(api)
            await _until(lambda: len(good.accepted) >= 3, 15)
            assert good.kinds() == ["TaskEnqueued", "TaskStarted", "TaskCompleted"]
            # Invalid URLs come back the same every time: given up after 3 attempts (1 + 2 s).
            dead: list[dict[str, Any]] = []
            for _ in range(100):
                r = await api.http.get("/v1/admin/webhooks/dead", headers=api.admin)
                assert r.status_code == 200, r.text
                dead = r.json()
                if {d["url"] for d in dead} >= set(broken[:2]):
                    break
                await asyncio.sleep(0.1)
            first = next(d for d in dead if d["url"] == broken[0])
            assert first["attempts"] == 3 and first["last_status"] is None
            assert "invalid URL" in first["last_error"]
            assert first["event_type"] == "TaskEnqueued"
            assert (await api.http.get("/healthz")).status_code == 200
            # Admin only: a public API token is forbidden (403), no token unauthenticated (401).
            public = {"Authorization": f"Bearer {API_TOKEN}"}
            r = await api.http.get("/v1/admin/webhooks/dead", headers=public)
            assert r.status_code == 403 and "admin" in r.text, r.text
            r = await api.http.get("/v1/admin/webhooks/dead", headers={"Authorization": ""})
            assert r.status_code == 401, r.text
    finally:
        good.server.shutdown()


def _event(n: int, at: datetime) -> TaskEvent:
    return TaskEvent(
        event_id=f"ev{n}",
        event_type=EventType.TASK_STARTED,
        task_id="t1",
        run_id="r1",
        task_type="DOCUMENT_IMPORT",
        at=at,
    )


async def test_a_failing_event_is_given_up_as_dead_and_later_ones_flow(
    settings: Settings,
) -> None:
    """4xx (not 408/429): dead after 3 attempts; 429 and 5xx: after WEBHOOK_MAX_ATTEMPTS; an
    event older than WEBHOOK_MAX_AGE_SECONDS: after its first failure. A raw secret works."""
    answers = {"ev1": 400, "ev2": 429, "ev3": 503, "ev5": 500}
    receiver = Receiver(
        lambda id_, n: (503 if n <= 2 else 200) if id_ == "ev4" else answers.get(id_, 200)
    )
    raw_secret = "a raw shared secret of 32 bytes!"
    db = await Database.open(settings)
    now = datetime.now(UTC)
    await db.events.record(
        [_event(1, now), _event(2, now), _event(3, now), _event(4, now), _event(5, now)]
    )
    await db.events.record([_event(6, now - timedelta(days=2)), _event(7, now)])
    answers["ev6"] = 503
    dispatcher = WebhookDispatcher(
        db,
        [receiver.url],
        raw_secret.encode(),
        max_attempts=5,
        max_age=timedelta(days=1),
        first_backoff=0.02,
    )
    stop = asyncio.Event()
    run = asyncio.create_task(dispatcher.run(stop))
    try:
        await _until(lambda: len(receiver.accepted) >= 2, 20)
        # The cursor is written after the receiver answered: wait for it, don't assume it.
        await eventually(lambda: db.webhook_cursors.get(receiver.url), lambda seq: seq == 7)
    finally:
        stop.set()
        await run
        receiver.server.shutdown()
    assert [json.loads(b)["event_id"] for _, b in receiver.accepted] == ["ev4", "ev7"]
    assert receiver.attempts == {
        "ev1": 3,
        "ev2": 5,
        "ev3": 5,
        "ev4": 3,
        "ev5": 5,
        "ev6": 1,
        "ev7": 1,
    }
    dead = await db.webhook_cursors.dead()
    assert [(d.event_id, d.attempts, d.last_status) for d in reversed(dead)] == [
        ("ev1", 3, 400),
        ("ev2", 5, 429),
        ("ev3", 5, 503),
        ("ev5", 5, 500),
        ("ev6", 1, 503),
    ]
    assert all(d.url == receiver.url and d.last_error.startswith("HTTP ") for d in dead)
    assert await db.webhook_cursors.get(receiver.url) == 7
    # The raw secret is the HMAC key as is: `Webhook(bytes)`, or its `whsec_` form.
    whsec = "whsec_" + base64.b64encode(raw_secret.encode()).decode()
    for headers, body in receiver.accepted:
        Webhook(raw_secret.encode()).verify(body, headers)
        Webhook(whsec).verify(body, headers)

    # A restart resumes after the dead events: nothing is retried, nothing recorded twice.
    again = Receiver()
    stop = asyncio.Event()
    run = asyncio.create_task(
        WebhookDispatcher(db, [receiver.url, again.url], raw_secret.encode()).run(stop)
    )
    try:
        # Done once its cursor is at the last event: anything sent twice would be sent before.
        await eventually(lambda: db.webhook_cursors.get(again.url), lambda seq: seq == 7)
    finally:
        stop.set()
        await run
        again.server.shutdown()
    assert len(again.accepted) == 7 and len(await db.webhook_cursors.dead()) == 5
    await db.close()


def test_webhook_secret_is_required_and_checked(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def make(**kw: str) -> Settings:
        return HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path, **kw)

    with pytest.raises(ValidationError) as e:
        make(WEBHOOK_URLS="https://example.com/hook")
    assert "WEBHOOK_SECRET" in str(e.value) and "WEBHOOK_URLS" in str(e.value)
    # Through the environment, as a process starts: a SettingsError naming both.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WEBHOOK_URLS", "https://example.com/hook")
    monkeypatch.setenv("WEBHOOK_SECRET", "")
    with pytest.raises(SettingsError, match=r"WEBHOOK_SECRET.*WEBHOOK_URLS"):
        load_settings()
    # A whsec_ secret that is not base64, and a key too short to be a secret, are refused.
    for bad in ("whsec_not*base64!", "short", "whsec_" + base64.b64encode(b"x" * 8).decode()):
        with pytest.raises(ValidationError, match="WEBHOOK_SECRET"):
            make(WEBHOOK_URLS="https://example.com/hook", WEBHOOK_SECRET=bad)
    for url in ("example.com/hook", "ftp://example.com/x", "http://[::1/hook", "https:///x"):
        with pytest.raises(ValidationError, match="WEBHOOK_URLS"):
            make(WEBHOOK_URLS=url, WEBHOOK_SECRET=SECRET)
    ok = make(WEBHOOK_URLS="https://a.example/h, http://b.example:8080/h", WEBHOOK_SECRET=SECRET)
    assert ok.webhook_signing_key() == base64.b64decode(SECRET.removeprefix("whsec_"))
    assert make().webhook_secret == ""  # no URLs, no secret needed
    # Settings built in code skip validation: the dispatcher refuses them too.
    unsigned = make().model_copy(update={"webhook_urls": "https://example.com/hook"})
    with pytest.raises(SettingsError, match="WEBHOOK_SECRET"):
        unsigned.webhook_signing_key()
