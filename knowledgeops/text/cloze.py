"""Cloze questions: a sentence with one term blanked out.

One blank a card, one occurrence of one term: a term written twice in the sentence is refused
(the other occurrence would give the answer away), and so is anything `terms.is_term` does
not call a term. English terms are matched as whole words; CJK terms anywhere, since Chinese
has no word boundaries (`\\b` never falls inside a run of Chinese characters).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from knowledgeops.contracts.review_cards import CLOZE_BLANK
from knowledgeops.text.cjk import CJK_CHAR, CJK_CHARS
from knowledgeops.text.terms import is_term

# Word edges for English terms: not inside a word or a hyphenated compound, but right next to
# CJK text ("使用Temporal运行"), where \b would not fall.
_START = rf"(?:(?<![\w-])|(?<=[{CJK_CHARS}]))"
_END = rf"(?:(?![\w-])|(?=[{CJK_CHARS}]))"


@dataclass(frozen=True)
class Cloze:
    front: str  # the sentence with the term replaced by CLOZE_BLANK
    answer: str  # the term as the sentence writes it


def cloze(sentence: str, term: str) -> Cloze | None:
    """`sentence` with its one occurrence of `term` blanked (in any letter case), or None
    when the term is no term or does not occur exactly once."""
    term = " ".join(term.split())
    if not is_term(term):
        return None
    found = list(_pattern(term).finditer(sentence))
    if len(found) != 1:
        return None
    match = found[0]
    return Cloze(
        front=sentence[: match.start()] + CLOZE_BLANK + sentence[match.end() :],
        answer=match.group(0),
    )


def _pattern(term: str) -> re.Pattern[str]:
    if CJK_CHAR.search(term):
        return re.compile(re.escape(term))
    words = r"\s+".join(re.escape(w) for w in term.split())
    return re.compile(_START + words + _END, re.IGNORECASE)
