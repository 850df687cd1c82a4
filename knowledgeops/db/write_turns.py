"""SQLite's writers in one process take turns, express tasks' writers first
(knowledgeops/runtime/express.py says why)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from contextvars import ContextVar

# Set while an express task's activity runs (knowledgeops/runtime/express.py sets it).
EXPRESS: ContextVar[bool] = ContextVar("knowledgeops_express", default=False)


class WriteTurns:
    """One writer at a time, in order of arrival, except that a waiting express writer is
    always next."""

    def __init__(self) -> None:
        self._held = False
        self._express: deque[asyncio.Future[None]] = deque()
        self._others: deque[asyncio.Future[None]] = deque()

    @contextlib.asynccontextmanager
    async def turn(self, express: bool) -> AsyncIterator[None]:
        if self._held or self._express or self._others:
            queue = self._express if express else self._others
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            queue.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._pass_on()  # cancelled just after being handed the turn
                elif waiter in queue:
                    queue.remove(waiter)
                raise
        else:
            self._held = True
        try:
            yield
        finally:
            self._pass_on()

    def _pass_on(self) -> None:
        """Hand the turn to the next waiter (it stays held), or free it."""
        for queue in (self._express, self._others):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._held = False
