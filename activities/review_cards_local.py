"""Cloze cards without a chat model: key sentences by centrality, a key term blanked.

An honest extractive method, no generation: the sentences of a chunk group are embedded with
the configured embedder, each scored by its summed cosine similarity to the group's other
sentences (degree centrality, as in LexRank: the sentences most like the rest carry what the
passage is about), and the best ones become cloze cards. The term blanked is the word (for
CJK, the 2-4 character sequence) that recurs most in the group and is not a function word:
a term the passage keeps returning to is one worth recalling.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from knowledgeops.contracts.review_cards import CLOZE_BLANK
from knowledgeops.stores.chunk_store import Chunk

METHOD = "local:key-sentence-cloze"
# Sentences shorter than this carry too little to test; longer ones make poor cards.
MIN_CHARS, MAX_CHARS = 40, 320
MIN_CJK_CHARS = 10

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|(?<=[。！？；])")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+")
_WORD = re.compile(r"[^\W\d_][\w'-]*[^\W_]", re.UNICODE)
_STOPWORDS = frozenset(
    """about above after again against also among another because been before being below
    between both cannot could does doing down during each even every from further have having
    here into itself just many more most much must never only other ought ours over same
    should some such than that their theirs them then there these they this those through
    under until very were what when where which while whom whose will with within without
    would your yours often usually each either neither therefore however thus since whether
    used using uses make makes made like well first second""".split()
)
_CJK_STOP = frozenset("的了是在和与及或就也都而把被这那个们我你他她它之为以于上中下")


@dataclass(frozen=True)
class Sentence:
    text: str
    chunk: Chunk


def sentences(chunks: Sequence[Chunk]) -> list[Sentence]:
    """Candidate sentences of the chunks, each once (chunks overlap), in document order."""
    seen: set[str] = set()
    out: list[Sentence] = []
    for chunk in chunks:
        for raw in _SENTENCE_END.split(chunk.text.replace("\n", " ")):
            text = " ".join(raw.split())
            if text in seen or not _fits(text):
                continue
            seen.add(text)
            out.append(Sentence(text, chunk))
    return out


def _fits(text: str) -> bool:
    if len(text) > MAX_CHARS:
        return False
    cjk = len(_CJK.findall(text))
    if cjk >= MIN_CJK_CHARS:
        return True
    # A heading or a list fragment is no sentence: it must end like one.
    return len(text) >= MIN_CHARS and text[-1] in ".!?"


def central(vectors: Sequence[Sequence[float]], k: int) -> list[int]:
    """Indexes of the `k` most central vectors (summed cosine similarity to the others)."""
    if not vectors:
        return []
    m = np.asarray(vectors, dtype=np.float64)
    m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
    sim = m @ m.T
    np.fill_diagonal(sim, 0.0)
    scores = sim.sum(axis=1)
    # Stable: equal scores keep document order, so the choice is reproducible.
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    return order[:k]


def term_counts(texts: Sequence[str]) -> Counter[str]:
    """How often each candidate term occurs across the group's sentences."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(_terms(text))
    return counts


def _terms(text: str) -> set[str]:
    found = {
        w.lower()
        for w in _WORD.findall(text)
        if len(w) >= 4 and w.lower() not in _STOPWORDS and not _CJK.search(w)
    }
    for run in _CJK_RUN.findall(text):
        for n in (2, 3, 4):
            for i in range(len(run) - n + 1):
                gram = run[i : i + n]
                if gram[0] not in _CJK_STOP and gram[-1] not in _CJK_STOP:
                    found.add(gram)
    return found


def cloze(
    text: str, counts: Counter[str], used: frozenset[str] = frozenset()
) -> tuple[str, str] | None:
    """(front with the key term blanked, the term), or None when the sentence has none. A
    term in `used` (blanked by an earlier card) is taken only when the sentence has no other:
    cards that all ask for the same word teach little."""
    best: tuple[float, str] | None = None
    for term in _terms(text):
        # Recurrence in the group first; among equals, the longer (more specific) term.
        score = counts[term] + len(term) / 100 - (1000 if term in used else 0)
        if best is None or score > best[0] or (score == best[0] and term < best[1]):
            best = (score, term)
    if best is None:
        return None
    term = best[1]
    if _CJK.search(term):
        return text.replace(term, CLOZE_BLANK), term
    pattern = re.compile(rf"\b{re.escape(term)}\b", re.IGNORECASE)
    shown = pattern.search(text)
    if shown is None:
        return None
    return pattern.sub(CLOZE_BLANK, text), shown.group(0)
