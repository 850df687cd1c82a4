"""The local methods of the learning artifacts and the local diagnosis.

- key sentences: sentence centrality (`text.centrality`, with the local embedder), the core of
  an extractive summary;
- key terms: recurring content words and phrases (space-separated languages), each with the
  sentence that best defines it;
- headings: the document's own heading paths, for an outline and a mind map;
- cloze questions: a key sentence with a key term blanked out (`text.cloze`).

Each works per chunk group (the map step, results small enough to store) and then over the
groups' candidates (the reduce step), so a long document costs one pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel

from knowledgeops.contracts.artifacts import (
    ArtifactOutput,
    GlossaryEntry,
    KeyPoint,
    MindBranch,
    MindMap,
    OutlineItem,
    QuizQuestion,
    Summary,
)
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.learning.chunk_text import heading_path, sentences_of
from knowledgeops.text.centrality import most_central
from knowledgeops.text.cjk import cjk_count
from knowledgeops.text.cloze import cloze
from knowledgeops.text.terms import phrases

if TYPE_CHECKING:  # only a type here: the embedder module stays unimported
    from knowledgeops.models.embedding import Embedder

T = TypeVar("T")

# Sentences embedded per group at most (evenly spread): bounds one group's embedding time.
MAX_GROUP_SENTENCES = 300
# A key sentence states something: this many words (or CJK characters) at least; longer than
# MAX_SENTENCE_CHARS it is a run-on (a table, a list flattened) rather than a sentence.
MIN_SENTENCE_WORDS, MIN_SENTENCE_CJK, MAX_SENTENCE_CHARS = 6, 8, 600
# Key terms are phrases of up to this many words.
MAX_TERM_WORDS = 3
_DEFINING = re.compile(r"\b(is|are|means|refers to|is called|are called|describes)\b", re.I)


class SentencePick(BaseModel):
    text: str
    chunk: int
    score: float


class TermStat(BaseModel):
    term: str  # as first written
    words: int
    count: int
    sentence: str  # the sentence that best defines it
    chunk: int
    defining: bool


class HeadingMark(BaseModel):
    path: list[str]
    chunk: int


class LocalGroup(BaseModel):
    """What the local methods keep of one chunk group."""

    sentences: list[SentencePick] = []
    terms: list[TermStat] = []
    headings: list[HeadingMark] = []
    leads: list[KeyPoint] = []


def key_sentences(chunk: Chunk) -> list[str]:
    """The chunk's sentences long enough to state something."""
    return [
        s
        for s in sentences_of(chunk)
        if (len(s.split()) >= MIN_SENTENCE_WORDS or cjk_count(s) >= MIN_SENTENCE_CJK)
        and len(s) <= MAX_SENTENCE_CHARS
    ]


def chunk_sentences(chunks: Sequence[Chunk]) -> list[tuple[str, int]]:
    return [(s, c.index) for c in chunks for s in key_sentences(c)]


async def central_sentences(
    embedder: Embedder, items: Sequence[tuple[str, int]], k: int
) -> list[SentencePick]:
    """The `k` most central sentences, most central first."""
    items = spread(items, MAX_GROUP_SENTENCES)
    if not items:
        return []
    if len(items) == 1:  # central by itself: no need to embed it
        return [SentencePick(text=items[0][0], chunk=items[0][1], score=1.0)]
    vectors = await embedder.embed([t for t, _ in items])
    return [
        SentencePick(text=items[i][0], chunk=items[i][1], score=score)
        for i, score in most_central(vectors, k)
    ]


def term_stats(chunks: Sequence[Chunk]) -> list[TermStat]:
    """Content words and phrases of up to three words with how often they occur."""
    found: dict[str, TermStat] = {}
    for text, chunk in chunk_sentences(chunks):
        for term in phrases(text, MAX_TERM_WORDS):
            _count(found, term, text, chunk)
    return list(found.values())


def _count(found: dict[str, TermStat], term: str, text: str, chunk: int) -> None:
    defining = bool(re.search(re.escape(term) + r"\W+" + _DEFINING.pattern, text, re.I))
    stat = found.get(term.lower())
    if stat is None:
        found[term.lower()] = TermStat(
            term=term,
            words=len(term.split()),
            count=1,
            sentence=text,
            chunk=chunk,
            defining=defining,
        )
        return
    stat.count += 1
    if defining and not stat.defining:
        stat.sentence, stat.chunk, stat.defining = text, chunk, True


def key_terms(groups: Sequence[Sequence[TermStat]], k: int) -> list[TermStat]:
    """The `k` strongest terms over all groups, by occurrences times words (a phrase that
    recurs outranks its words), a word that occurs mostly inside a chosen phrase left out."""
    merged: dict[str, TermStat] = {}
    for group in groups:
        for t in group:
            key = t.term.lower()
            have = merged.get(key)
            if have is None:
                merged[key] = t.model_copy()
                continue
            have.count += t.count
            if t.defining and not have.defining:
                have.sentence, have.chunk, have.defining = t.sentence, t.chunk, True
    min_count = 2 if any(t.count >= 2 for t in merged.values()) else 1
    ranked = sorted(
        (t for t in merged.values() if t.count >= min_count),
        key=lambda t: (-(t.count * t.words + (0.5 if t.defining else 0)), t.term),
    )
    chosen: list[TermStat] = []
    for t in ranked:
        key = t.term.lower()
        if any(_overlaps(key, c.term.lower()) and t.count <= c.count * 1.5 for c in chosen):
            continue
        chosen.append(t)
        if len(chosen) == k:
            break
    return chosen


def _overlaps(a: str, b: str) -> bool:
    return f" {a} " in f" {b} " or f" {b} " in f" {a} "


