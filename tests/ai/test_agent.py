"""AGENT_TASK end to end on the real dev server, the model scripted on the fake OpenAI server:
search and answer; a SIGKILL of the worker between steps repeats no finished model call; a
cancel during a slow tool call stops it; the step limit ends a looping model; follow-up
messages through the update (over HTTP), a child task, continue-as-new; no model -> failure."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.events import EventType
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from knowledgeops.files.outputs import OutputStore
from knowledgeops.storage.local import LocalStore
from tests.helpers.environment import (
    EXAMPLES,
    Env,
    chat_settings,
    openai_settings,
    running_api,
    running_env,
    start_worker_process,
    stop_process,
)
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import ChatAnswer, last_user_text
from tests.helpers.temporal import activity_starts
from tests.helpers.waiting import eventually

WAIT = 90.0
DOC = EXAMPLES / "spaced-repetition.txt"


def _tool_results_in_turn(body: dict[str, Any]) -> int:
    """Tool results since the last user message: which step of the turn this request is."""
    count = 0
    for m in reversed(body["messages"]):
        if m["role"] == "user":
            break
        count += m["role"] == "tool"
    return count


def search_read_answer(document_id: str) -> Any:
    """Step 1 searches, step 2 reads the document's first chunks, step 3 answers."""

    def script(body: dict[str, Any]) -> Any:
        step = _tool_results_in_turn(body)
        if step == 0:
            return ChatAnswer(tool_calls=[("search_knowledge_base", {"query": "review intervals"})])
        if step == 1:
            return ChatAnswer(
                tool_calls=[("read_document", {"document_id": document_id, "count": 2})]
            )
        return f"Reviews are spaced out over growing intervals ({document_id}, 0)."

    return script


async def _import(env: Env, path: Path = DOC) -> str:
    ref = await env.documents.import_file(path)
    st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "completed", st.last_error
    return ref.document_id


async def _transcript(settings: Settings, task_id: str) -> dict[str, Any]:
    return await OutputStore(LocalStore(settings.data_dir)).load(task_id)


