"""What the AI task types share in their contracts: token usage, the method choice, and the
chunk-group plan and checkpoint of map-reduce over a long document.

Token usage lives here rather than in `knowledgeops/models/chat.py` (which re-exports it) because
workflow results carry it, and workflows import contracts only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from knowledgeops.contracts.base import Checkpoint

# auto: the chat model when CHAT_MODEL is set, else the local method; model / local: only that.
MethodChoice = Literal["auto", "model", "local"]


class TokenUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    def add(self, other: TokenUsage) -> TokenUsage:
        """The sum of both."""
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            calls=self.calls + other.calls,
        )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class GroupPlan(BaseModel):
    """A document cut into chunk groups that each fit one model request: group i covers chunks
    [starts[i], starts[i + 1]) (the last one up to `chunks`). Fixed once, with the chunk
    version it was made from, so every retry maps the same groups."""

    document_id: str
    version: str | None
    chunks: int = Field(ge=0)
    starts: list[int]

    def bounds(self, i: int) -> tuple[int, int]:
        end = self.starts[i + 1] if i + 1 < len(self.starts) else self.chunks
        return self.starts[i], end


class GroupCheckpoint(Checkpoint):
    """Heartbeat of a map over chunk groups: `done` of `total` groups have their partial result
    stored (a retry reads those back instead of asking the model again), and the tokens the
    groups done so far used."""

    usage: TokenUsage = Field(default_factory=TokenUsage)
