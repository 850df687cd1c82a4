"""Chat and vision models on any OpenAI-compatible endpoint (OpenAI, Azure, Ollama, vLLM...).

One small client used by the AI activities: plain replies (optionally with tools) and
structured answers validated into pydantic models. Like the embedder, it retries 429 / 5xx /
timeouts itself with bounded backoff that honours Retry-After (calling `on_wait` so activities
heartbeat while they wait), refuses at once what the server rejected (naming the setting to
check), and reports the tokens every call used.

Structured answers use structured outputs (`response_format` json_schema, strict); a server
that rejects that is asked in JSON mode (`json_object`, the schema in the prompt) from then
on. An answer that does not validate is sent back to the model with the validation error, a
bounded number of times, then `ChatAnswerInvalidError` (not retryable).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.ai import TokenUsage as TokenUsage
from knowledgeops.errors import (
    ChatAnswerInvalidError,
    ChatRejectedError,
    ChatUnavailableError,
    validation_text,
)
from knowledgeops.models.embedding import OnWait
from knowledgeops.models.retry_after import retry_after_seconds
from knowledgeops.observability import metrics

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

# Answers one structured call may get before it gives up (the first one included).
STRUCTURED_ATTEMPTS = 3
MAX_RETRY_AFTER_SECONDS = 120.0
MAX_BACKOFF_SECONDS = 30.0


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it


class ChatReply(BaseModel):
    content: str | None
    tool_calls: list[ToolCall]
    usage: TokenUsage
    finish_reason: str | None


def image_part(image: bytes, mime: str) -> dict[str, Any]:
    """An image as a message content part (a data URL: the endpoint needs no access to us)."""
    data = base64.b64encode(image).decode()
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


class ChatModel:
    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None,
        timeout: float,
        max_retries: int,
        setting: str = "CHAT_MODEL",
    ) -> None:
        from openai import AsyncOpenAI

        # The client's own retries are off: ours honour Retry-After and heartbeat while waiting.
        self._client = AsyncOpenAI(
            api_key=api_key, base_url=base_url or None, timeout=timeout, max_retries=0
        )
        self.model_id = model
        self._max_retries = max_retries
        self._setting = setting
        # Cleared when the server rejects json_schema response formats: JSON mode from then on.
        self._json_schema = True

    async def aclose(self) -> None:
        await self._client.close()

    async def reply(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_wait: OnWait = None,
    ) -> ChatReply:
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        return await self._complete(messages, extra, on_wait)

    async def structured(
        self, messages: list[dict[str, Any]], output: type[T], *, on_wait: OnWait = None
    ) -> tuple[T, TokenUsage]:
        from openai.lib import type_to_response_format_param

        schema_format = cast(dict[str, Any], type_to_response_format_param(output))
        schema = json.dumps(schema_format["json_schema"]["schema"])
        conversation = list(messages)
        usage = TokenUsage()
        problem = ""
        for _ in range(STRUCTURED_ATTEMPTS):
            reply = await self._structured_reply(conversation, schema_format, schema, on_wait)
            usage = usage.add(reply.usage)
            problem = _problem_with(reply)
            if not problem:
                try:
                    return output.model_validate_json(reply.content or ""), usage
                except ValidationError as e:
                    problem = _invalid_json_text(e)
            log.warning("model %s gave an invalid structured answer: %s", self.model_id, problem)
            # Shown its own answer and what is wrong with it, a model usually corrects it.
            conversation += [
                {"role": "assistant", "content": reply.content or ""},
                {
                    "role": "user",
                    "content": f"That answer is not valid: {problem}. Answer again with only "
                    f"a JSON object that matches this JSON schema: {schema}",
                },
            ]
        raise ChatAnswerInvalidError(
            f"model {self.model_id!r} gave no valid {output.__name__} in {STRUCTURED_ATTEMPTS} "
            f"answers (last problem: {problem}); try a more capable model in {self._setting}",
            usage,
        )

    async def _structured_reply(
        self,
        messages: list[dict[str, Any]],
        schema_format: dict[str, Any],
        schema: str,
        on_wait: OnWait,
    ) -> ChatReply:
        if self._json_schema:
            try:
                return await self._complete(messages, {"response_format": schema_format}, on_wait)
            except ChatRejectedError as e:
                if "response_format" not in str(e) and "json_schema" not in str(e):
                    raise
                log.warning("%s rejects json_schema answers; using JSON mode: %s", self.model_id, e)
                self._json_schema = False
        # JSON mode only promises JSON (and OpenAI wants the word in the prompt): the schema
        # goes into the conversation and the answer is validated here.
        guide = {
            "role": "system",
            "content": f"Answer with only a JSON object that matches this JSON schema: {schema}",
        }
        return await self._complete(
            [*messages, guide], {"response_format": {"type": "json_object"}}, on_wait
        )

    async def _complete(
        self, messages: list[dict[str, Any]], extra: dict[str, Any], on_wait: OnWait
    ) -> ChatReply:
        import openai

        delay = 1.0
        last: Exception | None = None
        for attempt in range(self._max_retries + 1):
            try:
                resp = await self._client.chat.completions.create(
                    model=self.model_id, messages=cast(Any, messages), **extra
                )
                metrics.MODEL_CALLS.labels(self.model_id, "ok").inc()
                return _reply_of(resp)
            except (
                openai.BadRequestError,
                openai.AuthenticationError,
                openai.PermissionDeniedError,
                openai.NotFoundError,
            ) as e:
                metrics.MODEL_CALLS.labels(self.model_id, "refused").inc()
                raise ChatRejectedError(self._rejection(e)) from None
            except openai.APIStatusError as e:
                metrics.MODEL_CALLS.labels(self.model_id, "error").inc()
                if e.status_code < 500 and e.status_code not in (408, 409, 429):
                    raise ChatRejectedError(self._rejection(e)) from None
                last = e
                wait = retry_after_seconds(e.response.headers)
            except (openai.APITimeoutError, openai.APIConnectionError) as e:
                metrics.MODEL_CALLS.labels(self.model_id, "error").inc()
                last, wait = e, None
            if attempt == self._max_retries:
                break
            wait = min(wait if wait is not None else delay, MAX_RETRY_AFTER_SECONDS)
            delay = min(delay * 2, MAX_BACKOFF_SECONDS) * (0.75 + random.random() / 2)
            log.warning("chat request failed (%s); retrying in %.1fs", last, wait)
            if on_wait is not None:
                await on_wait()
            await asyncio.sleep(wait)
        raise ChatUnavailableError(
            f"chat endpoint kept failing after {self._max_retries + 1} tries: {last}"
        )

    def _rejection(self, e: Any) -> str:
        hints = {
            400: "the request was invalid (prompt too long, or a feature the model lacks?)",
            401: "the API key was refused: check OPENAI_API_KEY",
            403: f"the API key may not use this model: check OPENAI_API_KEY / {self._setting}",
            404: f"model {self.model_id!r} or the endpoint was not found: check "
            f"{self._setting} and OPENAI_BASE_URL",
        }
        hint = hints.get(e.status_code, "the request was refused")
        return f"chat provider answered {e.status_code}: {hint}. Server said: {e.message}"


def _reply_of(resp: Any) -> ChatReply:
    if not getattr(resp, "choices", None):
        raise ChatUnavailableError("chat endpoint answered without any choice")
    choice = resp.choices[0]
    message = choice.message
    calls = [
        ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}")
        for c in (message.tool_calls or [])
        if getattr(c, "function", None) is not None
    ]
    u = resp.usage
    usage = TokenUsage(
        prompt_tokens=(u.prompt_tokens or 0) if u else 0,
        completion_tokens=(u.completion_tokens or 0) if u else 0,
        calls=1,
    )
    # A refusal (structured outputs) comes instead of content: reported as its own reason.
    finish = "refusal" if getattr(message, "refusal", None) else choice.finish_reason
    return ChatReply(content=message.content, tool_calls=calls, usage=usage, finish_reason=finish)


def _problem_with(reply: ChatReply) -> str:
    if reply.finish_reason == "refusal":
        return "the model refused to answer"
    if reply.finish_reason == "length":
        return "the answer was cut off at the output token limit"
    if not reply.content:
        return "the answer was empty"
    return ""


def _invalid_json_text(e: ValidationError) -> str:
    errors = e.errors()
    if errors and errors[0]["type"] == "json_invalid":
        return f"not JSON ({errors[0]['msg']})"
    return validation_text(errors)[:1000]


def make_chat_model(settings: Settings, *, vision: bool = False) -> ChatModel | None:
    """The configured chat (or vision) model, or None when its setting is empty."""
    setting = "VISION_MODEL" if vision else "CHAT_MODEL"
    model = settings.vision_model if vision else settings.chat_model
    if not model:
        return None
    if not settings.openai_api_key and not settings.openai_base_url:
        raise ValueError(f"{setting}={model!r} needs OPENAI_API_KEY (or OPENAI_BASE_URL)")
    return ChatModel(
        model=model,
        api_key=settings.openai_api_key or "no-key",
        base_url=settings.openai_base_url or None,
        timeout=settings.chat_timeout_seconds,
        max_retries=settings.openai_max_retries,
        setting=setting,
    )
