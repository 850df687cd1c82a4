"""Activities of AGENT_TASK: open the transcript, one model call, one tool call, record a child
task's outcome, close the transcript.

Each model call and each tool call is its own activity, so a crash repeats at most the call in
flight. Each writes its message (by the id the workflow gave it) into the stored transcript
before it returns; a retry that finds its message already stored returns it without calling the
model or the tool again. Model and tool calls heartbeat every second (and so learn of a cancel
within about a second), carrying the step and the message id as their checkpoint.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import activity

from activities.support import Heartbeater
from knowledgeops.agent.tools import SYSTEM_PROMPT, Scope, ToolError, Tools, arguments, schemas
from knowledgeops.agent.transcript import (
    Transcript,
    TranscriptStore,
    cut,
    message,
    new_transcript,
)
from knowledgeops.contracts.agent import (
    CALL_MODEL,
    CLOSE_TRANSCRIPT,
    MAX_CHILD_TASKS,
    OPEN_TRANSCRIPT,
    RECORD_TOOL_RESULT,
    RUN_TOOL,
    AgentCheckpoint,
    CloseRequest,
    ModelCallRequest,
    ModelCallResult,
    OpenRequest,
    OpenResult,
    RecordToolResult,
    ToolCallRef,
    ToolRequest,
    ToolResult,
)
from knowledgeops.errors import ChatRejectedError, EmbeddingRejectedError, bad_input
from knowledgeops.files.outputs import OutputStore
from knowledgeops.models.chat import ChatModel, TokenUsage
from knowledgeops.runtime.resources import Resources

# Message ids of a first run: the system prompt, then the instruction.
SYSTEM_ID, INSTRUCTION_ID = 0, 1


class AgentActivities:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.transcripts = TranscriptStore(OutputStore(resources.storage))
        self.tools = Tools(resources)

    def _chat(self) -> ChatModel:
        if self.resources.chat is None:
            raise bad_input(
                "ChatModelMissing",
                "AGENT_TASK needs a chat model and none is configured: set CHAT_MODEL (with "
                "OPENAI_BASE_URL / OPENAI_API_KEY) for the worker, restart it, then start or "
                "retry the task",
            )
        return self.resources.chat

    async def _load(self, task_id: str) -> Transcript:
        transcript = await self.transcripts.load(task_id)
        if transcript is None:
            raise bad_input(
                "TranscriptMissing",
                f"the transcript of agent task {task_id} is gone from the output store "
                f"({self.resources.storage.describe()}); start a new agent task",
            )
        return transcript

    @activity.defn(name=OPEN_TRANSCRIPT.name)
    async def agent_open_transcript(self, req: OpenRequest) -> OpenResult:
        """A first run writes a fresh transcript (a manual retry starts the conversation over);
        a continued run goes on with the stored one."""
        chat = self._chat()
        if req.continued:
            transcript = await self._load(req.task_id)
            transcript.status, transcript.error = "running", None
        else:
            transcript = new_transcript(req.task_id, chat.model_id)
            transcript.put(message(SYSTEM_ID, "system", SYSTEM_PROMPT))
            transcript.put(message(INSTRUCTION_ID, "user", req.instruction))
        await self.transcripts.save(transcript)
        return OpenResult(messages=len(transcript.messages))

    @activity.defn(name=CALL_MODEL.name)
    async def agent_call_model(self, req: ModelCallRequest) -> ModelCallResult:
        chat = self._chat()
        transcript = await self._load(req.task_id)
        stored = transcript.get(req.reply_id)
        if stored is not None and stored.role == "assistant":
            # Written by an attempt whose completion never reached Temporal: not paid twice.
            return _result(req.reply_id, stored.tool_calls, stored, reused=True)
        if req.user_message_id is not None and transcript.get(req.user_message_id) is None:
            transcript.put(message(req.user_message_id, "user", req.user_message))
            await self.transcripts.save(transcript)
        checkpoint = AgentCheckpoint(
            done=req.step - 1, total=req.max_steps, message_id=req.reply_id
        ).model_dump()
        tools = schemas(req.tools, req.owner)
        async with Heartbeater(checkpoint) as hb:

            async def waiting() -> None:
                hb.beat()

            try:
                reply = await chat.reply(transcript.chat_messages(), tools=tools, on_wait=waiting)
            except ChatRejectedError as e:
                raise bad_input("ChatRejected", str(e)) from None
        answer = message(
            req.reply_id,
            "assistant",
            reply.content,
            tool_calls=[c.model_dump() for c in reply.tool_calls],
            step=req.step,
            usage=reply.usage.model_dump(),
        )
        transcript.put(answer)
        await self.transcripts.save(transcript)
        result = _result(req.reply_id, reply.tool_calls, answer, reused=False)
        result.finish_reason = reply.finish_reason
        return result

    @activity.defn(name=RUN_TOOL.name)
    async def agent_run_tool(self, req: ToolRequest) -> ToolResult:
        transcript = await self._load(req.task_id)
        stored = transcript.get(req.result_id)
        if stored is not None:
            return ToolResult(
                result_id=req.result_id, ok=not stored.error, chars=len(stored.content or "")
            )
        call = transcript.tool_call(req.reply_id, req.call_id)
        if call is None:
            raise bad_input(
                "ToolCallMissing",
                f"tool call {req.call_id} of message {req.reply_id} is not in the transcript of "
                f"{req.task_id}; start a new agent task",
            )
        checkpoint = AgentCheckpoint(
            done=req.step, total=req.max_steps, message_id=req.result_id
        ).model_dump()
        scope = Scope(req.document_ids or None, req.owner)
        async with Heartbeater(checkpoint) as hb:

            async def waiting() -> None:
                hb.beat()

            try:
                if call.name not in req.tools:
                    raise ToolError(
                        f"there is no tool {call.name!r}; use one of {', '.join(req.tools)}"
                    )
                args = arguments(call.arguments)
                if call.name == "start_task":
                    if req.children_started >= MAX_CHILD_TASKS:
                        raise ToolError(
                            f"this task has started as many tasks as it may ({MAX_CHILD_TASKS})"
                        )
                    child = self.tools.start_task(args, req.owner)
                    # Started by the workflow (a child workflow); its outcome is recorded then.
                    return ToolResult(result_id=req.result_id, ok=True, child=child)
                content = await self._run(call.name, args, scope, waiting)
                ok = True
            except ToolError as e:
                content, ok = {"error": str(e)}, False
            except EmbeddingRejectedError as e:
                raise bad_input("EmbeddingRejected", str(e)) from None
        text = cut(json.dumps(content, ensure_ascii=False, default=str))
        transcript.put(
            message(
                req.result_id,
                "tool",
                text,
                tool_call_id=call.id,
                name=call.name,
                error=not ok,
            )
        )
        await self.transcripts.save(transcript)
        return ToolResult(result_id=req.result_id, ok=ok, chars=len(text))

    async def _run(self, name: str, args: dict[str, Any], scope: Scope, waiting: Any) -> Any:
        if name == "search_knowledge_base":
            return await self.tools.search_knowledge_base(args, scope, waiting)
        if name == "read_document":
            return await self.tools.read_document(args, scope)
        if name == "list_documents":
            return await self.tools.list_documents(args, scope)
        raise ToolError(f"there is no tool {name!r}")

    @activity.defn(name=RECORD_TOOL_RESULT.name)
    async def agent_record_tool_result(self, req: RecordToolResult) -> int:
        transcript = await self._load(req.task_id)
        call = transcript.tool_call(req.reply_id, req.call_id)
        text = cut(json.dumps(req.content, ensure_ascii=False, default=str))
        transcript.put(
            message(
                req.result_id,
                "tool",
                text,
                tool_call_id=req.call_id,
                name=call.name if call else "start_task",
                error=not req.ok,
            )
        )
        await self.transcripts.save(transcript)
        return len(text)

    @activity.defn(name=CLOSE_TRANSCRIPT.name)
    async def agent_close_transcript(self, req: CloseRequest) -> int:
        """Mark how the task ended (a reader of a running transcript sees "running")."""
        transcript = await self.transcripts.load(req.task_id)
        if transcript is None:
            return 0  # failed before it was written (e.g. no chat model): nothing to mark
        transcript.status, transcript.error = req.status, req.error
        await self.transcripts.save(transcript)
        return len(transcript.messages)


def _result(reply_id: int, calls: Any, answer: Any, *, reused: bool) -> ModelCallResult:
    return ModelCallResult(
        reply_id=reply_id,
        tool_calls=[ToolCallRef(call_id=c.id, name=c.name) for c in calls],
        usage=answer.usage or TokenUsage(),
        answer_chars=len(answer.content or ""),
        reused=reused,
    )
