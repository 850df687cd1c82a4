"""Messages to a running agent task: POST /v1/tasks/{task_id}/messages answers with the reply."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from knowledgeops.contracts.agent import MAX_MESSAGE_CHARS
from starter.http.access import CallerDep, caller
from starter.http.errors import ERROR_RESPONSES, ApiError
from starter.http.runtime import RuntimeDep
from starter.http.tasks import visible_task
from starter.services.agent import AgentAnswer, MessageRefusedError, send_message

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, dependencies=[Depends(caller)])


class MessageRequest(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)


@router.post("/tasks/{task_id}/messages", response_model=AgentAnswer)
async def post_message(
    rt: RuntimeDep, who: CallerDep, task_id: str, body: MessageRequest
) -> AgentAnswer:
    """Send a follow-up message to an AGENT_TASK started with `follow_up_minutes`; answers
    when the agent has replied (the whole transcript: GET /v1/tasks/{task_id}/output). 409
    `message_refused` when the task takes no message now."""
    await visible_task(rt, who, task_id)
    try:
        return await send_message(rt.service, rt.resources.storage, task_id, body.text)
    except MessageRefusedError as e:
        raise ApiError(409, "message_refused", str(e)) from None
