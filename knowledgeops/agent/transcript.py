"""An agent task's transcript: every message, tool call, tool result and the tokens each model
call used, stored in the output store under the task id (GET /v1/tasks/{id}/output).

Messages have ids the workflow assigns, so writing one is an upsert: an activity retried after
it already wrote its message writes the same message again instead of a second one. Totals
(steps, tool calls, tokens) are derived from the messages for the same reason. Only
activities write, one at a time (the workflow runs them in sequence), so a read-modify-write
never loses another writer's message.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from knowledgeops.files.outputs import OutputNotFoundError, OutputStore
from knowledgeops.models.chat import TokenUsage, ToolCall

# A tool result longer than this is cut (and says so): the model's context is the limit.
MAX_TOOL_RESULT_CHARS = 12_000
# Older tool results are shortened once the conversation sent to the model passes this.
MAX_CONTEXT_CHARS = 200_000
ELIDED_RESULT_CHARS = 600


class TranscriptMessage(BaseModel):
    id: int
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    # tool messages: the call they answer and the tool's name; error: the call failed.
    tool_call_id: str | None = None
    name: str | None = None
    error: bool = False
    # assistant messages: the step (model call number) and the tokens it used.
    step: int | None = None
    usage: TokenUsage | None = None
    at: datetime


class Transcript(BaseModel):
    task_id: str
    status: Literal["running", "completed", "failed", "cancelled"] = "running"
    error: str | None = None
    model: str | None = None
    messages: list[TranscriptMessage] = Field(default_factory=list)
    steps: int = 0
    tool_calls: int = 0
    usage: TokenUsage = Field(default_factory=TokenUsage)
    updated_at: datetime

    def get(self, message_id: int) -> TranscriptMessage | None:
        for m in self.messages:
            if m.id == message_id:
                return m
        return None

    def put(self, message: TranscriptMessage) -> None:
        """Add a message, or replace the one with its id; messages stay in id order."""
        self.messages = [m for m in self.messages if m.id != message.id] + [message]
        self.messages.sort(key=lambda m: m.id)
        assistant = [m for m in self.messages if m.role == "assistant"]
        self.steps = len(assistant)
        self.tool_calls = sum(len(m.tool_calls) for m in assistant)
        usage = TokenUsage()
        for m in assistant:
            if m.usage is not None:
                usage = usage.add(m.usage)
        self.usage = usage

    def tool_call(self, reply_id: int, call_id: str) -> ToolCall | None:
        reply = self.get(reply_id)
        if reply is None:
            return None
        return next((c for c in reply.tool_calls if c.id == call_id), None)

    def chat_messages(self) -> list[dict[str, Any]]:
        """The conversation as the chat API takes it. Once it is longer than
        MAX_CONTEXT_CHARS, the oldest tool results are shortened first (the transcript
        itself keeps them whole)."""
        out: list[dict[str, Any]] = []
        for m in self.messages:
            if m.role == "assistant":
                msg: dict[str, Any] = {"role": "assistant", "content": m.content}
                if m.tool_calls:
                    msg["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in m.tool_calls
                    ]
                out.append(msg)
            elif m.role == "tool":
                out.append(
                    {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content or ""}
                )
            else:
                out.append({"role": m.role, "content": m.content or ""})
        size = sum(len(str(m.get("content") or "")) for m in out)
        for msg in out:
            if size <= MAX_CONTEXT_CHARS:
                break
            text = str(msg.get("content") or "")
            if msg["role"] == "tool" and len(text) > ELIDED_RESULT_CHARS:
                short = text[:ELIDED_RESULT_CHARS] + " [... shortened to fit the context]"
                size -= len(text) - len(short)
                msg["content"] = short
        return out


def message(message_id: int, role: str, content: str | None, **fields: Any) -> TranscriptMessage:
    return TranscriptMessage.model_validate(
        {"id": message_id, "role": role, "content": content, "at": datetime.now(UTC), **fields}
    )


class TranscriptStore:
    def __init__(self, outputs: OutputStore) -> None:
        self.outputs = outputs

    async def load(self, task_id: str) -> Transcript | None:
        try:
            raw = await self.outputs.load(task_id)
        except OutputNotFoundError:
            return None
        return Transcript.model_validate(raw)

    async def save(self, transcript: Transcript) -> None:
        transcript.updated_at = datetime.now(UTC)
        await self.outputs.save(transcript.task_id, transcript)


def new_transcript(task_id: str, model: str | None) -> Transcript:
    return Transcript(task_id=task_id, model=model, updated_at=datetime.now(UTC))


def cut(text: str, limit: int = MAX_TOOL_RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f" [... cut: {len(text) - limit} more characters]"
