"""GENERATE_ARTIFACT end to end on the real dev server: every kind with a (fake) chat model and
without any model, map-reduce over chunk groups that a retry does not pay for twice, a
malformed-answer fault, and the output over real HTTP."""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.review_cards import CLOZE_BLANK
from knowledgeops.files.outputs import OutputNotFoundError, OutputStore
from knowledgeops.models.chat import STRUCTURED_ATTEMPTS
from knowledgeops.registry.task_types import TaskType
from knowledgeops.storage.local import LocalStore
from starter.services.task_models import TaskStatus
from tests.helpers.ai import LESSON, WAIT, cited_chunks, group_requests, import_lesson
from tests.helpers.environment import (
    Env,
    chat_settings,
    running_api,
    running_env,
    start_worker_process,
    stop_process,
)
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import ChatFault, response_schema
from tests.helpers.waiting import eventually

KINDS = ("summary", "outline", "glossary", "quiz", "mindmap")


async def generate(env: Env, document_id: str, kind: str, **payload: Any) -> TaskStatus:
    ref = await env.service.enqueue(
        TaskType.GENERATE_ARTIFACT, {"document_id": document_id, "kind": kind, **payload}
    )
    return await env.service.wait(ref.task_id, timeout=WAIT)


def teacher(body: dict[str, Any]) -> dict[str, Any]:
    """The fake model: an answer of the requested shape citing the passages it was given (the
    quiz also cites a chunk that was not given, which must be dropped)."""
    schema = response_schema(body)
    assert schema is not None, "artifacts ask for structured answers"
    props = set(schema["properties"])
    chunks = cited_chunks(body) or [0]
    first = chunks[0]
    if props == {"summary", "key_points"}:
        points = [{"text": f"point about chunk {n}", "chunk": n} for n in chunks]
        return {"summary": f"summary of chunks {chunks}", "key_points": points}
    if props == {"items"}:
        return {"items": [{"title": f"Section at {n}", "level": 1, "chunk": n} for n in chunks]}
    if props == {"terms"}:
        return {"terms": [{"term": f"term {n}", "definition": "d", "chunk": n} for n in chunks]}
    if props == {"questions"}:
        made = [{"question": f"What is in chunk {n}?", "answer": "a", "chunk": n} for n in chunks]
        return {"questions": [*made, {"question": "Invented?", "answer": "x", "chunk": 9999}]}
    assert props == {"central_topic", "branches"}, props
    return {
        "central_topic": "Spaced repetition",
        "branches": [{"topic": f"Branch {first}", "points": ["p1", "p2"], "chunk": first}],
    }


