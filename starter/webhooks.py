"""Deliver domain events to webhook URLs: in order, at least once, HMAC-signed, with backoff.

Each URL has a cursor in the database, advanced only after a 2xx, so a restart resumes where
delivery stopped. Receivers dedupe by the `X-Knowledgeops-Event-Id` header.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging

import httpx

from knowledgeops.stores.database import Database

log = logging.getLogger(__name__)
MAX_BACKOFF = 60.0


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookDispatcher:
    def __init__(
        self, db: Database, urls: list[str], secret: str, poll_seconds: float = 0.5
    ) -> None:
        self.db = db
        self.urls = urls
        self.secret = secret
        self.poll_seconds = poll_seconds

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            await asyncio.gather(*(self._deliver(http, url, stop) for url in self.urls))

    async def _deliver(self, http: httpx.AsyncClient, url: str, stop: asyncio.Event) -> None:
        cursor = await self.db.webhook_cursors.get(url)
        backoff = 1.0
        while not stop.is_set():
            events = await self.db.events.after(cursor, 100)
            for ev in events:
                body = ev.model_dump_json().encode()
                headers = {
                    "Content-Type": "application/json",
                    "X-Knowledgeops-Event-Id": ev.event_id,
                    "X-Knowledgeops-Event-Type": ev.event_type.value,
                    "X-Knowledgeops-Signature": signature(self.secret, body),
                }
                try:
                    r = await http.post(url, content=body, headers=headers)
                    ok = 200 <= r.status_code < 300
                    problem = f"HTTP {r.status_code}"
                except httpx.HTTPError as e:
                    ok, problem = False, str(e) or type(e).__name__
                if not ok:
                    log.warning("webhook %s failed (%s); retrying in %.0fs", url, problem, backoff)
                    await _sleep_or_stop(stop, backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
                    break
                backoff = 1.0
                cursor = ev.seq
                await self.db.webhook_cursors.set(url, cursor)
            else:
                await _sleep_or_stop(stop, self.poll_seconds)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return
