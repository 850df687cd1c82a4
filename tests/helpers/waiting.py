"""Waiting in tests: one `eventually` for every condition a test waits on."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T] | T],
    done: Callable[[T], bool],
    *,
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "the condition",
) -> T:
    """Poll `probe()` (a coroutine function, or a plain one reading a counter) until
    `done(value)`; return that value, or fail naming what it last saw (for what settles
    eventually, like Temporal's visibility store or a fake server's counters)."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        value: T = await got if inspect.isawaitable(got) else got
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what} did not hold within {timeout:.0f} s; last seen: {value!r}"
            )
        await asyncio.sleep(interval)
