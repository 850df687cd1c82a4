"""What the AI task types' tests share: a lesson document to import, and which passages a
request to the fake model cites."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.helpers.environment import Env
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import last_user_text

WAIT = 120.0

# A learning text with headings and recurring terms; with CHUNK_TOKENS=64 about 15 chunks.
LESSON = """# Spaced repetition

Spaced repetition is a learning technique that schedules reviews of material at increasing
intervals. Each successful review pushes the next review interval further into the future.
The forgetting curve describes how memory of new material decays quickly without review.

## The forgetting curve

Hermann Ebbinghaus measured the forgetting curve in the 1880s by memorising nonsense syllables.
The forgetting curve drops steeply in the first day and then flattens over the following weeks.
Every review resets the forgetting curve and makes the following decline slower than before.

## Active recall

Active recall means retrieving an answer from memory instead of rereading the material.
Active recall strengthens memory more than passive review because retrieval itself is practice.
Flashcards combine active recall with spaced repetition when each card has its own interval.

## Review intervals

A review interval is the time between two reviews of the same card. Algorithms such as SM-2 and
FSRS compute the next review interval from the difficulty and the stability of a memory.
A card answered easily gets a longer review interval; a card forgotten starts again with a
short review interval. The stability of a memory grows with every successful review.

## Practical advice

Study a little every day rather than cramming before an exam. Keep each flashcard small and
focused on one idea. Mix old and new cards so that spaced repetition and active recall work
together, and trust the schedule even when a review interval feels long.
"""


def lesson(tmp_path: Path) -> Path:
    path = tmp_path / "spaced-repetition-lesson.md"
    path.write_text(LESSON, encoding="utf-8")
    return path


async def import_lesson(env: Env, tmp_path: Path) -> str:
    ref = await env.documents.import_file(lesson(tmp_path))
    st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "completed", st.last_error
    return ref.document_id


def cited_chunks(body: dict[str, Any]) -> list[int]:
    return [int(n) for n in re.findall(r"\[chunk (\d+)\]", last_user_text(body))]


def group_requests(fake: FakeOpenAI) -> list[tuple[int, ...]]:
    """The chunk sets of the answered per-group requests (merge requests cite no passages)."""
    return [
        tuple(cited_chunks(b))
        for b in fake.chat_answered
        if "[chunk" in last_user_text(b) and "\n\n[chunk" in last_user_text(b)
    ]