async def test_agent_searches_reads_and_answers(
    settings: Settings, fake_openai: FakeOpenAI
) -> None:
    cfg = chat_settings(settings, fake_openai)
    async with running_env(cfg) as env:
        doc = await _import(env)
        fake_openai.chat_script = search_read_answer(doc)
        ref = await env.service.enqueue(
            "AGENT_TASK", {"instruction": "How should reviews be spaced?"}
        )
        st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "completed", st.last_error
    result = st.result or {}
    assert (result["steps"], result["tool_calls"], result["turns"]) == (3, 2, 1)
    assert result["usage"]["calls"] == 3 and result["usage"]["prompt_tokens"] > 0
    assert result["output_url"] == f"/v1/tasks/{ref.task_id}/output"
    assert (st.progress.done, st.progress.total, st.progress.unit) == (3, 3, "steps")

    assert fake_openai.chat_calls == 3
    first = fake_openai.chat_requests[0]
    offered = {t["function"]["name"] for t in first["tools"]}
    assert offered == {"search_knowledge_base", "read_document", "list_documents", "start_task"}
    # The model saw the search hits (from this document) and then the chunks it read.
    last = fake_openai.chat_requests[2]["messages"]
    search, read = [m["content"] for m in last if m["role"] == "tool"]
    assert f'"document_id": "{doc}"' in search and "chunk_index" in search
    assert '"total_chunks"' in read and '"index": 0' in read

    t = await _transcript(cfg, ref.task_id)
    assert t["status"] == "completed" and t["steps"] == 3 and t["tool_calls"] == 2
    assert [m["role"] for m in t["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant",
    ]  # fmt: skip
    answer = t["messages"][-1]
    assert answer["id"] == result["answer_message_id"] and doc in answer["content"]
    assert t["usage"] == result["usage"]


async def test_worker_killed_between_steps_repeats_no_model_call(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    # Embeddings on the fake server too, so the search tool can be made slow: the worker is
    # killed while it runs, after the first model call finished.
    cfg = chat_settings(
        openai_settings(settings, fake_openai, openai_timeout_seconds=30.0), fake_openai
    )
    log = tmp_path / "worker.log"
    first = start_worker_process(cfg, log)
    second = None
    try:
        async with running_env(cfg, worker=False) as env:
            doc = await _import(env)
            fake_openai.chat_script = search_read_answer(doc)
            # The search tool's query embedding waits at the fake's gate: the kill lands in it.
            embeds_before = fake_openai.requests
            fake_openai.hold = lambda kind, n: kind == "embeddings" and n > embeds_before
            ref = await env.service.enqueue("AGENT_TASK", {"instruction": "Spacing?"})
            await eventually(
                lambda: fake_openai.held, bool, timeout=60, what="the tool's held embedding"
            )
            assert fake_openai.chat_calls == 1
            first.send_signal(signal.SIGKILL)
            first.wait()
            fake_openai.release()
            second = start_worker_process(cfg, log)
            st = await env.service.wait(ref.task_id, timeout=WAIT)
            attempts = [
                (a.activity, a.attempt) for a in await activity_starts(env.client, ref.task_id)
            ]
        assert st.status == "completed", st.last_error
        assert stop_process(second) == 0
    finally:
        for p in (first, second):
            if p is not None:
                stop_process(p)
    # Each model call was made once: three steps, three requests, each one step further.
    assert fake_openai.chat_calls == 3, [len(b["messages"]) for b in fake_openai.chat_requests]
    assert [len(b["messages"]) for b in fake_openai.chat_requests] == [2, 4, 6]
    assert (st.result or {})["usage"]["calls"] == 3
    # The kill landed in the search tool: its second attempt finished the run (started by the
    # tool's heartbeat timeout: its start-to-close clock is longer than the wait above).
    assert ("agent_run_tool", 2) in attempts, attempts
    assert [a for a in attempts if a[0] == "agent_call_model"] == [("agent_call_model", 1)] * 3
    t = await _transcript(cfg, ref.task_id)
    assert [m["role"] for m in t["messages"]].count("tool") == 2


async def test_cancel_during_a_slow_tool_call_stops_it(
    settings: Settings, fake_openai: FakeOpenAI
) -> None:
    cfg = chat_settings(
        openai_settings(settings, fake_openai, openai_timeout_seconds=60.0), fake_openai
    )
    async with running_env(cfg) as env:
        doc = await _import(env)
        fake_openai.chat_script = search_read_answer(doc)
        # The search tool's query embedding hangs at the fake's gate until released.
        embeds_before = fake_openai.requests
        fake_openai.hold = lambda kind, n: kind == "embeddings" and n > embeds_before
        ref = await env.service.enqueue("AGENT_TASK", {"instruction": "Spacing?"})
        await eventually(lambda: fake_openai.held, bool, what="the tool's held embedding")
        await env.service.cancel(ref.task_id, reason="test")
        st = await env.service.wait(ref.task_id, timeout=WAIT)
        # The tool stopped while its request was still held: the cancel did not wait for it
        # (the tool heartbeats every second: it learns of the cancel then).
        assert fake_openai.held == 1
        fake_openai.release()
        events = await EventStore(env.db).after(task_id=ref.task_id)
    assert st.status == "cancelled"
    assert fake_openai.chat_calls == 1
    t = await _transcript(cfg, ref.task_id)
    assert t["status"] == "cancelled"
    assert "tool" not in [m["role"] for m in t["messages"]]
    assert events[-1].event_type == EventType.TASK_CANCELLED
    assert events[-1].data.get("transcript_closed") is True


async def test_step_limit_ends_a_looping_model(settings: Settings, fake_openai: FakeOpenAI) -> None:
    cfg = chat_settings(settings, fake_openai)
    fake_openai.chat_script = lambda body: ChatAnswer(tool_calls=[("list_documents", {})])
    async with running_env(cfg) as env:
        ref = await env.service.enqueue(
            "AGENT_TASK", {"instruction": "Loop forever.", "max_steps": 3}
        )
        st = await env.service.wait(ref.task_id, timeout=WAIT)
        # The token budget: each call reports 600 tokens, so the third call is not made.
        fake_openai.chat_script = lambda body: ChatAnswer(
            tool_calls=[("list_documents", {})], prompt_tokens=600, completion_tokens=0
        )
        ref2 = await env.service.enqueue(
            "AGENT_TASK", {"instruction": "Loop forever.", "max_tokens": 1000}
        )
        st2 = await env.service.wait(ref2.task_id, timeout=WAIT)
    assert st2.status == "failed"
    assert st2.last_error and "TokenBudgetExceeded" in st2.last_error
    assert "max_tokens" in st2.last_error
    assert fake_openai.chat_calls == 3 + 2
    assert st.status == "failed"
    assert st.last_error and "StepLimitReached" in st.last_error and "max_steps" in st.last_error
    t = await _transcript(cfg, ref.task_id)
    assert (t["status"], t["steps"], t["tool_calls"]) == ("failed", 3, 3)
    assert "StepLimitReached" in (t["error"] or "")


async def test_without_a_chat_model_it_fails_at_once(settings: Settings) -> None:
    async with running_env(settings) as env:
        ref = await env.service.enqueue("AGENT_TASK", {"instruction": "Anything?"})
        st = await env.service.wait(ref.task_id, timeout=WAIT)
        attempts = [(a.activity, a.attempt) for a in await activity_starts(env.client, ref.task_id)]
    assert st.status == "failed"
    assert st.last_error and "ChatModelMissing" in st.last_error and "CHAT_MODEL" in st.last_error
    assert attempts == [("agent_open_transcript", 1)]  # not retried: failed at once


async def test_follow_up_messages_child_task_and_continue_as_new(
    settings: Settings, fake_openai: FakeOpenAI
) -> None:
    def script(body: dict[str, Any]) -> Any:
        text = last_user_text(body)
        if "report" in text and _tool_results_in_turn(body) == 0:
            return ChatAnswer(
                tool_calls=[
                    ("start_task", {"task_type": "REPORT_GENERATE", "payload": {"period_days": 1}})
                ]
            )
        if "report" in text:
            return "The report is ready."
        return f"echo: {text}"

    fake_openai.chat_script = script
    cfg = chat_settings(settings, fake_openai)
    async with running_api(cfg) as api:
        r = await api.http.post(
            "/v1/tasks",
            json={
                "type": "AGENT_TASK",
                "payload": {"instruction": "hello", "follow_up_minutes": 10, "history_limit": 50},
            },
        )
        assert r.status_code == 202, r.text
        task_id = r.json()["task_id"]
        r = await api.http.post(f"/v1/tasks/{task_id}/messages", json={"text": "make a report"})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["reply"] == "The report is ready."
        assert answer["steps"] == 3  # hello, start_task, the answer
        r = await api.http.get(f"/v1/tasks/{task_id}/output")
        assert r.status_code == 200
        t = r.json()
        child = next(m for m in t["messages"] if m["role"] == "tool")
        assert '"status": "completed"' in child["content"], child["content"]
        child_id = child["content"].split('"task_id": "')[1].split('"')[0]
        r = await api.http.get(f"/v1/tasks/{child_id}")
        assert r.status_code == 200 and r.json()["status"] == "completed", r.text
        assert r.json()["task_type"] == "REPORT_GENERATE"

        # A later message: answered by a continued run (the history passed history_limit).
        r = await api.http.post(f"/v1/tasks/{task_id}/messages", json={"text": "thanks"})
        assert r.status_code == 200, r.text
        assert r.json()["reply"] == "echo: thanks"
        r = await api.http.post(f"/v1/tasks/{task_id}/messages", json={"text": ""})
        assert r.status_code == 422
        r = await api.http.post(f"/v1/tasks/{child_id}/messages", json={"text": "hi"})
        assert r.status_code == 409 and r.json()["code"] == "message_refused"

        r = await api.http.post(f"/v1/tasks/{task_id}/cancel", json={"reason": "done"})
        assert r.status_code == 202, r.text
        body = await api.wait_task(task_id)
        assert body["status"] == "cancelled"
        r = await api.http.post(f"/v1/tasks/{task_id}/messages", json={"text": "still there?"})
        assert r.status_code == 409, r.text
        from knowledgeops.runtime.temporal import connect

        client = await connect(cfg)
        runs = [w.run_id async for w in client.list_workflows(f'WorkflowId = "{task_id}"')]
    assert len(runs) >= 2, runs  # continued as new at least once
    db = await Database.open(cfg)
    try:
        events = [e.event_type for e in await EventStore(db).after(task_id=task_id)]
    finally:
        await db.close()
    # One task across its runs: started once, ended once.
    assert events == [EventType.TASK_ENQUEUED, EventType.TASK_STARTED, EventType.TASK_CANCELLED]
    t = await _transcript(cfg, task_id)
    assert t["status"] == "cancelled"
    users = [m["content"] for m in t["messages"] if m["role"] == "user"]
    assert users == ["hello", "make a report", "thanks"]
    assert fake_openai.chat_calls == 4