async def test_every_kind_with_the_chat_model(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = teacher
    s = chat_settings(settings, fake_openai, chat_input_tokens=700)
    async with running_env(s) as env:
        document_id = await import_lesson(env, tmp_path)
        statuses = await asyncio.gather(*(generate(env, document_id, k) for k in KINDS))
    outputs = OutputStore(LocalStore(s.data_dir))
    for kind, st in zip(KINDS, statuses, strict=True):
        assert st.status == "completed", (kind, st.last_error)
        result = st.result
        assert result is not None
        groups, chunks = result["groups"], result["chunks"]
        assert 1 < groups < chunks, "the lesson must span several chunk groups"
        assert result["method"] == "model:fake-chat" and result["kind"] == kind
        # One call per group, plus the merge of a summary or mind map; tokens as the server said.
        calls = groups + (1 if kind in ("summary", "mindmap") else 0)
        assert result["usage"]["calls"] == calls, kind
        assert result["usage"]["prompt_tokens"] > 0 and result["usage"]["completion_tokens"] > 0
        assert st.progress.done == st.progress.total == groups
        out = await outputs.load(st.task_id)
        assert out["method"] == "model:fake-chat" and out["usage"] == result["usage"]
        assert out["title"] == "Spaced repetition" and out["markdown"]
        assert result["items"] > 0 and result["output_url"] == f"/v1/tasks/{st.task_id}/output"
    by_kind = {k: await outputs.load(st.task_id) for k, st in zip(KINDS, statuses, strict=True)}
    quiz = by_kind["quiz"]["quiz"]
    assert quiz and all(0 <= q["chunk"] < statuses[0].result["chunks"] for q in quiz)  # type: ignore[index]
    assert not any(q["question"] == "Invented?" for q in quiz)
    outline = by_kind["outline"]["outline"]
    assert [i["chunk"] for i in outline] == sorted({i["chunk"] for i in outline})
    assert by_kind["mindmap"]["mermaid"].startswith("mindmap\n  root((Spaced repetition))")
    assert len(fake_openai.chat_answered) == sum(st.result["usage"]["calls"] for st in statuses)  # type: ignore[index]
    # Nothing left behind in the work directory.
    assert not any((s.outputs_dir / "work").glob("*/*"))


async def test_a_retry_does_not_pay_for_finished_groups(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = teacher
    # No retries inside the client: the 500 fails the map activity's attempt after two stored
    # groups, and Temporal runs it again.
    s = chat_settings(settings, fake_openai, chat_input_tokens=700, openai_max_retries=0)
    async with running_env(s) as env:
        document_id = await import_lesson(env, tmp_path)
        before = fake_openai.chat_calls
        fake_openai.chat_fail_on[before + 3] = ChatFault(500)
        st = await generate(env, document_id, "glossary")
    assert st.status == "completed", st.last_error
    assert st.result is not None
    groups = st.result["groups"]
    asked = group_requests(fake_openai)
    assert len(asked) == groups and len(set(asked)) == groups, asked
    # Every group answered once, the failed request the only extra one.
    assert fake_openai.chat_calls - before == groups + 1
    assert st.result["usage"]["calls"] == groups


async def test_worker_killed_mid_map_pays_only_for_the_group_in_flight(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = teacher
    # A client timeout long enough that the held request is not given up and sent again.
    s = chat_settings(settings, fake_openai, chat_input_tokens=700, chat_timeout_seconds=120.0)
    log = tmp_path / "worker.log"
    first = start_worker_process(s, log)
    second = None
    try:
        async with running_env(s, worker=False) as env:
            document_id = await import_lesson(env, tmp_path)
            before = fake_openai.chat_calls
            # The first two groups are answered (and stored), the third group's request waits
            # at the fake's gate: the worker is killed with exactly that request in flight.
            fake_openai.hold = lambda kind, n: kind == "chat" and n >= before + 3
            ref = await env.service.enqueue(
                TaskType.GENERATE_ARTIFACT, {"document_id": document_id, "kind": "summary"}
            )
            work = s.outputs_dir / "work" / ref.task_id

            def state() -> tuple[int, int, list[str]]:
                assert first.poll() is None, f"the worker exited ({first.returncode})"
                stored = sorted(p.name for p in work.glob("group-*.json"))
                return fake_openai.held, fake_openai.chat_calls - before, stored

            try:
                await eventually(
                    state,
                    lambda st: st == (1, 3, ["group-0.json", "group-1.json"]),
                    timeout=60,
                    what="two groups stored, the third group's request held",
                )
            except AssertionError as e:  # with the worker's log
                raise AssertionError(f"{e}\n{log.read_text()[-3000:]}") from None
            first.send_signal(signal.SIGKILL)
            first.wait()
            # The dead worker's request is answered into the void (recorded by the fake) before
            # a new worker starts, so it is the first of the two requests for the third group.
            assert fake_openai.held == 1
            fake_openai.release()
            await eventually(lambda: fake_openai.in_flight, lambda n: n == 0, what="the answer")
            second = start_worker_process(s, log)
            st = await env.service.wait(ref.task_id, timeout=WAIT)
        assert st.status == "completed", st.last_error
        assert stop_process(second) == 0
    finally:
        for p in (first, second):
            if p is not None:
                stop_process(p)
    assert st.result is not None
    groups = st.result["groups"]
    asked = group_requests(fake_openai)
    # Finished groups were read back; only the group in flight at the kill was asked again.
    assert len(asked) == groups + 1 and len(set(asked)) == groups, asked
    assert asked[2] == asked[3], asked
    assert st.result["usage"]["calls"] == groups + 1  # the groups and the merge


async def test_cancel_during_the_map_removes_the_partial_results(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = teacher
    s = chat_settings(settings, fake_openai, chat_input_tokens=700)
    async with running_env(s) as env:
        document_id = await import_lesson(env, tmp_path)
        before = fake_openai.chat_calls
        # The first group's request is answered; the second waits at the fake's gate, so the
        # cancel (delivered with a heartbeat) lands while that request is in flight.
        fake_openai.hold = lambda kind, n: kind == "chat" and n >= before + 2
        ref = await env.service.enqueue(
            TaskType.GENERATE_ARTIFACT, {"document_id": document_id, "kind": "quiz"}
        )
        work = s.outputs_dir / "work" / ref.task_id
        await eventually(lambda: fake_openai.held, bool, timeout=60, what="a held request")
        assert any(work.iterdir()), "the first group is stored"
        await env.service.cancel(ref.task_id, reason="test")
        st = await env.service.wait(ref.task_id, timeout=WAIT)
        # Cancelled means stopped: the held request is the only one left, and its answer,
        # once released, is nobody's.
        assert fake_openai.in_flight == fake_openai.held == 1
        fake_openai.release()
        await eventually(lambda: fake_openai.in_flight, lambda n: n == 0, what="the answer")
    assert st.status == "cancelled"
    assert not work.exists()
    with pytest.raises(OutputNotFoundError):
        await OutputStore(LocalStore(s.data_dir)).load(ref.task_id)
    # No group after the held one was asked.
    assert fake_openai.chat_calls - before == 2


async def test_without_a_model_the_local_methods_answer(settings: Settings, tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text(re.sub(r"^#+ .*\n", "", LESSON, flags=re.M), encoding="utf-8")
    async with running_env(settings.model_copy(update={"chat_input_tokens": 700})) as env:
        document_id = await import_lesson(env, tmp_path)
        statuses = await asyncio.gather(*(generate(env, document_id, k) for k in KINDS))
        ref = await env.documents.import_file(plain)
        assert (await env.service.wait(ref.task_id, timeout=WAIT)).status == "completed"
        plain_outline = await generate(env, ref.document_id, "outline", max_items=3)
        plain_map = await generate(env, ref.document_id, "mindmap", max_items=4)
        no_model = await generate(env, document_id, "summary", method="model")
        missing = await generate(env, "no-such-document", "summary")
    outputs = OutputStore(LocalStore(settings.data_dir))
    out = {}
    for kind, st in zip(KINDS, statuses, strict=True):
        assert st.status == "completed", (kind, st.last_error)
        assert st.result is not None and st.result["usage"]["calls"] == 0
        assert st.result["items"] > 0, kind
        out[kind] = await outputs.load(st.task_id)
        assert out[kind]["method"] == st.result["method"]
    assert [statuses[i].result["method"] for i in range(5)] == [  # type: ignore[index]
        "local:sentence-centrality",
        "local:headings",
        "local:key-terms",
        "local:cloze",
        "local:headings",
    ]
    # Summary: verbatim sentences of the lesson, in document order.
    points = out["summary"]["summary"]["key_points"]
    assert all(" ".join(p["text"].split()) in " ".join(LESSON.split()) for p in points)
    assert [p["chunk"] for p in points] == sorted(p["chunk"] for p in points)
    # Outline: the lesson's own headings with their depth.
    titles = [(i["title"], i["level"]) for i in out["outline"]["outline"]]
    assert titles == [
        ("Spaced repetition", 1),
        ("The forgetting curve", 2),
        ("Active recall", 2),
        ("Review intervals", 2),
        ("Practical advice", 2),
    ]
    terms = {e["term"].lower() for e in out["glossary"]["glossary"]}
    assert {"forgetting curve", "active recall", "review interval"} <= terms, terms
    for q in out["quiz"]["quiz"]:
        assert q["question"].count(CLOZE_BLANK) == 1 and q["answer"].lower() in terms | {
            t.lower() for t in re.findall(r"[A-Za-z]+", LESSON)
        }
    mindmap = out["mindmap"]
    assert mindmap["mindmap"]["central_topic"] == "Spaced repetition"
    assert [b["topic"] for b in mindmap["mindmap"]["branches"]][:2] == [
        "The forgetting curve",
        "Active recall",
    ]
    assert mindmap["mermaid"].startswith("mindmap\n  root((Spaced repetition))\n    The forgetting")
    # A document without headings: leading sentences, and a mind map of key terms.
    assert plain_outline.result is not None and plain_map.result is not None
    assert plain_outline.result["method"] == "local:leading-sentences"
    assert plain_outline.result["items"] == 3
    assert plain_map.result["method"] == "local:key-terms"
    # Asked for a model where there is none, or a document that does not exist: fails at once.
    assert no_model.status == "failed" and "ChatModelMissing" in (no_model.last_error or "")
    assert "CHAT_MODEL" in (no_model.last_error or "")
    assert missing.status == "failed" and "DocumentNotFound" in (missing.last_error or "")


async def test_malformed_answers_are_retried_then_fail_readably(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = teacher
    s = chat_settings(settings, fake_openai)  # the whole lesson in one group
    async with running_env(s) as env:
        document_id = await import_lesson(env, tmp_path)
        fake_openai.chat_faults.append(ChatFault(malformed=True))
        once = await generate(env, document_id, "outline")
        fake_openai.chat_script = lambda body: "this is not JSON"
        before = fake_openai.chat_calls
        always = await generate(env, document_id, "quiz")
        calls = fake_openai.chat_calls - before
    assert once.status == "completed" and once.result is not None, once.last_error
    assert once.result["groups"] == 1 and once.result["usage"]["calls"] == 2
    assert always.status == "failed"
    assert (always.last_error or "").startswith("ChatAnswerInvalid: model 'fake-chat' gave no")
    # Not retried by Temporal: the client's bounded re-asks were the only calls.
    assert calls == STRUCTURED_ATTEMPTS
    assert not (s.outputs_dir / "work" / always.task_id).exists()


async def test_output_over_http(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = teacher
    s = chat_settings(settings, fake_openai)
    async with running_env(s) as env:
        document_id = await import_lesson(env, tmp_path)
    async with running_api(s) as api:
        r = await api.http.post(
            "/v1/tasks",
            json={
                "type": "GENERATE_ARTIFACT",
                "payload": {"document_id": document_id, "kind": "mindmap"},
            },
        )
        assert r.status_code == 202, r.text
        task = await api.wait_task(r.json()["task_id"])
        assert task["status"] == "completed", task
        assert task["result"]["usage"]["calls"] == 1
        out = await api.http.get(task["result"]["output_url"])
        assert out.status_code == 200, out.text
        body = out.json()
        assert body["kind"] == "mindmap" and body["mermaid"].startswith("mindmap")
        bad = await api.http.post(
            "/v1/tasks",
            json={
                "type": "GENERATE_ARTIFACT",
                "payload": {"document_id": document_id, "kind": "poem"},
            },
        )
        assert bad.status_code == 422 and "kind" in bad.text, bad.text
