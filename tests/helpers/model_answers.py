"""What the fake OpenAI-compatible server (fake_openai.py) answers and how tests script it:
faults, scripted chat answers, reading a request (its texts, tool results, requested schema),
a schema's minimal instance, and the completion and rerank bodies it sends.

Chat (`/v1/chat/completions`, models `fake-chat` and `fake-vision`; its own faults and
counters, so chat traffic never changes what the embedding tests see). How to script it:

    fake.chat_script = lambda body: ...   # body: the request JSON (messages, tools, ...)

The script returns the answer: a `str` (the message content), a `dict` / `list` (sent as JSON
text: what a structured call validates), or a `ChatAnswer` (content, tool calls, finish
reason, token counts). Helpers for scripts: `last_user_text(body)`, `all_text(body)`,
`response_schema(body)` (the json_schema a structured call asked for, or None),
`example_of(schema)` (a minimal valid instance of a schema), `tool_results(body)` (the
`tool` messages so far). Without a script the default answers: an instance of the requested
schema (`example_of`), `{}` in JSON mode, else "fake answer to: <last user text>". A script
that raises makes the server answer 500 (the test sees the error in `chat_errors`).

    fake.chat_script = lambda body: ChatAnswer(tool_calls=[("search", {"query": "x"})])

Faults: `fake.chat_faults.append(ChatFault(429, retry_after=1.5))` (the next chat request),
`fake.chat_fail_on[3] = ChatFault(500)` (the 3rd chat request, 1-based),
`ChatFault(malformed=True)` (200 with content that is not JSON), `ChatFault(hang_seconds=5)`.
Held requests: `fake.hold = lambda kind, n: kind == "chat" and n >= 2` keeps the second and
later chat requests ("embeddings" for embedding requests) waiting until `fake.release()`;
`fake.held` counts those waiting, `fake.in_flight` every request being answered.
Records: `fake.chat_requests` (every request body, faulted ones included), `fake.chat_calls`
(their count), `fake.chat_answered` (bodies that got a 200 answer), `fake.chat_images` (the
MIME type of every image part received, in order). Every answer carries usage: prompt tokens
= words in the messages, completion tokens = words in the answer (or the `ChatAnswer`'s).

Rerank (`/rerank`, `/v1/rerank`, `/v2/rerank`; its own faults and counters too). Each route
takes both request bodies: Cohere/Jina `{"model", "query", "documents", "top_n"}` and TEI
`{"query", "texts"}`. `/v1` and `/v2` answer like Cohere/Jina
(`{"results": [{"index", "relevance_score"}], ...}`, best first, at most `top_n`), `/rerank`
like TEI (`[{"index", "score"}]`, best first); `fake.rerank_shape = "cohere"` / `"tei"`
answers every route that way (a vLLM or Infinity `/rerank`). `fake.rerank_url("/v2/rerank")`
is a route's URL. A model, when sent, must be in `rerank_models` (else 404); `/v2` requires
one (Cohere v2 does). The Bearer key is checked unless `rerank_auth = False` (a TEI without
`--api-key`). Default score: the fraction of the query's distinct words found in the
document (case-insensitive), so a test can predict the order:

    fake.rerank_script = lambda query, documents: [...]   # one score per document

A script may return a dict {index: score} instead, to answer for those documents only. A
script that raises makes the server answer 500 (the test sees the error in `rerank_errors`).
Faults: `fake.rerank_faults.append(Fault(503))`, `Fault(hang_seconds=5)`, like embeddings'.
Records: `fake.rerank_requests` (every body, faulted ones included), `fake.rerank_calls`
(their count), `fake.rerank_authorization` (each request's Authorization header or None).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any, cast


@dataclass
class Fault:
    status: int = 500
    retry_after: float | None = None
    hang_seconds: float = 0.0  # > client timeout: the client sees a timeout


@dataclass
class ChatFault:
    status: int = 500
    retry_after: float | None = None
    hang_seconds: float = 0.0
    # A 200 answer whose content is not JSON (a structured call must retry it).
    malformed: bool = False
    # The error message, e.g. what a server without structured outputs says.
    message: str = "injected fault"


@dataclass
class ChatAnswer:
    content: str | None = None
    # (name, arguments) pairs or full {"id", "name", "arguments"} dicts; arguments a dict or
    # JSON text.
    tool_calls: list[Any] = field(default_factory=list)
    finish_reason: str | None = None  # default: "tool_calls" with tool calls, else "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def default_rerank_scores(query: str, documents: list[str]) -> list[float]:
    """The fraction of the query's distinct words (case-insensitive) found in each document."""
    wanted = set(re.findall(r"\w+", query.lower()))
    scores = []
    for doc in documents:
        found = wanted & set(re.findall(r"\w+", doc.lower()))
        scores.append(len(found) / len(wanted) if wanted else 0.0)
    return scores


