"""Outages ridden out: a step that failed because a service did not answer (the object store,
the application database, a Qdrant server, Temporal) is not bad input and not a bug. It is
retried with back-off for up to OUTAGE_WAIT_SECONDS, keeping its checkpoint, and only past
that fails, naming the service; a retry of the task then resumes from the checkpoint.

Done once for every activity, by a worker interceptor, so no activity handles it itself:
- An attempt failed by an outage ends with `ServiceUnavailable` and a `next_retry_delay`
  (1 s doubling to OUTAGE_MAX_DELAY) instead of the policy's own back-off.
- The outage's start and the attempts it used ride along as one extra heartbeat detail after
  the activity's own checkpoint, so the next attempt, on any worker, knows both: the wait is
  measured from the outage's start, and the attempts it used are not counted against the
  activity's declared attempts (the registry adds OUTAGE_ATTEMPTS of headroom to every
  policy; an ordinary failure past the declared number fails for good, as before).
- A local activity has no heartbeat: its wait is measured from its first schedule.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from knowledgeops.db.database import DATABASE_ERRORS, database_unreachable
from knowledgeops.index.server import QDRANT_ERRORS, qdrant_unreachable
from knowledgeops.registry.spec import OUTAGE_ATTEMPTS, OUTAGE_MAX_DELAY
from knowledgeops.runtime.temporal import is_unreachable
from knowledgeops.storage.s3 import OBJECT_STORE_ERRORS, object_store_unreachable

SERVICE_UNAVAILABLE = "ServiceUnavailable"
_MARKER = "knowledgeops_outage"
_REASON_CHARS = 300


# The kinds of exception an unreachable service surfaces as (what an HTTP handler catches to
# answer 503 instead of 500; `unreachable_service` then decides).
OUTAGE_ERROR_TYPES: tuple[type[Exception], ...] = (
    OSError,  # ConnectionError, TimeoutError, a refused connection raised inside a driver
    *DATABASE_ERRORS,
    *OBJECT_STORE_ERRORS,
    *QDRANT_ERRORS,
)


def unreachable_service(exc: BaseException) -> str | None:
    """The service `exc` (or an exception it was raised from) says did not answer, or None."""
    for e in _chain(exc):
        if object_store_unreachable(e):
            return "object store"
        if database_unreachable(e):
            return "database"
        if qdrant_unreachable(e):
            return "Qdrant server"
        if is_unreachable(e):
            return "Temporal"
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


@dataclass(frozen=True)
class Outage:
    """What the attempts of one activity have met so far: `since` is None once an attempt got
    through after the last outage; `failures` counts every attempt an outage failed."""

    since: float | None
    failures: int

    def detail(self) -> dict[str, Any]:
        return {_MARKER: {"since": self.since, "failures": self.failures}}

    @staticmethod
    def split(details: Sequence[Any]) -> tuple[list[Any], Outage | None]:
        """The activity's own heartbeat details, and the outage record after them."""
        own = list(details)
        if own and isinstance(own[-1], dict) and _MARKER in own[-1]:
            record = own.pop()[_MARKER]
            return own, Outage(record.get("since"), int(record.get("failures", 0)))
        return own, None


def _moved(before: list[Any], after: list[Any]) -> bool:
    """Whether the attempt's checkpoint moved on (no details and a None one are the same)."""
    return [d for d in before if d is not None] != [d for d in after if d is not None]


class OutageInterceptor(Interceptor):
    def __init__(self, wait: timedelta) -> None:
        self.wait = wait

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self.wait)


class _Outbound(ActivityOutboundInterceptor):
    """Keeps the outage record behind every heartbeat of the attempt, and the latest details."""

    own: list[Any]
    outage: Outage | None = None

    def heartbeat(self, *details: Any) -> None:
        self.own = list(details)
        self.next.heartbeat(*self._with_record())

    def _with_record(self) -> list[Any]:
        if self.outage is None:
            return self.own
        # The checkpoint stays first: `resume_from` reads details[0] (None: start afresh).
        return [*(self.own or [None]), self.outage.detail()]


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, wait: timedelta) -> None:
        super().__init__(next)
        self._wait = wait.total_seconds()

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        self._out = _Outbound(outbound)
        super().init(self._out)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        start_details, outage = Outage.split(info.heartbeat_details)
        self._out.own, self._out.outage = start_details, outage
        try:
            return await self.next.execute_activity(input)
        except Exception as e:
            if isinstance(e, ApplicationError) and e.non_retryable:
                raise  # bad input, or a bound already reached: fails at once
            failure = self._failed(e, outage, start_details)
            if failure is e:
                raise
            raise failure from None

    def _failed(
        self, e: Exception, outage: Outage | None, start_details: list[Any]
    ) -> BaseException:
        info = activity.info()
        service = unreachable_service(e)
        if service is None:
            return self._ordinary(e, outage)
        now = time.time()
        if info.is_local:
            since = info.scheduled_time.timestamp()
        elif outage is None or outage.since is None or _moved(start_details, self._out.own):
            since = now  # a new outage: none before, or this attempt got somewhere first
        else:
            since = outage.since
        waited = now - since
        # One line, without a library's debug dump (obstore appends one).
        text = str(e).split("Debug source:")[0]
        reason = " ".join(text.split())[:_REASON_CHARS] or type(e).__name__
        if waited >= self._wait:
            return ApplicationError(
                f"the {service} has been unreachable for {waited / 60:.1f} min, longer than "
                f"OUTAGE_WAIT_SECONDS={self._wait:.0f} allows ({reason}). Once it answers "
                "again, retry the task: it resumes from its checkpoint.",
                type=SERVICE_UNAVAILABLE,
                non_retryable=True,
            )
        failures = (outage.failures if outage else 0) + 1
        # Doubling back-off without counting attempts: 1, 2, 4, 8 ... s as the wait grows.
        delay = min(timedelta(seconds=2 ** int(waited).bit_length()), OUTAGE_MAX_DELAY)
        self._out.outage = Outage(since, failures)
        if not info.is_local:
            # Sent before the failure is reported (the SDK flushes it), so the next attempt
            # gets the checkpoint and the outage's start.
            self._out.next.heartbeat(*self._out._with_record())
        activity.logger.warning(
            "the %s is unreachable (%s); retrying in %ss, %.0fs of OUTAGE_WAIT_SECONDS=%.0f spent",
            service,
            reason,
            delay.total_seconds(),
            waited,
            self._wait,
        )
        return ApplicationError(
            f"the {service} is unreachable ({reason}); waiting for it: retry in "
            f"{delay.total_seconds():.0f}s, {waited:.0f}s of OUTAGE_WAIT_SECONDS="
            f"{self._wait:.0f} spent",
            type=SERVICE_UNAVAILABLE,
            next_retry_delay=delay,
        )

    def _ordinary(self, e: Exception, outage: Outage | None) -> BaseException:
        """`e` as it would have failed, but for good once the attempts the registry declared
        for ordinary failures are spent (the outage headroom is not theirs)."""
        info = activity.info()
        policy = info.retry_policy
        declared = (policy.maximum_attempts - OUTAGE_ATTEMPTS) if policy else 0
        ordinary = info.attempt - (outage.failures if outage else 0)
        if declared <= 0 or ordinary < declared:
            return e
        if isinstance(e, ApplicationError):
            final = ApplicationError(
                e.message, *e.details, type=e.type, non_retryable=True, category=e.category
            )
        else:
            final = ApplicationError(str(e), type=type(e).__name__, non_retryable=True)
        final.__cause__ = e.__cause__
        return final.with_traceback(e.__traceback__)
