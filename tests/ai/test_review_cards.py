"""GENERATE_REVIEW_CARD end to end on the real dev server: the local key-sentence method with
no model, a scripted chat model on the fake OpenAI server (calls counted, a malformed answer,
a crash in the middle), de-duplication, FSRS state, re-runs, and the cards over real HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fsrs import Card, Rating, Scheduler, State

from activities.map_reduce import plan_groups
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.review_cards import CLOZE_BLANK
from knowledgeops.db.review_cards import ReviewCards
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.files.outputs import OutputStore
from knowledgeops.learning import review_cards_local as local
from knowledgeops.storage.local import LocalStore
from knowledgeops.text.centrality import most_central
from knowledgeops.text.terms import term_counts
from starter.services.task_models import PayloadInvalidError
from tests.helpers.environment import (
    API_TOKEN,
    ROOT,
    Env,
    chat_settings,
    openai_settings,
    running_api,
    running_env,
    settings_env,
)
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import ChatFault, all_text

WAIT = 120.0
# CHAT_INPUT_TOKENS small enough that about every chunk of a test document is its own group.
SMALL_GROUPS = 256
TYPE = "GENERATE_REVIEW_CARD"

TEXT = """Spaced repetition is a learning technique in which reviews are spread out over growing intervals of time.

The forgetting curve, described by Hermann Ebbinghaus in 1885, shows that memory decays quickly unless it is reviewed.

Photosynthesis converts light energy into chemical energy stored in glucose. Chlorophyll in the chloroplasts absorbs mostly red and blue light.

The light reactions of photosynthesis split water molecules and release oxygen as a by-product. The Calvin cycle then fixes carbon dioxide into sugars.

Glaciers store about two thirds of the fresh water on Earth. When glaciers melt, the water flows into rivers and eventually reaches the oceans.

