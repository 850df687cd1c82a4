"""AI_ANALYSIS end to end on the real dev server: a document diagnosis with a (fake) chat model
over several chunk groups and without any model, a learner's answer checked against the
retrieved chunks, retries that do not repeat finished groups, malformed answers, and the
output over real HTTP."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from knowledgeops.config.settings import Settings
from knowledgeops.files.outputs import OutputStore
from knowledgeops.models.chat import STRUCTURED_ATTEMPTS
from knowledgeops.registry.task_types import TaskType
from knowledgeops.storage.local import LocalStore
from starter.services.task_models import PayloadInvalidError, TaskStatus
from tests.helpers.ai import cited_chunks, group_requests, import_lesson
from tests.helpers.environment import Env, chat_settings, running_api, running_env
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import ChatFault, last_user_text, response_schema

WAIT = 120.0
QUESTION = "What does the forgetting curve describe?"
ANSWER = "It shows that memories fade over time."
MISSING = ["the decline is steep at first", "reviews slow the decline"]


async def analyze(env: Env, document_id: str, **payload: Any) -> TaskStatus:
    ref = await env.service.enqueue(TaskType.AI_ANALYSIS, {"document_id": document_id, **payload})
    return await env.service.wait(ref.task_id, timeout=WAIT)


def tutor(body: dict[str, Any]) -> dict[str, Any]:
    """The fake model: a diagnosis or a verdict citing the passages it was given, plus one
    chunk it was not given (which must be dropped)."""
    schema = response_schema(body)
    assert schema is not None
    chunks = cited_chunks(body) or [0]
    if "verdict" in schema["properties"]:
        return {
            "verdict": "partly",
            "feedback": "Right about fading; say how fast and what slows it.",
            "missing": MISSING,
            "misconceptions": [],
            "citations": [*chunks[:2], 9999],
        }
    return {
        "key_concepts": [
            {"name": f"concept {n}", "explanation": "e", "chunk": n} for n in chunks[:3]
        ],
        "difficulty": "intermediate",
        "difficulty_reason": "some terms are assumed",
        "prerequisites": ["basic memory terms"],
        "gaps": [
            {"description": "SM-2 is not explained", "chunk": chunks[-1]},
            {"description": "invented", "chunk": 9999},
        ],
    }


async def test_diagnosis_with_the_model_map_reduces_and_resumes(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = tutor
    s = chat_settings(settings, fake_openai, chat_input_tokens=700, openai_max_retries=0)
    async with running_env(s) as env:
        document_id = await import_lesson(env, tmp_path)
        before = fake_openai.chat_calls
        # The 3rd request fails: the attempt stops after two stored groups, Temporal retries.
        fake_openai.chat_fail_on[before + 3] = ChatFault(500)
        st = await analyze(env, document_id)
    assert st.status == "completed", st.last_error
    result = st.result
    assert result is not None
    groups = result["groups"]
    assert groups > 2 and result["method"] == "model:fake-chat"
    asked = group_requests(fake_openai)
    assert len(asked) == groups == len(set(asked)), asked
    # Each group once, one merge, and the one failed request.
    assert fake_openai.chat_calls - before == groups + 2
    assert result["usage"]["calls"] == groups + 1
    assert result["difficulty"] == "intermediate"
    out = await OutputStore(LocalStore(s.data_dir)).load(st.task_id)
    diagnosis = out["diagnosis"]
    assert result["concepts"] == len(diagnosis["key_concepts"]) > 0
    assert [g["description"] for g in diagnosis["gaps"]] == ["SM-2 is not explained"]
    assert all(0 <= c["chunk"] < result["chunks"] for c in diagnosis["key_concepts"])
    assert "## Gaps" in out["markdown"] and out["usage"] == result["usage"]
    merge = fake_openai.chat_answered[-1]
    assert "diagnoses of consecutive parts" in last_user_text(merge)
    assert not (s.outputs_dir / "work" / st.task_id).exists()


async def test_answer_is_checked_against_the_retrieved_chunks(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = tutor
    s = chat_settings(settings, fake_openai)
    async with running_env(s) as env:
        document_id = await import_lesson(env, tmp_path)
        before = fake_openai.chat_calls
        st = await analyze(env, document_id, mode="answer", question=QUESTION, answer=ANSWER)
        # The model keeps answering something that is not a verdict: fails, not retried.
        fake_openai.chat_script = lambda body: {"verdict": "maybe"}
        bad = await analyze(env, document_id, mode="answer", question=QUESTION, answer=ANSWER)
    assert st.status == "completed", st.last_error
    result = st.result
    assert result is not None
    assert (result["verdict"], result["method"]) == ("partly", "model:fake-chat")
    assert result["usage"]["calls"] == 1 and result["usage"]["prompt_tokens"] > 0
    asked = last_user_text(fake_openai.chat_answered[before])
    assert QUESTION in asked and ANSWER in asked
    out = await OutputStore(LocalStore(s.data_dir)).load(st.task_id)
    sources = {x["chunk"]: x["text"] for x in out["sources"]}
    # The invented citation is gone; the rest are chunks the model was shown.
    assert result["citations"] and set(result["citations"]) <= set(sources)
    assert 9999 not in result["citations"]
    # Retrieval found the passage that answers the question.
    assert any("forgetting curve describes" in " ".join(t.split()) for t in sources.values())
    assert out["answer_check"]["missing"] == MISSING
    assert bad.status == "failed" and (bad.last_error or "").startswith("ChatAnswerInvalid")
    assert fake_openai.chat_calls - before == 1 + STRUCTURED_ATTEMPTS


async def test_without_a_model(settings: Settings, tmp_path: Path) -> None:
    async with running_env(settings) as env:
        document_id = await import_lesson(env, tmp_path)
        st = await analyze(env, document_id)
        refused = await analyze(env, document_id, mode="answer", question=QUESTION, answer=ANSWER)
        with pytest.raises(PayloadInvalidError, match="needs the learner's answer"):
            await env.service.enqueue(
                TaskType.AI_ANALYSIS,
                {"document_id": document_id, "mode": "answer", "question": QUESTION},
            )
    assert st.status == "completed", st.last_error
    result = st.result
    assert result is not None
    assert result["method"] == "local:key-terms+readability" and result["usage"]["calls"] == 0
    out = await OutputStore(LocalStore(settings.data_dir)).load(st.task_id)
    names = {c["name"].lower() for c in out["diagnosis"]["key_concepts"]}
    assert {"forgetting curve", "active recall", "review interval"} <= names, names
    grade = out["readability"]["grade"]
    # The grade's band, as the product documents it (under 9, under 13, above).
    band = "introductory" if grade < 9 else "intermediate" if grade < 13 else "advanced"
    assert result["difficulty"] == band
    assert f"Flesch-Kincaid grade {grade}" in out["diagnosis"]["difficulty_reason"]
    assert out["diagnosis"]["gaps"] == [] and "CHAT_MODEL" in out["notes"][0]
    assert refused.status == "failed"
    error = refused.last_error or ""
    assert error.startswith("ChatModelMissing: checking a learner's answer needs a chat model")
    assert "CHAT_MODEL" in error and refused.attempts <= 1


async def test_output_over_http(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = tutor
    s = chat_settings(settings, fake_openai)
    async with running_env(s) as env:
        document_id = await import_lesson(env, tmp_path)
    async with running_api(s) as api:
        payload = {"document_id": document_id, "mode": "answer", "question": QUESTION}
        r = await api.http.post(
            "/v1/tasks", json={"type": "AI_ANALYSIS", "payload": {**payload, "answer": ANSWER}}
        )
        assert r.status_code == 202, r.text
        task = await api.wait_task(r.json()["task_id"])
        assert task["status"] == "completed", task
        assert task["result"]["verdict"] == "partly" and task["result"]["usage"]["calls"] == 1
        out = await api.http.get(task["result"]["output_url"])
        assert out.status_code == 200, out.text
        body = out.json()
        assert body["answer_check"]["verdict"] == "partly" and body["question"] == QUESTION
        assert re.search(r"\*\*Verdict:\*\* partly", body["markdown"])
        r = await api.http.post("/v1/tasks", json={"type": "AI_ANALYSIS", "payload": payload})
        assert r.status_code == 422 and "needs the learner's answer" in r.text, r.text
