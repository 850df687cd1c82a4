"""Words and terms of English and Chinese text: one stop list, one test of what a term is.

A term is what a learner could be asked for: a content word of four letters or more, a phrase
of content words, or (Chinese writes no spaces) a run of two to four CJK characters that
neither begins nor ends with a function character. Function words are never terms: asking
for "the", "next" or "的" tests nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from knowledgeops.text.cjk import CJK_CHAR, CJK_RUN

# A word: a letter, then letters, digits, apostrophes or hyphens, ending in a letter or digit
# (two characters at least). CJK characters are \w too: `words` takes them out first.
WORD = re.compile(r"[^\W\d_][\w'’-]*[^\W_]")
# A single word shorter than this is too common to be a term (phrases may hold shorter ones).
MIN_TERM_LETTERS = 4
# CJK terms are character n-grams of these lengths (no word segmenter needed).
MIN_CJK_TERM, MAX_CJK_TERM = 2, 4

STOP_WORDS = frozenset(
    """a about above across after again against all also already although always am among
    an and another any anything are around as at able based be because been before being
    below between both but by called can cannot could did do does doing done down during e.g
    each either else etc even every example examples few first following for from further get
    gets got had has have having he her here hers him his how however i i.e if in instead into
    is it its itself just last least less like made make makes many may me might more most
    much must my neither never new next no nor not now of off often on once one only or other
    others ought our ours out over own part parts per rather same second several she should
    since so some such than that the their theirs them then there therefore these they thing
    things third this those though three through thus to too two under until up upon us use
    used uses using usually very via was way ways we well were what when where whether which
    while who whom whose why will with within without would yet you your yours""".split()
)
# Chinese function characters (particles, pronouns, prepositions, conjunctions): a CJK term
# neither begins nor ends with one.
STOP_CHARS = frozenset("的了是在和与及或就也都而把被这那个们我你他她它之为以于上中下")
# The possessive particle joins two terms; it is never inside one.
_NEVER_IN_TERM = "的"


def words(text: str) -> list[str]:
    """The space-separated words of `text`, as written (CJK runs are not words)."""
    return WORD.findall(CJK_RUN.sub(" ", text))


def is_term(term: str) -> bool:
    """Whether `term` is worth asking for (see the module docstring)."""
    if CJK_CHAR.search(term):
        return CJK_RUN.fullmatch(term) is not None and _is_cjk_term(term)
    parts = term.split()
    if not parts or any(WORD.fullmatch(w) is None or w.lower() in STOP_WORDS for w in parts):
        return False
    return len(parts) > 1 or len(parts[0]) >= MIN_TERM_LETTERS


def _is_cjk_term(gram: str) -> bool:
    return (
        MIN_CJK_TERM <= len(gram) <= MAX_CJK_TERM
        and gram[0] not in STOP_CHARS
        and gram[-1] not in STOP_CHARS
        and _NEVER_IN_TERM not in gram
    )


def phrases(text: str, max_words: int) -> list[str]:
    """The terms of up to `max_words` consecutive words in `text`, as first written, each once
    (compared in lower case): single words first, then pairs, then triples."""
    found = words(text)
    seen: set[str] = set()
    out: list[str] = []
    for n in range(1, max_words + 1):
        for i in range(len(found) - n + 1):
            phrase = " ".join(found[i : i + n])
            key = phrase.lower()
            if key not in seen and is_term(phrase):
                seen.add(key)
                out.append(phrase)
    return out


def cjk_terms(text: str) -> set[str]:
    """The CJK terms in `text`: every 2-4 character n-gram of its CJK runs that is a term."""
    found: set[str] = set()
    for run in CJK_RUN.findall(text):
        for n in range(MIN_CJK_TERM, MAX_CJK_TERM + 1):
            for i in range(len(run) - n + 1):
                if _is_cjk_term(run[i : i + n]):
                    found.add(run[i : i + n])
    return found


def sentence_terms(text: str) -> set[str]:
    """The one-word terms of a sentence in lower case, and its CJK terms."""
    return {w.lower() for w in phrases(text, 1)} | cjk_terms(text)


def term_counts(texts: Iterable[str]) -> Counter[str]:
    """In how many of `texts` each of their `sentence_terms` occurs."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(sentence_terms(text))
    return counts


def recurring_terms(text: str, counts: Counter[str]) -> set[str]:
    """The `sentence_terms` of `text` that hold up in its passage (`counts`, by `term_counts`
    over the passage's sentences). Any window of CJK characters occurs once, so a CJK term
    must recur; and one that never occurs outside a longer one ("向量检" of "向量检索") is a
    fragment, not a term."""
    found = sentence_terms(text)
    cjk = {t for t in found if CJK_CHAR.search(t)}
    kept = found - cjk
    for t in cjk:
        fragment = any(t in u and u != t and counts[u] == counts[t] for u in cjk)
        if counts[t] >= 2 and not fragment:
            kept.add(t)
    return kept