def strongest(stats: Sequence[TermStat], n: int) -> list[TermStat]:
    """A group's `n` strongest terms, kept for the reduce step (their counts add up there)."""
    return sorted(stats, key=lambda t: (-t.count * t.words, t.term))[:n]


def glossary(terms: Sequence[TermStat]) -> list[GlossaryEntry]:
    return [GlossaryEntry(term=t.term, definition=t.sentence, chunk=t.chunk) for t in terms]


def heading_marks(chunks: Sequence[Chunk]) -> list[HeadingMark]:
    marks: list[HeadingMark] = []
    last: str | None = None
    for c in chunks:
        if c.heading and c.heading != last:
            marks.append(HeadingMark(path=heading_path(c), chunk=c.index))
        last = c.heading or last
    return marks


def outline_from_headings(groups: Sequence[Sequence[HeadingMark]]) -> list[OutlineItem]:
    """Each heading once, where it first starts, at the depth of its path."""
    items: list[OutlineItem] = []
    emitted: set[tuple[str, ...]] = set()
    for group in groups:
        for mark in group:
            for depth in range(len(mark.path)):
                prefix = tuple(mark.path[: depth + 1])
                if prefix not in emitted and prefix[-1]:
                    emitted.add(prefix)
                    items.append(OutlineItem(title=prefix[-1], level=depth + 1, chunk=mark.chunk))
    return items


def leading_sentences(chunks: Sequence[Chunk]) -> list[KeyPoint]:
    leads = []
    for c in chunks:
        first = key_sentences(c)
        if first:
            leads.append(KeyPoint(text=first[0], chunk=c.index))
    return leads


def spread(items: Sequence[T], k: int) -> list[T]:
    """At most `k` items evenly spread over the sequence (the whole document)."""
    if len(items) <= k:
        return list(items)
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]


def mindmap_from_outline(items: Sequence[OutlineItem], title: str, k: int) -> MindMap | None:
    """Branches from the top headings (below a single document title, if there is one), their
    sub-headings as points."""
    if not items:
        return None
    roots = [i for i in items if i.level == 1]
    single_root = len(roots) == 1 and any(i.level == 2 for i in items)
    central, top = (roots[0].title, 2) if single_root else (title, 1)
    branches: list[MindBranch] = []
    for i in items:
        if i.level == top:
            branches.append(MindBranch(topic=i.title, points=[], chunk=i.chunk))
        elif i.level == top + 1 and branches and len(branches[-1].points) < 6:
            branches[-1].points.append(i.title)
    return MindMap(central_topic=central, branches=branches[:k]) if branches else None


def mindmap_from_terms(terms: Sequence[TermStat], title: str) -> MindMap:
    return MindMap(
        central_topic=title,
        branches=[
            MindBranch(topic=t.term, points=[_shorten(t.sentence, 120)], chunk=t.chunk)
            for t in terms
        ],
    )


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"


def cloze_quiz(
    sentences: Sequence[SentencePick], terms: Sequence[TermStat], k: int
) -> list[QuizQuestion]:
    """Up to `k` cloze questions: the most central sentences, each with one key term blanked
    (a term is asked once)."""
    questions: list[QuizQuestion] = []
    used: set[str] = set()
    for s in sorted(sentences, key=lambda s: -s.score):
        for t in terms:
            if t.term.lower() in used:
                continue
            made = cloze(s.text, t.term)
            if made is not None:
                used.add(t.term.lower())
                questions.append(QuizQuestion(question=made.front, answer=t.term, chunk=s.chunk))
                break
        if len(questions) == k:
            break
    return sorted(questions, key=lambda q: q.chunk)


async def merge_local(
    embedder: Embedder, out: ArtifactOutput, groups: list[LocalGroup], k: int, title: str
) -> None:
    if out.kind == "summary":
        candidates = [s for g in groups for s in g.sentences]
        if len(groups) > 1:
            pairs = [(s.text, s.chunk) for s in candidates]
            candidates = await central_sentences(embedder, pairs, k)
        picked = sorted(candidates[:k], key=lambda s: s.chunk)
        points = [KeyPoint(text=s.text, chunk=s.chunk) for s in picked]
        out.summary = Summary(summary=" ".join(p.text for p in points), key_points=points)
        out.notes.append(
            "Extractive: the document's most central sentences (mean similarity to the "
            f"others with the local embedder {embedder.model_id}), in document order."
        )
    elif out.kind == "glossary":
        out.glossary = glossary(key_terms([g.terms for g in groups], k))
        out.notes.append(
            "Key terms are recurring words and phrases, each with the sentence that best "
            "defines it; this reads space-separated languages only (set CHAT_MODEL for others)."
        )
    elif out.kind == "quiz":
        terms = key_terms([g.terms for g in groups], 3 * k)
        sentences = [s for g in groups for s in g.sentences]
        out.quiz = cloze_quiz(sentences, terms, k)
        out.notes.append(
            "Cloze questions: central sentences with a key term blanked; open questions "
            "need a chat model (CHAT_MODEL)."
        )
    else:
        outline = outline_from_headings([g.headings for g in groups])
        if out.kind == "outline":
            if not outline:
                out.method = "local:leading-sentences"
                leads = spread([p for g in groups for p in g.leads], k)
                outline = [OutlineItem(title=p.text, level=1, chunk=p.chunk) for p in leads]
            out.outline = outline
        else:
            out.mindmap = mindmap_from_outline(outline, title, k)
            if out.mindmap is None:
                out.method = "local:key-terms"
                terms = key_terms([g.terms for g in groups], k)
                out.mindmap = mindmap_from_terms(terms, title)
