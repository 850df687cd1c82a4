"""Sending a follow-up message to a running agent task and reading its reply.

The message goes through the workflow's `send_message` update, which answers when the reply is
written, naming it by message id; the reply's text is read here from the stored transcript
(the same output GET /v1/tasks/{id}/output serves), so it never travels through Temporal.
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from knowledgeops.agent.transcript import TranscriptStore
from knowledgeops.contracts.agent import SEND_MESSAGE_UPDATE, AgentMessage, AgentReply
from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.errors import validation_text
from knowledgeops.files.outputs import OutputStore
from knowledgeops.registry.task_types import TASK_TYPE_SEARCH_ATTRIBUTE, TaskType
from knowledgeops.storage.store import Store
from starter.services.task_models import PayloadInvalidError, TaskFinishedError
from starter.services.tasks import TaskQueueService


class MessageRefusedError(RuntimeError):
    """The task takes no message now (not an agent task, ended, or too many waiting)."""


class AgentAnswer(BaseModel):
    task_id: str
    message_id: int
    reply_id: int
    reply: str | None
    steps: int
    usage: TokenUsage


async def send_message(
    service: TaskQueueService, storage: Store, task_id: str, text: str
) -> AgentAnswer:
    """Send `text` to agent task `task_id` and wait for the reply (as long as the turn takes);
    the reply's full text is read from the transcript in `storage`."""
    try:
        message = AgentMessage(text=text)
    except ValidationError as e:
        raise PayloadInvalidError(f"Invalid message: {validation_text(e.errors())}") from None
    handle = await service.handle(task_id)
    desc = await handle.describe()
    task_type = desc.typed_search_attributes.get(TASK_TYPE_SEARCH_ATTRIBUTE)
    if task_type != TaskType.AGENT_TASK.value:
        raise MessageRefusedError(
            f"task {task_id} is a {task_type} task; only AGENT_TASK takes messages"
        )
    try:
        reply = await handle.execute_update(SEND_MESSAGE_UPDATE, message, result_type=AgentReply)
    except WorkflowUpdateFailedError as e:
        cause = e.cause
        raise MessageRefusedError(str(getattr(cause, "message", None) or cause or e)) from None
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise TaskFinishedError(f"task {task_id} has finished; it takes no messages") from None
        raise
    # This process's store of outputs (STORAGE_URL's, else the data folder), where the worker
    # wrote the reply.
    transcript = await TranscriptStore(OutputStore(storage)).load(task_id)
    stored = transcript.get(reply.reply_id) if transcript else None
    return AgentAnswer(
        task_id=task_id,
        message_id=reply.message_id,
        reply_id=reply.reply_id,
        reply=stored.content if stored else None,
        steps=reply.steps,
        usage=reply.usage,
    )