Evaporation lifts water from the oceans into the atmosphere, where it condenses into clouds. Rain returns the water to the land and the oceans again.
"""  # noqa: E501


async def _document(env: Env, tmp_path: Path, text: str = TEXT) -> tuple[str, int]:
    path = tmp_path / "notes.txt"
    path.write_text(text)
    ref = await env.documents.import_file(path)
    st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "completed", st.last_error
    reader = await env.live_chunks(ref.document_id)
    reader.close()
    return ref.document_id, reader.count


async def _run(env: Env, payload: dict[str, Any]) -> Any:
    ref = await env.service.enqueue(TYPE, payload)
    return ref.task_id, await env.service.wait(ref.task_id, timeout=WAIT)


async def _group_starts(env: Env, document_id: str) -> list[int]:
    """Where the chunk groups a task plans start (CHAT_INPUT_TOKENS bounds a group)."""
    reader = await env.live_chunks(document_id)
    try:
        return plan_groups(reader, document_id, env.settings.chat_input_tokens).starts
    finally:
        reader.close()


def _chunk_numbers(body: dict[str, Any]) -> list[int]:
    return [int(n) for n in re.findall(r"\[chunk (\d+)", all_text(body))]


def test_local_method_blanks_a_recurring_term_of_a_central_sentence() -> None:
    chunks = [Chunk(i, t, f"h{i}") for i, t in enumerate(TEXT.split("\n\n"))]
    found = local.sentences(chunks + chunks[:1])  # overlapping chunks repeat sentences
    assert len(found) == len({s.text for s in found}) == 10
    counts = term_counts([s.text for s in found])
    made = local.key_term_cloze(found[4].text, counts)
    front, term = (made.front, made.answer) if made else ("", "")
    # "water" recurs in five sentences: the key term of the sentence about water molecules.
    assert (term, front.count(CLOZE_BLANK)) == ("water", 1) and "water" not in front
    # The vector between two others is the most central; the unrelated one comes last.
    vectors = [[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.95, 0.05, 0.0], [0.0, 0.0, 1.0]]
    assert [i for i, _ in most_central(vectors, 4)] == [2, 0, 1, 3]
    zh = [Chunk(0, "间隔重复是一种学习方法。间隔重复把复习分散到越来越长的间隔中。", "h")]
    zh_found = local.sentences(zh)
    zh_made = local.key_term_cloze(zh_found[0].text, term_counts([s.text for s in zh_found]))
    zh_front, zh_term = (zh_made.front, zh_made.answer) if zh_made else ("", "")
    assert zh_term == "间隔重复" and CLOZE_BLANK in zh_front


async def test_without_a_model_cloze_cards_with_fsrs_state_and_reruns_add_nothing(
    env: Env, tmp_path: Path
) -> None:
    document_id, chunks = await _document(env, tmp_path)
    before = datetime.now(UTC)
    task_id, st = await _run(env, {"document_id": document_id})
    assert st.status == "completed", st.last_error
    r = st.result
    assert r["method"] == "local:key-sentence-cloze"
    assert (r["start_index"], r["end_index"]) == (0, chunks)
    assert r["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}
    assert r["cards_made"] >= 5 and r["already_stored"] == 0
    assert (st.progress.unit, st.progress.done, st.progress.total) == (
        "chunk groups",
        r["groups"],
        r["groups"],
    )
    page = await ReviewCards(env.db).list(document_id, limit=100, offset=0)
    assert page.total == r["cards_made"]
    reader = await env.live_chunks(document_id)
    scheduler = Scheduler(enable_fuzzing=False)
    for card in page.items:
        assert card.kind == "cloze" and card.method == r["method"] and card.task_id == task_id
        source = reader.read(card.source_chunk, card.source_chunk + 1)[0].text
        # The blanked sentence, term filled back in, is the source chunk's own text.
        filled = card.front.replace(CLOZE_BLANK, card.back)
        assert " ".join(filled.split()) in " ".join(source.split())
        # A new FSRS card, due now, that FSRS itself can schedule.
        assert (card.state, card.stability, card.difficulty) == ("learning", None, None)
        assert before - timedelta(seconds=1) <= card.due <= datetime.now(UTC)
        fsrs_card = Card.from_dict(card.fsrs_card)  # type: ignore[arg-type]
        assert fsrs_card.state == State.Learning and fsrs_card.step == 0
        reviewed, _ = scheduler.review_card(fsrs_card, Rating.Good, card.due)
        assert reviewed.stability and reviewed.stability > 0 and reviewed.due > card.due
    assert len({c.card_id for c in page.items}) == page.total
    # The task's output lists the same cards.
    output = await OutputStore(LocalStore(env.settings.data_dir)).load(task_id)
    assert sorted(c["card_id"] for c in output["cards"]) == sorted(c.card_id for c in page.items)
    assert not (env.settings.outputs_dir / "work" / task_id).exists()

    # The command line lists the same cards.
    listed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "starter.cli.main", "cards", document_id, "--json"],
        cwd=ROOT,
        env=settings_env(env.settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["total"] == page.total

    # The same task again: every card is already stored, none added, review state untouched.
    _, again = await _run(env, {"document_id": document_id})
    assert (again.result["cards_made"], again.result["already_stored"]) == (0, r["cards_made"])
    assert (await ReviewCards(env.db).list(document_id, limit=100, offset=0)).total == page.total

    # A chunk range: only cards citing it.
    _, ranged = await _run(
        env, {"document_id": document_id, "start_index": 1, "end_index": 3, "max_cards": 2}
    )
    assert ranged.result["cards_made"] + ranged.result["already_stored"] <= 2
    assert (ranged.result["start_index"], ranged.result["end_index"]) == (1, 3)


async def test_bad_input_fails_at_once(env: Env, tmp_path: Path) -> None:
    document_id, chunks = await _document(env, tmp_path)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"document_id": "no-such-doc"}, "DocumentNotFound: No chunks stored for document"),
        ({"document_id": document_id, "start_index": chunks}, "ChunkRangeOutOfRange"),
        ({"document_id": document_id, "kinds": ["qa"]}, "ChatModelMissing"),
    ]
    for payload, error in cases:
        _, st = await _run(env, payload)
        assert st.status == "failed" and st.last_error.startswith(error), st.last_error
        assert st.attempts <= 1
    with pytest.raises(PayloadInvalidError, match="end_index must be after start_index"):
        await env.service.enqueue(
            TYPE, {"document_id": document_id, "start_index": 2, "end_index": 2}
        )


def _script(body: dict[str, Any]) -> dict[str, Any]:
    """Per group: a question on its first chunk, the same cloze in every group (a duplicate
    after the first), and a card citing a chunk the group does not hold (rejected)."""
    first = _chunk_numbers(body)[0]
    return {
        "cards": [
            {"kind": "qa", "front": f"What does chunk {first} say?", "back": f"Its text {first}",
             "source_chunk": first},
            {"kind": "cloze", "front": "Spaced ____ spreads reviews out.", "back": "repetition",
             "source_chunk": first},
            {"kind": "qa", "front": "Made up?", "back": "yes", "source_chunk": 999},
        ]
    }  # fmt: skip


async def test_with_a_model_cards_are_deduplicated_counted_and_resume_after_a_crash(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.chat_script = _script
    s = chat_settings(
        openai_settings(settings, fake_openai),
        fake_openai,
        openai_max_retries=0,
        chat_input_tokens=SMALL_GROUPS,
    )
    async with running_env(s) as env:
        document_id, _ = await _document(env, tmp_path)
        starts = await _group_starts(env, document_id)
        groups = len(starts)
        assert 3 <= groups <= 8
        # A malformed answer (re-asked by the client) in group 1, and the provider down for
        # group 2's first try: the activity fails there and Temporal retries it.
        fake_openai.chat_fail_on[2] = ChatFault(malformed=True)
        fake_openai.chat_fail_on[4] = ChatFault(500)
        task_id, st = await _run(env, {"document_id": document_id})
        assert st.status == "completed", st.last_error
        r = st.result
        assert (r["method"], r["groups"]) == ("model:fake-chat", groups)
        # Each group answered once: the retry resumed at group 2, no finished group re-asked.
        asked = [_chunk_numbers(b)[0] for b in fake_openai.chat_answered if len(b["messages"]) == 2]
        assert sorted(asked) == starts, asked
        assert len(fake_openai.chat_answered) == groups + 1  # + the re-ask after the malformed
        assert fake_openai.chat_calls == groups + 2
        # Usage: every answered call, the malformed one included (it was paid for).
        assert r["usage"]["calls"] == groups + 1 and r["usage"]["prompt_tokens"] > 0
        assert r["usage"]["completion_tokens"] > 0
        assert (r["cards_made"], r["duplicates_removed"], r["rejected"]) == (
            groups + 1,
            groups - 1,
            groups,
        )
        page = await ReviewCards(env.db).list(document_id, limit=100, offset=0)
        assert page.total == groups + 1
        assert {c.kind for c in page.items} == {"qa", "cloze"}
        output = await OutputStore(LocalStore(env.settings.data_dir)).load(task_id)
        assert {d["duplicate_of"] for d in output["duplicates"]} == {
            c.card_id for c in page.items if c.kind == "cloze"
        }
        assert all(d["similarity"] >= 0.9 for d in output["duplicates"])

        # Malformed every time: the client gives up after its bounded re-asks, the task fails
        # at once (no activity retry pays for the same failure again).
        calls = fake_openai.chat_calls
        fake_openai.chat_faults.extend(ChatFault(malformed=True) for _ in range(3))
        _, failed = await _run(env, {"document_id": document_id, "max_cards": 1})
        assert failed.status == "failed" and failed.last_error.startswith("ChatAnswerInvalid:")
        assert fake_openai.chat_calls == calls + 3


async def test_cards_listed_over_http_only_to_their_owner(
    settings: Settings, tmp_path: Path
) -> None:
    other = "other-token-0123456789"
    tokens = f"{API_TOKEN}:tester,{other}:bob:bob"
    async with running_api(settings, api_tokens=tokens) as api:
        path = tmp_path / "notes.txt"
        path.write_text(TEXT)
        with path.open("rb") as f:
            r = await api.http.post(
                "/v1/documents", files={"file": ("notes.txt", f)}, data={"owner": "alice"}
            )
        assert r.status_code == 202, r.text
        document_id = r.json()["document_id"]
        assert (await api.wait_task(r.json()["task_id"]))["status"] == "completed"
        r = await api.http.post(
            "/v1/tasks", json={"type": TYPE, "payload": {"document_id": document_id}}
        )
        assert r.status_code == 202, r.text
        done = await api.wait_task(r.json()["task_id"], timeout=WAIT)
        assert done["status"] == "completed", done
        made = done["result"]["cards_made"]
        r = await api.http.get(f"/v1/documents/{document_id}/cards", params={"limit": 2})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["total"] == made and len(body["items"]) == min(2, made)
        card = body["items"][0]
        assert {"due", "stability", "difficulty", "state", "fsrs_card", "source_chunk"} <= set(card)
        assert card["state"] == "learning" and card["fsrs_card"]["state"] == State.Learning.value
        out = await api.http.get(f"/v1/tasks/{done['task_id']}/output")
        assert out.status_code == 200 and len(out.json()["cards"]) == made
        # Another owner's token: the document (and so its cards) does not exist for it.
        bob = {"Authorization": f"Bearer {other}"}
        r = await api.http.get(f"/v1/documents/{document_id}/cards", headers=bob)
        assert r.status_code == 404, r.text
        r = await api.http.get("/v1/documents/no-such-doc/cards")
        assert r.status_code == 404
        assert json.loads(r.text)


async def test_paraphrased_cards_are_near_duplicates_for_the_local_embedder(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """The default threshold (0.9) against the local model: a paraphrase is dropped, a card
    on another subject in nearly the same words is kept."""
    questions = [
        ("What is the capital of France?", "Paris"),
        ("What's the capital city of France?", "Paris"),
        ("What is the capital of Germany?", "Berlin"),
    ]

    def script(body: dict[str, Any]) -> dict[str, Any]:
        first = _chunk_numbers(body)[0]
        front, back = questions[len(fake_openai.chat_answered) % 3]  # by call: group order
        return {"cards": [{"kind": "qa", "front": front, "back": back, "source_chunk": first}]}

    fake_openai.chat_script = script
    async with running_env(
        chat_settings(settings, fake_openai, chat_input_tokens=SMALL_GROUPS)
    ) as env:
        document_id, chunks = await _document(env, tmp_path)
        starts = await _group_starts(env, document_id)
        assert len(starts) >= 3
        end = starts[3] if len(starts) > 3 else chunks
        payload = {"document_id": document_id, "end_index": end}
        task_id, st = await _run(env, payload)
        assert st.status == "completed", st.last_error
        assert (st.result["cards_made"], st.result["duplicates_removed"]) == (2, 1)
        page = await ReviewCards(env.db).list(document_id, limit=10, offset=0)
        assert [c.front for c in page.items] == [questions[0][0], questions[2][0]]
        [dup] = (await OutputStore(LocalStore(env.settings.data_dir)).load(task_id))["duplicates"]
        assert dup["front"] == questions[1][0] and dup["duplicate_of"] == page.items[0].card_id
        assert 0.9 <= dup["similarity"] < 1.0
