"""Deliver domain events to webhook URLs as Standard Webhooks (https://www.standardwebhooks.com):
in order per URL, at least once, signed, retried with backoff, never at the cost of the process.

Each request carries `webhook-id` (the event id: receivers dedupe by it), `webhook-timestamp`
(this attempt's time, so a replay is refused) and `webhook-signature` (`v1,<base64 HMAC-SHA256
of "id.timestamp.body">`), which any Standard Webhooks library verifies with WEBHOOK_SECRET.

Each URL has a cursor in the database, advanced after a 2xx or once the event is given up:
after `max_attempts` failures (3 when the receiver answers a 4xx other than 408/429, or the URL
cannot be requested at all), or at a failure once the event is older than `max_age`. A given-up
event is recorded as dead with its last error (GET /v1/admin/webhooks/dead) in the transaction
that moves the cursor, so one event a receiver always refuses cannot hold back the ones after
it, and a restart resumes where delivery stopped. Any error of one URL's loop (network,
database, a bug) is logged and retried with backoff: it never ends the process serving the API.

Every process serving the API runs a dispatcher, but only the one holding the database lease
"webhook-delivery" delivers (starter/services/webhook_lease.py); each cursor write is fenced by
that lease in its transaction, so a process that lost it cannot move a cursor any more. An
event in flight when its holder dies or loses the lease (sent, its cursor write not committed)
is sent again by the process taking over, one event per URL at most: receivers dedupe by
`webhook-id`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from math import floor
from typing import Literal

import httpx
from standardwebhooks import Webhook

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.events import StoredEvent
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from knowledgeops.db.leases import LeaseLost, Leases
from knowledgeops.db.webhook_cursors import WebhookCursors
from starter.services.webhook_lease import LEASE_NAME, LEASE_SECONDS, LeaseKeeper

log = logging.getLogger(__name__)
MAX_BACKOFF = 60.0
# A refusal that will most likely come again (4xx other than 408 Request Timeout / 429 Too
# Many Requests, an unusable URL): a couple of retries cover a receiver mid-deploy, no more.
PERMANENT_ATTEMPTS = 3
RETRYABLE_4XX = frozenset({408, 429})
# One attempt's whole request (httpx's timeout is per read, a slow drip could last forever).
REQUEST_SECONDS = 30.0
BATCH = 100
ERROR_EXCERPT = 300


@dataclass(frozen=True)
class Attempt:
    ok: bool
    permanent: bool = False
    error: str = ""
    status: int | None = None


@dataclass
class _Failing:
    """The event a URL is stuck on: how often and since when it failed (in memory; after a
    restart the event's age still bounds it)."""

    seq: int
    attempts: int = 0
    since: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class _Url:
    url: str
    backoff: float
    cursor: int | None = None
    failing: _Failing | None = None


class WebhookDispatcher:
    def __init__(
        self,
        db: Database,
        urls: list[str],
        key: bytes,
        *,
        max_attempts: int = 15,
        max_age: timedelta = timedelta(days=1),
        poll_seconds: float = 0.5,
        first_backoff: float = 1.0,
        lease_seconds: float = LEASE_SECONDS,
    ) -> None:
        self.cursors = WebhookCursors(db)
        self.events = EventStore(db)
        self.urls = urls
        self.signer = Webhook(key)
        self.max_attempts = max_attempts
        self.max_age = max_age
        self.poll_seconds = poll_seconds
        self.first_backoff = first_backoff
        self.keeper = LeaseKeeper(Leases(db), LEASE_NAME, lease_seconds)

    @classmethod
    def from_settings(cls, db: Database, settings: Settings) -> WebhookDispatcher | None:
        """None without WEBHOOK_URLS; SettingsError when they are set without a usable secret."""
        urls = settings.webhook_url_list()
        if not urls:
            return None
        return cls(
            db,
            urls,
            settings.webhook_signing_key(),
            max_attempts=settings.webhook_max_attempts,
            max_age=timedelta(seconds=settings.webhook_max_age_seconds),
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver while this process holds the lease, until `stop`; returns promptly then,
        even mid-request, having released the lease."""
        async with httpx.AsyncClient(timeout=10) as http:
            await self.keeper.run(stop, lambda: self._deliver_all(http))

    async def _deliver_all(self, http: httpx.AsyncClient) -> None:
        """Every URL's loop, until cancelled or one finds the lease lost (LeaseLost)."""
        try:
            async with asyncio.TaskGroup() as loops:
                for url in self.urls:
                    loops.create_task(self._deliver(http, url))
        except* LeaseLost as lost:
            raise lost.exceptions[0] from None

    async def _deliver(self, http: httpx.AsyncClient, url: str) -> None:
        # Fresh at every hold: the cursor is read again, as the last holder left it.
        state = _Url(url, self.first_backoff)
        while True:
            try:
                outcome = await self._step(http, state)
            except LeaseLost:
                raise  # not this URL's problem: delivery stops until the lease is held again
            except Exception as e:
                # Whatever it is (database, a bug), it is this URL's problem, not the process's.
                log.exception(
                    "webhook %s: delivery error (%s); retrying in %.0f s", url, e, state.backoff
                )
                outcome = "retry"
            if outcome == "more":
                continue
            if outcome == "idle":
                await asyncio.sleep(self.poll_seconds)
                continue
            await asyncio.sleep(state.backoff)
            state.backoff = min(state.backoff * 2, MAX_BACKOFF)

    async def _step(self, http: httpx.AsyncClient, state: _Url) -> Literal["idle", "more", "retry"]:
        """Deliver the events after the cursor until one fails ("retry") or none is left."""
        if state.cursor is None:
            state.cursor = await self.cursors.get(state.url)
        events = await self.events.after(state.cursor, BATCH)
        for ev in events:
            attempt = await self.post(http, state.url, ev)
            if attempt.ok:
                await self.cursors.set(state.url, ev.seq, fenced_by=self.keeper.lease)
            else:
                failing = state.failing
                if failing is None or failing.seq != ev.seq:
                    failing = state.failing = _Failing(ev.seq)
                failing.attempts += 1
                if not self._gives_up(ev, failing, attempt):
                    log.warning(
                        "webhook %s: event %s refused (%s, attempt %d); retrying in %.0f s",
                        state.url,
                        ev.event_id,
                        attempt.error,
                        failing.attempts,
                        state.backoff,
                    )
                    return "retry"
                await self.cursors.give_up(
                    state.url,
                    ev,
                    attempts=failing.attempts,
                    last_status=attempt.status,
                    last_error=attempt.error,
                    first_attempt_at=failing.since,
                    fenced_by=self.keeper.lease,
                )
                log.error(
                    "webhook %s: gave up event %s after %d attempt(s) (%s); recorded as dead",
                    state.url,
                    ev.event_id,
                    failing.attempts,
                    attempt.error,
                )
            state.cursor, state.failing, state.backoff = ev.seq, None, self.first_backoff
        return "more" if len(events) == BATCH else "idle"

    def _gives_up(self, ev: StoredEvent, failing: _Failing, attempt: Attempt) -> bool:
        limit = self.max_attempts
        if attempt.permanent:
            limit = min(PERMANENT_ATTEMPTS, limit)
        return failing.attempts >= limit or datetime.now(UTC) - ev.at >= self.max_age

    def headers(self, ev: StoredEvent, body: str, at: datetime) -> dict[str, str]:
        return {
            "content-type": "application/json",
            "webhook-id": ev.event_id,
            "webhook-timestamp": str(floor(at.timestamp())),
            "webhook-signature": self.signer.sign(ev.event_id, at, body),
            # A convenience: route by type without parsing the body.
            "x-knowledgeops-event-type": ev.event_type.value,
        }

    async def post(self, http: httpx.AsyncClient, url: str, ev: StoredEvent) -> Attempt:
        """One delivery attempt; never raises (but for cancellation): the outcome says how it
        failed and whether retrying is likely to help."""
        body = ev.model_dump_json()
        headers = self.headers(ev, body, datetime.now(UTC))
        try:
            async with asyncio.timeout(REQUEST_SECONDS):
                async with http.stream("POST", url, content=body.encode(), headers=headers) as r:
                    if 200 <= r.status_code < 300:
                        return Attempt(ok=True, status=r.status_code)
                    excerpt = await _excerpt(r)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as e:
            return Attempt(ok=False, permanent=True, error=f"invalid URL: {e}")
        except TimeoutError:
            return Attempt(ok=False, error=f"no answer within {REQUEST_SECONDS:.0f} s")
        except httpx.TransportError as e:
            # Network: connection refused, DNS, timeouts, a dropped connection; may pass.
            return Attempt(ok=False, error=f"{type(e).__name__}: {e}")
        except Exception as e:
            # Anything else (e.g. a host name IDNA refuses) comes back the same every time.
            return Attempt(ok=False, permanent=True, error=f"{type(e).__name__}: {e}")
        status = r.status_code
        permanent = status < 500 and status not in RETRYABLE_4XX
        return Attempt(
            ok=False, permanent=permanent, error=f"HTTP {status} {excerpt}".strip(), status=status
        )


async def _excerpt(r: httpx.Response) -> str:
    """The start of a refusal's body, for the dead record (never the whole of a huge body)."""
    data = b""
    async for chunk in r.aiter_raw():
        data += chunk
        if len(data) >= ERROR_EXCERPT:
            break
    return data[:ERROR_EXCERPT].decode("utf-8", "replace").strip()
