"""Domain events delivered as Standard Webhooks: signed so an off-the-shelf library verifies
them with the endpoint's secret, each attempt stamped when sent under the event's id, in order,
retried, given up as dead after a bounded number of attempts so later events flow, and never at
the cost of the process."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from knowledgeops.config.loading import load_settings
from knowledgeops.config.settings import Settings
from knowledgeops.config.values import SettingsError
from knowledgeops.contracts.events import EventType, TaskEvent
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from knowledgeops.db.webhook_cursors import WebhookCursors
from starter.dev_server import free_port
from starter.services.webhooks import WebhookDispatcher
from tests.helpers.environment import API_TOKEN, EXAMPLES, Api, HermeticSettings, running_api
from tests.helpers.waiting import eventually
from tests.helpers.webhook_receiver import SECRET, Receiver


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


async def test_events_are_standard_webhooks_in_order_and_retried(settings: Settings) -> None:
    # The first two requests are answered 503: the first event arrives on its third attempt.
    receiver = Receiver(lambda _id, _n: 503 if receiver.attempts.total() <= 2 else 200, SECRET)
    cfg = settings.model_copy(update={"webhook_urls": receiver.url, "webhook_secret": SECRET})
    try:
        async with running_api(cfg) as api:
            await _import(api)
            # (backoff 1 s + 2 s); a request the receiver refuses ends the wait at once.
            await _until(lambda: len(receiver.accepted) >= 3 or bool(receiver.refused), 15)
    finally:
        receiver.server.shutdown()
    # Every request verified as it arrived, with the endpoint's secret as configured.
    assert receiver.refused == []
    assert receiver.kinds() == ["TaskEnqueued", "TaskStarted", "TaskCompleted"]
    assert [d.status for d in receiver.deliveries] == [503, 503, 200, 200, 200]
    for headers, body in receiver.accepted:
        event = json.loads(body)
        assert headers["webhook-id"] == event["event_id"]
        assert headers["x-knowledgeops-event-type"] == event["event_type"]
        assert "x-knowledgeops-signature" not in headers  # the unsigned-timestamp scheme is gone
    assert len({headers["webhook-id"] for headers, _ in receiver.accepted}) == 3

    # A retried event: the same id (receivers dedupe by it) and body, but each attempt is
    # stamped and signed when it is sent, so a retry minutes later is not refused as a replay.
    first = receiver.deliveries[:3]
    assert {d.event_id for d in first} == {first[0].headers["webhook-id"]}
    assert {d.headers["webhook-id"] for d in first} == {first[0].event_id}
    assert len({d.body for d in first}) == 1
    stamps = [int(d.headers["webhook-timestamp"]) for d in first]
    assert stamps == sorted(set(stamps)), stamps  # (retried 1 s, then 2 s later)
    assert all(0 <= d.arrived - stamp < 2 for d, stamp in zip(first, stamps, strict=True))
    assert len({d.headers["webhook-signature"] for d in first}) == 3

    # The signature covers the id, the timestamp and the body, under the endpoint's secret:
    # what a receiver checks fails on any change.
    verifier = Webhook(SECRET)
    headers, body = receiver.accepted[0]
    verifier.verify(body, headers)
    other_id = receiver.accepted[1][0]["webhook-id"]
    changed = [
        (body.replace(b"TaskEnqueued", b"TaskCompleted"), headers),
        (body, headers | {"webhook-timestamp": str(int(headers["webhook-timestamp"]) + 1)}),
        (body, headers | {"webhook-id": other_id}),
    ]
    for forged_body, forged_headers in changed:
        with pytest.raises(WebhookVerificationError, match="signature"):
            verifier.verify(forged_body, forged_headers)
    another_secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    with pytest.raises(WebhookVerificationError, match="signature"):
        Webhook(another_secret).verify(body, headers)


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
            async def listed_dead() -> list[dict[str, Any]]:
                r = await api.http.get("/v1/admin/webhooks/dead", headers=api.admin)
                assert r.status_code == 200, r.text
                return list(r.json())

            def both_invalid(dead: list[dict[str, Any]]) -> bool:
                return {d["url"] for d in dead} >= set(broken[:2])

            dead = await eventually(
                listed_dead, both_invalid, timeout=15, interval=0.1, what="the invalid URLs dead"
            )
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
    await EventStore(db).record(
        [_event(1, now), _event(2, now), _event(3, now), _event(4, now), _event(5, now)]
    )
    await EventStore(db).record([_event(6, now - timedelta(days=2)), _event(7, now)])
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
        await eventually(lambda: WebhookCursors(db).get(receiver.url), lambda seq: seq == 7)
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
    dead = await WebhookCursors(db).dead()
    assert [(d.event_id, d.attempts, d.last_status) for d in reversed(dead)] == [
        ("ev1", 3, 400),
        ("ev2", 5, 429),
        ("ev3", 5, 503),
        ("ev5", 5, 500),
        ("ev6", 1, 503),
    ]
    assert all(d.url == receiver.url and d.last_error.startswith("HTTP ") for d in dead)
    assert await WebhookCursors(db).get(receiver.url) == 7
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
        await eventually(lambda: WebhookCursors(db).get(again.url), lambda seq: seq == 7)
    finally:
        stop.set()
        await run
        again.server.shutdown()
    assert len(again.accepted) == 7 and len(await WebhookCursors(db).dead()) == 5
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
