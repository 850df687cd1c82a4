"""The diagnosis without a chat model: key terms (the local method of the glossary, from
`artifacts_local`) as the key concepts, and a Flesch-Kincaid readability grade as the
difficulty. Prerequisites and gaps need a model: the diagnosis says so.

Each chunk group is counted on its own (the map step: its strongest terms, its sentences,
words and syllables, small enough to store), then the groups are added up (the reduce step).
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from knowledgeops.contracts.analysis import AnalysisOutput, Concept, Diagnosis, Readability
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.learning import artifacts_local as local
from knowledgeops.text.terms import words as words_of

LOCAL_METHOD = "local:key-terms+readability"
_SENTENCE_END = re.compile(r"[.!?。！？](?:\s|$)")
_VOWEL_GROUPS = re.compile(r"[aeiouy]+")


class LocalDiagnosisGroup(BaseModel):
    terms: list[local.TermStat]
    sentences: int
    words: int
    syllables: int


def _syllables(word: str) -> int:
    groups = len(_VOWEL_GROUPS.findall(word.lower()))
    if word.lower().endswith("e") and groups > 1:
        groups -= 1  # a silent final e
    return max(1, groups)


def collect_local(chunks: list[Chunk]) -> LocalDiagnosisGroup:
    words = [w for c in chunks for w in words_of(c.text)]
    return LocalDiagnosisGroup(
        terms=local.strongest(local.term_stats(chunks), 50),
        sentences=sum(len(_SENTENCE_END.findall(c.text + " ")) for c in chunks),
        words=len(words),
        syllables=sum(_syllables(w) for w in words),
    )


def diagnose_locally(out: AnalysisOutput, groups: list[LocalDiagnosisGroup]) -> None:
    terms = local.key_terms([g.terms for g in groups], 10)
    concepts = [Concept(name=t.term, explanation=t.sentence, chunk=t.chunk) for t in terms]
    sentences, words = sum(g.sentences for g in groups), sum(g.words for g in groups)
    syllables = sum(g.syllables for g in groups)
    difficulty, reason = "unknown", "too little English-like text to measure readability"
    if words >= 50 and sentences:
        wps, spw = words / sentences, syllables / words
        grade = round(0.39 * wps + 11.8 * spw - 15.59, 1)
        out.readability = Readability(
            sentences=sentences,
            words=words,
            words_per_sentence=round(wps, 1),
            syllables_per_word=round(spw, 2),
            grade=grade,
        )
        difficulty = "introductory" if grade < 9 else "intermediate" if grade < 13 else "advanced"
        reason = (
            f"Flesch-Kincaid grade {grade} ({wps:.1f} words per sentence, "
            f"{spw:.2f} syllables per word)"
        )
    out.diagnosis = Diagnosis(
        key_concepts=concepts,
        difficulty=difficulty,
        difficulty_reason=reason,
        prerequisites=[],
        gaps=[],
    )
    out.notes.append(
        "Made without a chat model: key concepts are recurring terms with their defining "
        "sentence, difficulty is a readability grade. Prerequisites and gaps need a chat model "
        "(set CHAT_MODEL)."
    )
