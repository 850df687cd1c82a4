"""SQLite's writers in one process take turns (`Database.write`), express tasks' writers first
(knowledgeops/runtime/express.py says why)."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar

from knowledgeops.turns import SmallestFirst

# Set while an express task's activity runs (knowledgeops/runtime/express.py sets it).
EXPRESS: ContextVar[bool] = ContextVar("knowledgeops_express", default=False)


def write_turn(turns: SmallestFirst) -> contextlib.AbstractAsyncContextManager[None]:
    """This writer's turn: the next one if it writes for an express task, else in arrival
    order."""
    return turns.hold(0 if EXPRESS.get() else 1)
