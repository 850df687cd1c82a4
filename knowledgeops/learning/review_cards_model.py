"""Review cards as drafted: the per-group record the work directory keeps, and the chat
model's part (the prompt, the structured answer, what is dropped from it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.contracts.review_cards import CLOZE_BLANK, CardKind
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.learning.chunk_text import passages
from knowledgeops.models.chat import ChatModel

_KINDS = {
    "qa": "'qa': front is a question, back its short answer",
    "cloze": f"'cloze': front is a sentence of the text with one key term replaced by "
    f"{CLOZE_BLANK}, back is that term",
}


class DraftCard(BaseModel):
    kind: CardKind
    front: str
    back: str
    source_chunk: int
    source_page: int | None = None


class DraftGroup(BaseModel):
    """One chunk group's drafted cards: what the work directory keeps per group."""

    cards: list[DraftCard]
    # Cards the model cited outside the chunks it was shown, or wrote as a cloze with no blank.
    rejected: int = 0


class ModelCard(BaseModel):
    """One card as the model writes it (strict structured output: every field required)."""

    kind: Literal["qa", "cloze"]
    front: str = Field(description="the question, or the sentence with the key term as ____")
    back: str = Field(description="the short answer, or the hidden term")
    source_chunk: int = Field(description="the number of the chunk the card comes from")


class ModelCards(BaseModel):
    cards: list[ModelCard]


async def ask_model(
    chat: ChatModel, chunks: list[Chunk], k: int, kinds: Sequence[str]
) -> tuple[DraftGroup, TokenUsage]:
    """Up to `k` cards of `kinds` from the chunks; cards citing a chunk the model was not shown,
    or a cloze with no blank, are dropped and counted."""
    answer, usage = await chat.structured(_messages(chunks, k, kinds), ModelCards)
    by_index = {c.index: c for c in chunks}
    cards: list[DraftCard] = []
    for c in answer.cards[:k]:
        source = by_index.get(c.source_chunk)
        front, back = c.front.strip(), c.back.strip()
        ok = source is not None and front and back and c.kind in kinds
        if ok and c.kind == "cloze" and CLOZE_BLANK not in front:
            ok = False
        if not ok or source is None:
            continue
        cards.append(DraftCard(kind=c.kind, front=front, back=back, **source_of(source)))
    rejected = min(len(answer.cards), k) - len(cards)
    return DraftGroup(cards=cards, rejected=rejected), usage


def _messages(chunks: list[Chunk], k: int, kinds: Sequence[str]) -> list[dict[str, Any]]:
    system = (
        "You write spaced-repetition review cards for a learner. Each card tests one fact or "
        "idea the text states, makes sense without the text, and names in source_chunk the "
        "number of the chunk it comes from. Kinds: "
        + "; ".join(_KINDS[kind] for kind in kinds)
        + f". Write at most {k} cards, the most important first, in the language of the "
        "text. Never invent facts the text does not state."
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": passages(chunks)},
    ]


def source_of(chunk: Chunk) -> dict[str, Any]:
    return {"source_chunk": chunk.index, "source_page": chunk.page}
