"""One process at a time delivers webhooks, however many API processes share the database: the
one holding the database lease "webhook-delivery" (knowledgeops/db/leases.py).

A process takes the lease when nobody holds it (or the hold lapsed), renews it every TTL/3 and
runs delivery only while it holds it; the others try to take it every TTL/3. A holder that
dies stops renewing: another process takes over within TTL + TTL/3 of its death (its hold
lapses at most TTL after it, the others try every TTL/3). A holder that cannot renew (database
unreachable) stops delivering once its hold may have lapsed, measured on its own clock from
before the renewal it last saw succeed, so before the database lets anyone else take it. On a
clean shutdown the lease is released, and another process takes over at its next try (within
TTL/3).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from knowledgeops.db.leases import Lease, LeaseLost, Leases

log = logging.getLogger(__name__)

LEASE_NAME = "webhook-delivery"
# How long a hold lasts unrenewed: a dead holder's events wait this long (+ TTL/3) for another
# process, and a holder must get a renewal through once per TTL (it tries 3 times).
LEASE_SECONDS = 15.0


class LeaseKeeper:
    """Runs `work` while this process holds the lease `name`, until stopped."""

    def __init__(self, leases: Leases, name: str, seconds: float = LEASE_SECONDS) -> None:
        if seconds <= 0:
            raise ValueError(f"lease_seconds must be positive (15 s by default), not {seconds}")
        self.leases = leases
        self.lease = Lease.for_this_process(name)
        self.seconds = seconds
        # Both the renewal period of a holder and the retry period of the others.
        self.renew_every = seconds / 3

    @property
    def takeover_seconds(self) -> float:
        """At most how long after a holder's death another process holds the lease."""
        return self.seconds + self.renew_every

    async def run(self, stop: asyncio.Event, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Take the lease whenever it is free and run `work` while holding it; at `stop`,
        cancel `work` and release the lease. `work` may raise LeaseLost (a fenced write found
        the lease taken): it is then run again only once the lease is held again."""
        name = self.lease.name
        while not stop.is_set():
            started = time.monotonic()
            if await self._claim():
                log.info("this process (%s) took the lease %r", self.lease.holder, name)
                lost = await self._hold(stop, work, started + self.seconds)
                if lost is None:
                    await self._release()
                    return
                log.warning(
                    "this process (%s) lost the lease %r (%s): stopped, retrying every %.1f s",
                    self.lease.holder,
                    name,
                    lost,
                    self.renew_every,
                )
            with contextlib.suppress(TimeoutError):  # the retry period elapsed: try again
                await asyncio.wait_for(stop.wait(), self.renew_every)

    async def _claim(self) -> bool:
        try:
            return await self.leases.acquire(self.lease, self.seconds)
        except Exception as e:
            # The database is unreachable (or worse): not holding, so not delivering; retried.
            log.warning(
                "could not try to take the lease %r (%s); retrying in %.1f s",
                self.lease.name,
                e,
                self.renew_every,
            )
            return False

    async def _hold(
        self, stop: asyncio.Event, work: Callable[[], Coroutine[Any, Any, None]], deadline: float
    ) -> str | None:
        """Run `work`, renewing the lease, until `stop` (None) or the lease is lost (why)."""
        working = asyncio.create_task(work())
        stopping = asyncio.create_task(stop.wait())
        renew_at = time.monotonic() + self.renew_every
        try:
            while True:
                wait = max(0.0, min(renew_at, deadline) - time.monotonic())
                done, _ = await asyncio.wait(
                    {working, stopping}, timeout=wait, return_when=asyncio.FIRST_COMPLETED
                )
                if stopping in done:
                    return None
                if working in done:
                    return _why_work_ended(working)
                started = time.monotonic()
                if started >= deadline:
                    return f"not renewed within {self.seconds:g} s"
                try:
                    # Never past the deadline: delivery must stop before anyone can take over.
                    async with asyncio.timeout(deadline - started):
                        held = await self.leases.acquire(self.lease, self.seconds)
                except TimeoutError:
                    return f"its renewal did not finish within {self.seconds:g} s"
                except Exception as e:
                    log.warning("could not renew the lease %r (%s); retrying", self.lease.name, e)
                    renew_at = started + min(self.renew_every, 1.0)
                    continue
                if not held:
                    return "another process holds it"
                deadline, renew_at = started + self.seconds, started + self.renew_every
        finally:
            for task in (working, stopping):
                task.cancel()
            await asyncio.gather(working, stopping, return_exceptions=True)

    async def _release(self) -> None:
        try:
            released = await self.leases.release(self.lease)
        except Exception as e:
            log.warning(
                "could not release the lease %r on shutdown (%s): another process takes it "
                "over once it lapses, within %.0f s",
                self.lease.name,
                e,
                self.takeover_seconds,
            )
            return
        if released:
            log.info("this process (%s) released the lease %r", self.lease.holder, self.lease.name)


def _why_work_ended(working: asyncio.Task[None]) -> str:
    error = working.exception()
    if isinstance(error, LeaseLost):
        return str(error)
    # Delivery handles its own errors and never returns; if it did, release and start over.
    log.error("the work under the lease ended unexpectedly", exc_info=error)
    return f"the work under it ended unexpectedly ({error!r})"
