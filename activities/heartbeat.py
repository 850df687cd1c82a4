"""Keep an activity's heartbeat going while it waits on slow work.

Heartbeats are sent from a side task every `interval`, always carrying the latest checkpoint,
so a long embedding request, a Retry-After wait or a parser subprocess never trips the
heartbeat timeout, while a dead worker still does. The worker throttles what reaches the
server (see worker.HEARTBEAT_THROTTLE).
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from temporalio import activity


class Heartbeater:
    def __init__(self, details: Any = None, interval: float = 1.0) -> None:
        self._details = details
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    def update(self, details: Any) -> None:
        self._details = details
        self.beat()

    def beat(self) -> None:
        if self._details is None:
            activity.heartbeat()
        else:
            activity.heartbeat(self._details)

    async def _loop(self) -> None:
        while True:
            self.beat()
            await asyncio.sleep(self._interval)

    async def __aenter__(self) -> Heartbeater:
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
