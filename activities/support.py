"""What every activity class uses: a heartbeat that keeps going while work is slow, resuming
from the last heartbeat's checkpoint, and bad input as a non-retryable failure.

Heartbeats are sent from a side task every `interval`, always carrying the latest checkpoint,
so a long embedding request, a Retry-After wait or a parser subprocess never trips the
heartbeat timeout, while a dead worker still does. The worker throttles what reaches the
server (see worker.HEARTBEAT_THROTTLE). Long-running activities heartbeat; the heartbeat is
also how cancellation arrives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio import activity

from knowledgeops.contracts.base import Checkpoint

C = TypeVar("C", bound=Checkpoint)


def resume_from(fresh: C, valid: Callable[[C], bool] = lambda _: True) -> C:
    """The checkpoint of the previous attempt's last heartbeat, or `fresh`. Heartbeat details
    come back as plain dicts: validated before they are trusted."""
    details = activity.info().heartbeat_details
    if not details or details[0] is None:  # None: an outage record came, no checkpoint yet
        return fresh
    try:
        checkpoint = type(fresh).model_validate(details[0])
    except ValidationError as e:
        activity.logger.warning("ignoring invalid checkpoint, starting over: %s", e)
        return fresh
    return checkpoint if valid(checkpoint) else fresh


class Heartbeater:
    def __init__(self, details: Any = None, interval: float = 1.0) -> None:
        self._details = details
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    def update(self, details: Any) -> None:
        self._details = details
        self.beat()

    def note(self, details: Any) -> None:
        """Details for the next periodic beat: callable from a thread (`update` beats at once,
        which only the event loop's thread may)."""
        self._details = details

    def beat(self) -> None:
        if activity.info().is_local:
            return  # no heartbeat: the workflow task running it is its liveness
        if self._details is None:
            activity.heartbeat()
        else:
            activity.heartbeat(self._details)

    async def _loop(self) -> None:
        while True:
            self.beat()
            await asyncio.sleep(self._interval)

    async def __aenter__(self) -> Heartbeater:
        if not activity.info().is_local:  # a local activity has no heartbeat to send
            self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
