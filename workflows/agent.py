"""AGENT_TASK: a durable tool-using agent over the knowledge base.

A turn is a loop of steps: one model call (an activity), then each tool call it asked for (an
activity each, or a child workflow for `start_task`), until the model answers without tools.
A crash repeats at most the call in flight. The workflow holds message ids, tool call ids and
counters; the transcript itself is in the output store, written by the activities.

The instruction is the first turn. With `follow_up_minutes`, the task then waits for messages
(the `send_message` update, answered with the reply's message id) and continues as new when its
history grows while it waits, handing on its counters (`AgentState`), not the transcript. The
step limit and the token budget hold for the whole task: reaching one fails it, non-retryably.
"""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.exceptions import (
    ApplicationError,
    ChildWorkflowError,
    FailureError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.agent import (
        CALL_MODEL,
        CLOSE_TRANSCRIPT,
        OPEN_TRANSCRIPT,
        RECORD_TOOL_RESULT,
        RUN_TOOL,
        SEND_MESSAGE_UPDATE,
        AgentMessage,
        AgentReply,
        AgentResult,
        AgentState,
        AgentTaskPayload,
        ChildStart,
        CloseRequest,
        ModelCallRequest,
        OpenRequest,
        RecordToolResult,
        ToolCallRef,
        ToolRequest,
    )
    from knowledgeops.contracts.base import OWNER_MEMO
    from knowledgeops.errors import failure_text
    from knowledgeops.registry.task_types import REGISTRY, TaskType

# Messages that may wait for their turn; more are refused until a reply comes.
MAX_WAITING_MESSAGES = 5
# The first run writes the system prompt (0) and the instruction (1).
FIRST_FREE_MESSAGE_ID = 2


@workflow.defn(name="AgentTask")
class AgentTaskWorkflow(TaskWorkflow[AgentTaskPayload, AgentResult]):
    task_type = TaskType.AGENT_TASK

    @workflow.init
    def __init__(self, payload: AgentTaskPayload) -> None:
        super().__init__()
        # Set here, not in run: an update can arrive before the run method starts.
        self._payload = payload
        self._state = (payload.state or AgentState(next_message=FIRST_FREE_MESSAGE_ID)).model_copy(
            deep=True
        )
        self._accepting = payload.follow_up_minutes > 0
        self._waiting: deque[tuple[int, str]] = deque()
        self._in_turn: int | None = None
        self._outcomes: dict[int, AgentReply | str] = {}
        self._ending: Literal["failed", "cancelled"] = "failed"
        self._error: str | None = None

    @workflow.run
    async def run(self, payload: AgentTaskPayload) -> AgentResult:
        # A continued run (continue-as-new) records only its outcome: see TaskWorkflow.run_task.
        return await self.run_task(payload)

    def event_data(self, payload: AgentTaskPayload) -> dict[str, Any]:
        return {"output_id": workflow.info().workflow_id}

    # -- the conversation ------------------------------------------------------------------

    async def steps(self, payload: AgentTaskPayload) -> AgentResult:
        task_id = workflow.info().workflow_id
        continued = payload.state is not None
        try:
            self.stage("starting", total=payload.max_steps, done=self._state.steps)
            await self.activity(
                OPEN_TRANSCRIPT,
                OpenRequest(
                    task_id=task_id,
                    instruction=payload.instruction,
                    tools=payload.tools,
                    continued=continued,
                ),
            )
            # From here on a transcript exists: a failure or cancel marks how it ended.
            self.on_failure(
                "transcript_closed",
                lambda: self.activity(
                    CLOSE_TRANSCRIPT,
                    CloseRequest(task_id=task_id, status=self._ending, error=self._error),
                ),
            )
            if not continued:
                self._state.last_reply = await self._turn(None)
                self._state.turns += 1
            await self._converse()
        except (asyncio.CancelledError, FailureError) as e:
            self._accepting = False
            if is_cancelled_exception(e):
                self._ending, self._error = "cancelled", None
            else:
                self._ending, self._error = "failed", failure_text(e)
            self._refuse_waiting(f"the agent task ended ({self._ending}): {self._error or ''}")
            # Let every waiting update answer before the run closes.
            await workflow.wait_condition(workflow.all_handlers_finished)
            raise
        # Done: the steps it took are the whole (max_steps was a budget, not a target).
        self.stage("closing", total=self._state.steps, done=self._state.steps)
        await self.activity(CLOSE_TRANSCRIPT, CloseRequest(task_id=task_id, status="completed"))
        return AgentResult(
            task_id=task_id,
            output_url=f"/v1/tasks/{task_id}/output",
            answer_message_id=self._state.last_reply,
            steps=self._state.steps,
            tool_calls=self._state.tool_calls,
            turns=self._state.turns,
            usage=self._state.usage,
            children=self._state.children,
        )

    async def _converse(self) -> None:
        """Answer waiting messages; wait for more up to `follow_up_minutes`; continue as new
        when the history has grown."""
        idle = timedelta(minutes=self._payload.follow_up_minutes)
        while True:
            while self._waiting:
                message_id, text = self._waiting.popleft()
                self._in_turn = message_id
                reply_id = await self._turn((message_id, text))
                self._state.turns += 1
                self._state.last_reply = reply_id
                self._outcomes[message_id] = AgentReply(
                    message_id=message_id,
                    reply_id=reply_id,
                    steps=self._state.steps,
                    usage=self._state.usage,
                )
                self._in_turn = None
            if not self._accepting:
                return
            if self._history_full():
                await self._continue_as_new()
                continue
            self.stage("waiting for a message", done=self._state.steps)
            try:
                await workflow.wait_condition(lambda: bool(self._waiting), timeout=idle)
            except TimeoutError:
                # Nothing came: stop taking messages, answer any that raced the timer.
                self._accepting = False

    async def _turn(self, user: tuple[int, str] | None) -> int:
        """Steps until the model answers without tools; the answer's message id."""
        p, task_id = self._payload, workflow.info().workflow_id
        owner = workflow.memo_value(OWNER_MEMO, None, type_hint=str)
        while True:
            if self._state.steps >= p.max_steps:
                raise ApplicationError(
                    f"the agent used all {p.max_steps} steps (max_steps) without a final "
                    f"answer; see what it did at /v1/tasks/{task_id}/output, then start it "
                    "again with a higher max_steps (up to 100) or a narrower instruction",
                    type="StepLimitReached",
                    non_retryable=True,
                )
            if self._state.usage.total_tokens >= p.max_tokens:
                raise ApplicationError(
                    f"the agent used {self._state.usage.total_tokens} tokens, its budget is "
                    f"{p.max_tokens} (max_tokens); see /v1/tasks/{task_id}/output, then start "
                    "it again with a higher max_tokens or a narrower instruction",
                    type="TokenBudgetExceeded",
                    non_retryable=True,
                )
            step = self._state.steps + 1
            reply_id = self._next_id()
            self.stage(f"step {step}: model", done=self._state.steps)
            out = await self.activity(
                CALL_MODEL,
                ModelCallRequest(
                    task_id=task_id,
                    step=step,
                    max_steps=p.max_steps,
                    reply_id=reply_id,
                    tools=p.tools,
                    user_message_id=user[0] if user else None,
                    user_message=user[1] if user else None,
                    owner=owner,
                ),
            )
            user = None  # stored with the first step of the turn
            self._state.steps = step
            self._state.usage = self._state.usage.add(out.usage)
            if not out.tool_calls:
                return reply_id
            for call in out.tool_calls:
                await self._tool(step, reply_id, call, owner)

    async def _tool(self, step: int, reply_id: int, call: ToolCallRef, owner: str | None) -> None:
        p = self._payload
        result_id = self._next_id()
        self._state.tool_calls += 1
        self.stage(f"step {step}: {call.name}", done=step)
        out = await self.activity(
            RUN_TOOL,
            ToolRequest(
                task_id=workflow.info().workflow_id,
                step=step,
                max_steps=p.max_steps,
                reply_id=reply_id,
                call_id=call.call_id,
                result_id=result_id,
                tools=p.tools,
                document_ids=p.document_ids,
                owner=owner,
                children_started=len(self._state.children),
            ),
        )
        if out.child is not None:
            await self._child(reply_id, call.call_id, result_id, out.child, owner)

    async def _child(
        self, reply_id: int, call_id: str, result_id: int, child: ChildStart, owner: str | None
    ) -> None:
        """Start the task as a child workflow the way the service starts tasks (prefixed id
        named after its type, TaskType attribute, the type's queue and timeout) and record
        its outcome as the tool's result. Cancelling the agent cancels the child."""
        info = workflow.info()
        spec = REGISTRY[TaskType(child.task_type)]
        own_name = info.workflow_id.removeprefix(self.task_id_for(""))
        suffix = f"{own_name}-{len(self._state.children) + 1}"
        child_id = self.child_task_id(spec.task_type, suffix)
        self._state.children.append(child_id)
        self.stage(f"waiting for task {child_id}")
        content: dict[str, Any] = {"task_id": child_id, "task_type": spec.task_type.value}
        ok = False
        try:
            result = await self.child_task(
                spec.task_type,
                child.payload,
                dict,
                suffix=suffix,
                owner=owner,
                requested_by=f"agent:{info.workflow_id}",
            )
            content |= {"status": "completed", "result": result}
            ok = True
        except ChildWorkflowError as e:
            if is_cancelled_exception(e):
                raise  # this task was cancelled (or the child was): stop here
            content |= {"status": "failed", "error": failure_text(e)}
        except WorkflowAlreadyStartedError:
            content |= {"status": "not started", "error": f"task {child_id} is already running"}
        await self.activity(
            RECORD_TOOL_RESULT,
            RecordToolResult(
                task_id=info.workflow_id,
                reply_id=reply_id,
                call_id=call_id,
                result_id=result_id,
                ok=ok,
                content=content,
            ),
        )

    def _next_id(self) -> int:
        self._state.next_message += 1
        return self._state.next_message - 1

    def _history_full(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._payload.history_limit
        )

    async def _continue_as_new(self) -> None:
        """Hand the counters to a new run (same task id, same transcript), once every update
        has been answered; returns instead if a message arrived meanwhile."""
        await workflow.wait_condition(
            lambda: workflow.all_handlers_finished() or bool(self._waiting)
        )
        if self._waiting:
            return
        workflow.continue_as_new(self._payload.model_copy(update={"state": self._state}))

    def _refuse_waiting(self, reason: str) -> None:
        for message_id in [m for m, _ in self._waiting] + (
            [self._in_turn] if self._in_turn is not None else []
        ):
            self._outcomes[message_id] = reason
        self._waiting.clear()

    # -- messages --------------------------------------------------------------------------

    @workflow.update(name=SEND_MESSAGE_UPDATE)
    async def send_message(self, message: AgentMessage) -> AgentReply:
        message_id = self._next_id()
        self._waiting.append((message_id, message.text))
        await workflow.wait_condition(lambda: message_id in self._outcomes)
        outcome = self._outcomes.pop(message_id)
        if isinstance(outcome, str):
            raise ApplicationError(outcome, type="AgentTaskEnded", non_retryable=True)
        return outcome

    @send_message.validator
    def _check_message(self, message: AgentMessage) -> None:
        if not self._accepting:
            raise ValueError(
                "this agent task takes no messages: it has ended, or was started with "
                "follow_up_minutes 0; start a new AGENT_TASK"
            )
        if len(self._waiting) >= MAX_WAITING_MESSAGES:
            raise ValueError(
                f"{MAX_WAITING_MESSAGES} messages are already waiting; send again after a reply"
            )
        if not message.text.strip():
            raise ValueError("the message is empty")
