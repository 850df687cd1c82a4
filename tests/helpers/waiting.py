"""Waiting in tests: one `eventually` for every condition a test waits on (and
`eventually_sync`, the same for a caller that cannot await, such as a fixture's teardown)."""

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
            raise _did_not_hold(what, timeout, value)
        await asyncio.sleep(interval)


def eventually_sync(
    probe: Callable[[], T],
    done: Callable[[T], bool],
    *,
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "the condition",
) -> T:
    """`eventually` for a synchronous caller: the same polling, sleeping in this thread
    between tries (so only for what other threads or processes bring about)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise _did_not_hold(what, timeout, value)
        time.sleep(interval)


def _did_not_hold(what: str, timeout: float, value: object) -> AssertionError:
    return AssertionError(f"{what} did not hold within {timeout:g} s; last seen: {value!r}")