def error_body(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "code": code}}


# -- chat helpers (also for scripts) -----------------------------------------------------------
def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p["text"] for p in content if isinstance(p, dict) and p.get("text"))
    return ""


def last_user_text(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user":
            return text_of(m.get("content"))
    return ""


def all_text(body: dict[str, Any]) -> str:
    return "\n".join(text_of(m.get("content")) for m in body.get("messages", []))


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body.get("messages", []) if m.get("role") == "tool"]


def response_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        schema: dict[str, Any] = fmt["json_schema"]["schema"]
        return schema
    return None


def example_of(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A minimal instance of a JSON schema (the shapes pydantic and strict mode produce)."""
    root = root or schema
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return example_of(target, root)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return example_of(schema[key][0], root)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0]
    if kind == "object":
        props = schema.get("properties", {})
        return {k: example_of(v, root) for k, v in props.items()}
    if kind == "array":
        return [example_of(schema["items"], root) for _ in range(schema.get("minItems", 0))]
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "x" * max(1, schema.get("minLength", 1))


def default_chat_answer(body: dict[str, Any]) -> ChatAnswer | str | dict[str, Any] | list[Any]:
    schema = response_schema(body)
    if schema is not None:
        return cast(dict[str, Any], example_of(schema))
    if (body.get("response_format") or {}).get("type") == "json_object":
        return {}
    return f"fake answer to: {last_user_text(body)[:200]}"


def as_answer(answer: ChatAnswer | str | dict[str, Any] | list[Any]) -> ChatAnswer:
    if isinstance(answer, ChatAnswer):
        return answer
    if isinstance(answer, str):
        return ChatAnswer(content=answer)
    return ChatAnswer(content=json.dumps(answer))


def image_types(messages: list[Any]) -> list[str]:
    """The MIME types of the image parts; ValueError for one a real server would refuse."""
    found: list[str] = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        for part in content if isinstance(content, list) else []:
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            url = str((part.get("image_url") or {}).get("url", ""))
            head, sep, data = url.partition(";base64,")
            if not url.startswith("data:") or not sep:
                raise ValueError("image_url must be a base64 data URL")
            try:
                base64.b64decode(data, validate=True)
            except binascii.Error:
                raise ValueError("image data URL is not valid base64") from None
            found.append(head.removeprefix("data:"))
    return found


def word_count(text: str) -> int:
    return len(text.split())


def completion_body(body: dict[str, Any], answer: ChatAnswer, n: int) -> dict[str, Any]:
    calls: list[dict[str, Any]] = []
    for i, call in enumerate(answer.tool_calls):
        if isinstance(call, tuple):
            call = {"name": call[0], "arguments": call[1]}
        args = call["arguments"]
        calls.append(
            {
                "id": call.get("id") or f"call_{n}_{i}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if calls:
        message["tool_calls"] = calls
    prompt = answer.prompt_tokens
    if prompt is None:
        prompt = word_count(all_text(body))
    completion = answer.completion_tokens
    if completion is None:
        completion = word_count(answer.content or "") + sum(
            word_count(c["function"]["arguments"]) for c in calls
        )
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": answer.finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
