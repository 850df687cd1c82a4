"""The chat model client against the fake OpenAI-compatible server, over real HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from knowledgeops.config.settings import Settings
from knowledgeops.errors import ChatAnswerInvalidError, ChatRejectedError, ChatUnavailableError
from knowledgeops.models.chat import (
    STRUCTURED_ATTEMPTS,
    ChatModel,
    TokenUsage,
    image_part,
    make_chat_model,
)
from tests.helpers.environment import HermeticSettings, chat_settings
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import ChatAnswer, ChatFault, last_user_text


class Verdict(BaseModel):
    verdict: str = Field(pattern="^(correct|partly|wrong)$")
    missing: list[str]
    citations: list[int]


GOOD = {"verdict": "partly", "missing": ["the base case"], "citations": [2, 5]}
ASK = [{"role": "user", "content": "Is recursion explained correctly here?"}]


@pytest.fixture
def base(tmp_path: Path) -> Settings:
    # No Temporal here: the client alone.
    return HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path / "data")


@pytest.fixture
async def chat(base: Settings, fake_openai: FakeOpenAI) -> AsyncIterator[ChatModel]:
    model = make_chat_model(chat_settings(base, fake_openai))
    assert model is not None
    yield model
    await model.aclose()


async def test_structured_answer_uses_strict_json_schema(
    chat: ChatModel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.chat_script = lambda body: GOOD
    answer, usage = await chat.structured(ASK, Verdict)
    assert answer == Verdict.model_validate(GOOD)
    body = fake_openai.chat_requests[0]
    assert body["model"] == "fake-chat"
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert set(fmt["json_schema"]["schema"]["required"]) == {"verdict", "missing", "citations"}
    # The fake counts words: 5 in the prompt, the answer's JSON text for completion.
    assert usage == TokenUsage(
        prompt_tokens=5, completion_tokens=len(json.dumps(GOOD).split()), calls=1
    )


async def test_malformed_answer_is_retried_with_the_problem(
    chat: ChatModel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.chat_script = lambda body: GOOD
    fake_openai.chat_faults.append(ChatFault(malformed=True))
    answer, usage = await chat.structured(ASK, Verdict)
    assert answer.verdict == "partly"
    assert fake_openai.chat_calls == 2 and usage.calls == 2
    # The second request shows the model its broken answer and what is wrong with it.
    retry = fake_openai.chat_requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": '{"answer": "unterminated'}
    assert "not JSON" in retry[-1]["content"]


async def test_always_invalid_answer_fails_non_retryably(
    chat: ChatModel, fake_openai: FakeOpenAI
) -> None:
    # Valid JSON, wrong shape: validation, not parsing, rejects it.
    fake_openai.chat_script = lambda body: {"verdict": "maybe", "missing": [], "citations": []}
    with pytest.raises(ChatAnswerInvalidError) as info:
        await chat.structured(ASK, Verdict)
    assert fake_openai.chat_calls == STRUCTURED_ATTEMPTS
    message = str(info.value)
    assert "no valid Verdict" in message and "verdict" in message and "CHAT_MODEL" in message
    # The tokens the failed answers cost are not lost.
    assert isinstance(info.value.usage, TokenUsage) and info.value.usage.calls == 3


async def test_429_honours_retry_after_and_heartbeats_while_waiting(
    chat: ChatModel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.chat_faults.extend([ChatFault(429, retry_after=1.5), ChatFault(500)])
    waits = 0

    async def on_wait() -> None:
        nonlocal waits
        waits += 1

    started = time.monotonic()
    reply = await chat.reply(ASK, on_wait=on_wait)
    elapsed = time.monotonic() - started
    assert reply.content == f"fake answer to: {ASK[0]['content']}"
    assert fake_openai.chat_calls == 3 and waits == 2
    # 1.5 s asked for by the 429, then the first backoff step (0.75-1.25 s) after the 500:
    # at least that long (a loaded machine only adds to it).
    assert elapsed >= 2.2, elapsed
    # Only the answered call counts as used tokens.
    assert reply.usage.calls == 1


async def test_transient_failures_are_bounded(base: Settings, fake_openai: FakeOpenAI) -> None:
    model = make_chat_model(chat_settings(base, fake_openai, openai_max_retries=1))
    assert model is not None
    fake_openai.chat_faults.extend([ChatFault(503, retry_after=0.1)] * 3)
    try:
        with pytest.raises(ChatUnavailableError, match="after 2 tries"):
            await model.reply(ASK)
    finally:
        await model.aclose()
    assert fake_openai.chat_calls == 2


@pytest.mark.parametrize(
    ("overrides", "status", "hint"),
    [
        ({"openai_api_key": "wrong"}, 401, "check OPENAI_API_KEY"),
        ({"chat_model": "no-such-model"}, 404, "check CHAT_MODEL and OPENAI_BASE_URL"),
    ],
)
async def test_rejected_requests_fail_at_once(
    base: Settings, fake_openai: FakeOpenAI, overrides: dict[str, Any], status: int, hint: str
) -> None:
    model = make_chat_model(chat_settings(base, fake_openai, **overrides))
    assert model is not None
    try:
        with pytest.raises(ChatRejectedError) as info:
            await model.structured(ASK, Verdict)
    finally:
        await model.aclose()
    assert fake_openai.chat_calls == 1
    assert str(info.value).startswith(f"chat provider answered {status}") and hint in str(
        info.value
    )


async def test_server_without_structured_outputs_gets_json_mode(
    chat: ChatModel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.chat_faults.append(
        ChatFault(400, message="response_format type json_schema is not supported")
    )
    fake_openai.chat_script = lambda body: GOOD
    answer, _ = await chat.structured(ASK, Verdict)
    await chat.structured(ASK, Verdict)
    assert answer.citations == [2, 5]
    modes = [b["response_format"]["type"] for b in fake_openai.chat_requests]
    # Asked once with a schema, then JSON mode for this and later calls, schema in the prompt.
    assert modes == ["json_schema", "json_object", "json_object"]
    assert '"citations"' in fake_openai.chat_requests[1]["messages"][-1]["content"]


async def test_tool_calls_and_usage_are_summed(chat: ChatModel, fake_openai: FakeOpenAI) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "search",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            },
        }
    ]
    fake_openai.chat_script = lambda body: (
        ChatAnswer(tool_calls=[("search", {"query": last_user_text(body)})])
        if body.get("tools")
        else ChatAnswer(content="done", prompt_tokens=100, completion_tokens=7)
    )
    first = await chat.reply(ASK, tools=tools)
    assert fake_openai.chat_requests[0]["tools"] == tools
    assert first.finish_reason == "tool_calls" and first.content is None
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("search", {"query": ASK[0]["content"]})
    ]
    second = await chat.reply(ASK)
    assert second.usage == TokenUsage(prompt_tokens=100, completion_tokens=7, calls=1)
    total = first.usage.add(second.usage)
    assert total.calls == 2
    assert total.prompt_tokens == first.usage.prompt_tokens + 100 > 100
    assert total.completion_tokens == first.usage.completion_tokens + 7


async def test_vision_model_receives_the_image(base: Settings, fake_openai: FakeOpenAI) -> None:
    assert make_chat_model(base) is None and make_chat_model(base, vision=True) is None
    model = make_chat_model(chat_settings(base, fake_openai), vision=True)
    assert model is not None and model.model_id == "fake-vision"
    png = b"\x89PNG\r\n\x1a\n" + bytes(64)
    content = [{"type": "text", "text": "What is shown?"}, image_part(png, "image/png")]
    try:
        reply = await model.reply([{"role": "user", "content": content}])
    finally:
        await model.aclose()
    assert reply.content == "fake answer to: What is shown?"
    assert fake_openai.chat_images == ["image/png"]
    assert fake_openai.chat_requests[0]["model"] == "fake-vision"
