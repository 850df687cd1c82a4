"""Turns at one resource within a process, the smallest claim first: the local model serves a
small document's one batch before bulk imports' full batches (models/embedding.py), and SQLite's
writers serve an express task's write first (db/write_turns.py)."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import AsyncIterator


class SmallestFirst:
    """A lock whose waiters are served smallest `size` first, then in arrival order."""

    def __init__(self) -> None:
        self._busy = False
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = 0

    @contextlib.asynccontextmanager
    async def hold(self, size: int) -> AsyncIterator[None]:
        if self._busy:
            granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._arrivals += 1
            heapq.heappush(self._waiters, (size, self._arrivals, granted))
            try:
                await granted
            except asyncio.CancelledError:
                if granted.done() and not granted.cancelled():
                    self._release()  # handed over just as we were cancelled: pass it on
                raise
        self._busy = True
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._waiters:
            granted = heapq.heappop(self._waiters)[2]
            if not granted.done():
                granted.set_result(None)  # stays busy: handed over
                return
        self._busy = False
