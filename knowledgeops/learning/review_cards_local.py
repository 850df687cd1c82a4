"""Cloze cards without a chat model: key sentences by centrality, a key term blanked.

An honest extractive method, no generation: the sentences of a chunk group are embedded with
the configured embedder and scored by sentence centrality (`text.centrality`: the sentences
most like the rest carry what the passage is about); the best ones become cloze cards. The term
blanked is the word (for CJK, the 2-4 character sequence) that recurs most in the group and
is a term (`text.terms`): a term the passage keeps returning to is one worth recalling.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from knowledgeops.files.chunk_store import Chunk
from knowledgeops.learning.chunk_text import sentences_of
from knowledgeops.text.centrality import most_central
from knowledgeops.text.cjk import cjk_count
from knowledgeops.text.cloze import Cloze, cloze
from knowledgeops.text.terms import recurring_terms, term_counts

if TYPE_CHECKING:  # only a type here: the embedder module stays unimported
    from knowledgeops.models.embedding import Embedder

METHOD = "local:key-sentence-cloze"
# Sentences shorter than this carry too little to test; longer ones make poor cards.
MIN_CHARS, MAX_CHARS = 40, 320
MIN_CJK_CHARS = 10
# Taken off a term's score once a card asks for it: cards that all ask for the same word
# teach little, so a used term is chosen only where the sentence has no other.
_USED_PENALTY = 1000


@dataclass(frozen=True)
class Sentence:
    text: str
    chunk: Chunk


def sentences(chunks: Sequence[Chunk]) -> list[Sentence]:
    """Candidate sentences of the chunks, each once (chunks overlap), in document order."""
    seen: set[str] = set()
    out: list[Sentence] = []
    for chunk in chunks:
        for text in sentences_of(chunk):
            if text in seen or not _fits(text):
                continue
            seen.add(text)
            out.append(Sentence(text, chunk))
    return out


def _fits(text: str) -> bool:
    if len(text) > MAX_CHARS:
        return False
    if cjk_count(text) >= MIN_CJK_CHARS:
        return True
    # A list fragment or a caption is no sentence: it must end like one.
    return len(text) >= MIN_CHARS and text[-1] in ".!?"


def key_term_cloze(
    text: str, counts: Counter[str], used: frozenset[str] = frozenset()
) -> Cloze | None:
    """The sentence with its key term blanked, or None when it has none: the term that recurs
    most in the group (among equals the longer, more specific one), a term in `used` (blanked
    by an earlier card, lower case) only when the sentence has no other."""

    def score(term: str) -> float:
        return counts[term] + len(term) / 100 - (_USED_PENALTY if term in used else 0)

    for term in sorted(recurring_terms(text, counts), key=lambda t: (-score(t), t)):
        made = cloze(text, term)
        if made is not None:
            return made
    return None


async def key_sentence_cards(
    embedder: Embedder, chunks: list[Chunk], k: int
) -> list[tuple[Sentence, Cloze]]:
    """Up to `k` cloze cards of a chunk group, each with its sentence, most central first."""
    found = sentences(chunks)
    if not found:
        return []
    vectors = await embedder.embed([s.text for s in found])
    counts = term_counts([s.text for s in found])
    cards: list[tuple[Sentence, Cloze]] = []
    for i, _ in most_central(vectors, len(found)):
        used = frozenset(made.answer.lower() for _, made in cards)
        made = key_term_cloze(found[i].text, counts, used)
        if made is not None:
            cards.append((found[i], made))
        if len(cards) == k:
            break
    return cards
