"""What every task type's contract is made of: typed activity references, progress, checkpoints.

Workflows import only contracts, so they cannot hold the activity functions themselves (those
pull in Qdrant, the models, the database). An `ActivityRef` is the typed stand-in: its name is
the registered activity's name and its types are the implementation's argument and result
(`tests/platform/test_registry.py` checks both against the implementation), so a workflow call is
type-checked end to end without importing anything heavy into the sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

In = TypeVar("In")
Out = TypeVar("Out")

# Memo keys the workflow base writes and status readers read.
PROGRESS_MEMO = "progress"
# Set once an activity of the run has completed: until then a running task is "pending".
BEGAN_MEMO = "began"
# The owner of the document(s) a task works for; owner-bound API tokens see only theirs.
OWNER_MEMO = "owner"


@dataclass(frozen=True)
class ActivityRef(Generic[In, Out]):
    """An activity as workflows call it (see the module docstring)."""

    name: str
    input: Any  # the argument's type; a runtime value only for the registry test
    output: type[Out]


class Progress(BaseModel):
    """Generic progress of any task: `done` of `total` `unit`s in `stage`."""

    stage: str = "pending"
    done: int = Field(default=0, ge=0)
    total: int | None = Field(default=None, ge=0)
    unit: str = "steps"

    def line(self) -> str:
        """As a person reads it: `completed: 3,123 / 3,123 chunks`, or `embedding: 3,123
        chunks` where the count done lives in the running activity's heartbeat."""
        if self.total is None:
            return self.stage
        if not self.done:
            return f"{self.stage}: {self.total:,} {self.unit}"
        return f"{self.stage}: {self.done:,} / {self.total:,} {self.unit}"


class Checkpoint(BaseModel):
    """Heartbeat details of a long activity: the progress a reader shows and the point a
    retry resumes from. Types extend it with what their resume needs."""

    done: int = Field(default=0, ge=0)
    total: int = Field(default=0, ge=0)
