"""GENERATE_ARTIFACT with a chat model: the prompt per kind, each chunk group's structured
answer (citations kept only when they point into the group), and merging the groups' answers
into one artifact (a model call only for a summary or a mind map of several groups).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from knowledgeops.contracts.ai import GroupPlan, TokenUsage
from knowledgeops.contracts.artifacts import (
    ArtifactOutput,
    GlossaryEntry,
    MindMap,
    OutlineItem,
    QuizQuestion,
    Summary,
)
from knowledgeops.errors import bad_input
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.learning.chunk_text import passages
from knowledgeops.models.chat import ChatModel
from knowledgeops.models.embedding import token_upper_bound

M = TypeVar("M", bound=BaseModel)

SYSTEM = (
    "You turn a document into learning material. Use only the passages given; add no facts "
    "of your own. Each passage starts with [chunk N]: where asked for a chunk, give that N. "
    "Write in the language of the passages."
)
GROUP_ASK: dict[str, str] = {
    "summary": "Summarise these passages in at most 150 words and list at most {k} key points, "
    "each with the chunk it comes from.",
    "outline": "Give the outline of these passages: their sections and subsections in order, "
    "each with its level (1 = top) and the chunk where it starts. Use the document's own "
    "headings where it has them.",
    "glossary": "List at most {k} key terms these passages define or rely on, each with a "
    "one-sentence definition drawn from the passages and the chunk it comes from.",
    "quiz": "Write at most {k} quiz questions that test understanding of these passages, each "
    "with a short answer and the chunk that answers it.",
    "mindmap": "Make a mind map of these passages: a central topic and at most {k} branches, "
    "each with up to 5 short points and the chunk it is mainly about.",
}
COMBINE_ASK: dict[str, str] = {
    "summary": "These are summaries of consecutive parts of one document, in order, with key "
    "points marked [chunk N]. Write one summary of the whole document in at most 250 words and "
    "pick at most {k} key points of the whole, each with its chunk number.",
    "mindmap": "These are mind-map branches of consecutive parts of one document, in order, "
    "marked [chunk N]. Merge them into one mind map of the whole document: a central topic and "
    "at most {k} branches, each with up to 5 short points and its chunk number.",
}


class GroupOutline(BaseModel):
    items: list[OutlineItem]


class GroupGlossary(BaseModel):
    terms: list[GlossaryEntry]


class GroupQuiz(BaseModel):
    questions: list[QuizQuestion]


GROUP_MODELS: dict[str, type[BaseModel]] = {
    "summary": Summary,
    "outline": GroupOutline,
    "glossary": GroupGlossary,
    "quiz": GroupQuiz,
    "mindmap": MindMap,
}
# The cited list of each kind's model answer.
CITED: dict[str, str] = {
    "summary": "key_points",
    "outline": "items",
    "glossary": "terms",
    "quiz": "questions",
    "mindmap": "branches",
}


def cited_within(value: M, field: str, lo: int, hi: int, k: int | None) -> M:
    """Only the items citing a chunk in [lo, hi) (a model may invent an index), at most k."""
    items = [x for x in getattr(value, field) if lo <= x.chunk < hi]
    return value.model_copy(update={field: items if k is None else items[:k]})


class ModelArtifacts:
    def __init__(self, chat: ChatModel, budget_tokens: int) -> None:
        self.chat = chat
        self.budget = budget_tokens

    async def ask_group(
        self, kind: str, k: int, chunks: list[Chunk]
    ) -> tuple[BaseModel, TokenUsage]:
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": GROUP_ASK[kind].format(k=k) + "\n\n" + passages(chunks)},
        ]
        value, usage = await self.chat.structured(messages, GROUP_MODELS[kind])
        limit = None if kind == "outline" else k
        return cited_within(value, CITED[kind], chunks[0].index, chunks[-1].index + 1, limit), usage

    async def merge(
        self, out: ArtifactOutput, values: list[Any], k: int, plan: GroupPlan
    ) -> TokenUsage:
        cost = TokenUsage()
        if out.kind == "summary":
            summary = values[0]
            if len(values) > 1:
                texts = [_summary_text(v) for v in values]
                ask = COMBINE_ASK["summary"].format(k=k)
                summary, cost = await combine_answers(
                    self.chat, self.budget, ask, texts, Summary, _summary_text
                )
            out.summary = cited_within(summary, "key_points", 0, plan.chunks, k)
        elif out.kind == "mindmap":
            mindmap = values[0]
            if len(values) > 1:
                texts = [_mindmap_text(v) for v in values]
                ask = COMBINE_ASK["mindmap"].format(k=k)
                mindmap, cost = await combine_answers(
                    self.chat, self.budget, ask, texts, MindMap, _mindmap_text
                )
            out.mindmap = cited_within(mindmap, "branches", 0, plan.chunks, k)
        elif out.kind == "outline":
            items = [i for v in values for i in v.items]
            # A section running across two groups is named by both: keep its first mention.
            out.outline = [
                i for n, i in enumerate(items) if n == 0 or _key(i) != _key(items[n - 1])
            ]
        elif out.kind == "glossary":
            seen: dict[str, GlossaryEntry] = {}
            for entry in (e for v in values for e in v.terms):
                seen.setdefault(entry.term.strip().lower(), entry)
            out.glossary = list(seen.values())[:k]
        else:
            out.quiz = [q for v in values for q in v.questions][:k]
        return cost


async def combine_answers(
    chat: ChatModel,
    budget: int,
    ask: str,
    texts: list[str],
    output: type[M],
    as_text: Callable[[Any], str],
    system: str = SYSTEM,
) -> tuple[M, TokenUsage]:
    """One answer from many partial ones (each given as text): batches that fit one request
    of `budget` tokens, merged level by level."""
    usage = TokenUsage()
    for _level in range(4):
        answers: list[M] = []
        for batch in _pack(texts, budget):
            content = ask + "\n\n" + "\n\n".join(batch)
            messages = [{"role": "system", "content": system}, {"role": "user", "content": content}]
            answer, cost = await chat.structured(messages, output)
            answers.append(answer)
            usage = usage.add(cost)
        if len(answers) == 1:
            return answers[0], usage
        texts = [as_text(a) for a in answers]
    raise bad_input(
        "DocumentTooLong",
        f"the partial answers still do not fit CHAT_INPUT_TOKENS={budget} after four levels "
        "of merging; raise CHAT_INPUT_TOKENS to the model's context size",
    )


def _key(item: OutlineItem) -> tuple[str, int]:
    return item.title.strip().lower(), item.level


def _summary_text(s: Summary) -> str:
    points = "\n".join(f"- {p.text} [chunk {p.chunk}]" for p in s.key_points)
    return f"{s.summary}\n{points}"


def _mindmap_text(m: MindMap) -> str:
    lines = [f"Topic: {m.central_topic}"]
    for b in m.branches:
        lines.append(f"- {b.topic} [chunk {b.chunk}]: " + "; ".join(b.points))
    return "\n".join(lines)


def _pack(texts: list[str], budget: int) -> list[list[str]]:
    batches: list[list[str]] = [[]]
    used = 0
    for t in texts:
        cost = token_upper_bound(t)
        if batches[-1] and used + cost > budget:
            batches.append([])
            used = 0
        batches[-1].append(t)
        used += cost
    return batches
