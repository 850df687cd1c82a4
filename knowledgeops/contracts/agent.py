"""AGENT_TASK's contract: payload, per-step requests / results, checkpoint, update, result.

The transcript (messages, tool calls, tool results, tokens) lives in the output store, keyed by
the task id; what crosses Temporal are message ids, tool call ids and names, counts and token
usage. A follow-up message arrives through the `send_message` update and its reply is named by
message id (the starter reads the text from the transcript).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.contracts.base import ActivityRef, Checkpoint
from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN

ToolName = Literal["search_knowledge_base", "read_document", "list_documents", "start_task"]
ALL_TOOLS: tuple[ToolName, ...] = (
    "search_knowledge_base",
    "read_document",
    "list_documents",
    "start_task",
)
DocumentId = Annotated[str, Field(pattern=DOCUMENT_ID_PATTERN)]
SEND_MESSAGE_UPDATE = "send_message"
# A message as long as an instruction; anything larger belongs in a document.
MAX_MESSAGE_CHARS = 8000
# Child tasks one agent task may start: each costs a workflow and, usually, model tokens.
MAX_CHILD_TASKS = 20


class AgentState(BaseModel):
    """What a run hands to the next when it continues as new: counters, never messages."""

    next_message: int = Field(default=0, ge=0)
    steps: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    turns: int = Field(default=0, ge=0)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    children: list[str] = Field(default_factory=list, max_length=MAX_CHILD_TASKS)
    last_reply: int | None = None


class AgentTaskPayload(BaseModel):
    """An instruction for the knowledge-base agent, its tools and its budgets."""

    instruction: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    tools: list[ToolName] = Field(default_factory=lambda: list(ALL_TOOLS), min_length=1)
    # A step is one model call (with the tool calls it asks for); the budgets hold for the
    # whole task, follow-up messages included.
    max_steps: int = Field(default=12, ge=1, le=100)
    max_tokens: int = Field(default=200_000, ge=1_000, le=5_000_000)
    # Search and read only these documents (empty: every document the task's owner may see).
    document_ids: list[DocumentId] = Field(default_factory=list, max_length=100)
    # After a reply, wait this long for a follow-up message (send_message update); 0: the task
    # ends with its first answer.
    follow_up_minutes: int = Field(default=0, ge=0, le=7 * 24 * 60)
    # Continue as new (a fresh history, the same transcript) once the history has this many
    # events while waiting, or when Temporal suggests it.
    history_limit: int = Field(default=4000, ge=50, le=40_000)
    # Set by the task itself when it continues as new; a caller leaves it empty.
    state: AgentState | None = None


class AgentCheckpoint(Checkpoint):
    """Heartbeat of a model or tool call: steps `done` of `total` (max_steps) and the transcript
    message the call writes; a retry finding that message stored reuses it instead of calling
    again."""

    message_id: int = Field(default=0, ge=0)


class OpenRequest(BaseModel):
    task_id: str
    instruction: str
    tools: list[ToolName]
    continued: bool


class OpenResult(BaseModel):
    # Messages the transcript holds (the system prompt and the instruction on a first run).
    messages: int


class ModelCallRequest(BaseModel):
    task_id: str
    step: int = Field(ge=1)
    max_steps: int
    reply_id: int = Field(ge=0)
    tools: list[ToolName]
    # A follow-up message stored before the call (its id and text): from the update.
    user_message_id: int | None = None
    user_message: str | None = Field(default=None, max_length=MAX_MESSAGE_CHARS)
    owner: str | None = None


class ToolCallRef(BaseModel):
    call_id: str
    name: str


class ModelCallResult(BaseModel):
    reply_id: int
    tool_calls: list[ToolCallRef]
    usage: TokenUsage
    answer_chars: int = 0
    finish_reason: str | None = None
    reused: bool = False  # stored by an earlier attempt: no model call was made


class ToolRequest(BaseModel):
    task_id: str
    step: int
    max_steps: int
    reply_id: int
    call_id: str
    result_id: int
    tools: list[ToolName]
    document_ids: list[str] = Field(default_factory=list)
    owner: str | None = None
    children_started: int = 0


class ChildStart(BaseModel):
    """A task the model asked to start: validated, not yet started (the workflow starts it)."""

    task_type: str
    payload: dict[str, Any]


class ToolResult(BaseModel):
    result_id: int
    ok: bool
    chars: int = 0
    child: ChildStart | None = None


class RecordToolResult(BaseModel):
    """The outcome of a child task, written as the tool call's result (a task result is small
    by design)."""

    task_id: str
    reply_id: int
    call_id: str
    result_id: int
    ok: bool
    content: dict[str, Any]


class CloseRequest(BaseModel):
    task_id: str
    status: Literal["completed", "failed", "cancelled"]
    error: str | None = None


class AgentMessage(BaseModel):
    """A follow-up message (the `send_message` update's argument)."""

    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)


class AgentReply(BaseModel):
    """The update's answer: where the reply is (message ids), never its text."""

    message_id: int
    reply_id: int
    steps: int
    usage: TokenUsage


class AgentResult(BaseModel):
    task_id: str
    output_url: str
    answer_message_id: int | None
    steps: int
    tool_calls: int
    turns: int
    usage: TokenUsage
    children: list[str]


OPEN_TRANSCRIPT: ActivityRef[OpenRequest, OpenResult] = ActivityRef(
    "agent_open_transcript", OpenRequest, OpenResult
)
CALL_MODEL: ActivityRef[ModelCallRequest, ModelCallResult] = ActivityRef(
    "agent_call_model", ModelCallRequest, ModelCallResult
)
RUN_TOOL: ActivityRef[ToolRequest, ToolResult] = ActivityRef(
    "agent_run_tool", ToolRequest, ToolResult
)
RECORD_TOOL_RESULT: ActivityRef[RecordToolResult, int] = ActivityRef(
    "agent_record_tool_result", RecordToolResult, int
)
CLOSE_TRANSCRIPT: ActivityRef[CloseRequest, int] = ActivityRef(
    "agent_close_transcript", CloseRequest, int
)
