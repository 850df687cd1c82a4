"""The local text toolkit (`knowledgeops/text/`) and the local methods built on it, on English
and Chinese documents (the files of `examples/`, parsed and chunked as an import does, and
short Markdown texts): sentences carry no Markdown markers and no heading glued to them, a
cloze card has exactly one blank, a Chinese term can be blanked, a function word never is."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.contracts.review_cards import CLOZE_BLANK
from knowledgeops.files.chunk_store import Chunk, ChunkReader
from knowledgeops.ingest.chunking import chunk_sections
from knowledgeops.ingest.sections import extract_sections
from knowledgeops.learning import artifacts_local as artifacts
from knowledgeops.learning import review_cards_local as review_cards
from knowledgeops.text.cloze import Cloze, cloze
from knowledgeops.text.sentences import sentences
from knowledgeops.text.terms import term_counts
from tests.helpers.environment import ROOT

EXAMPLES = ROOT / "examples"
# What no sentence or card may show: heading markers, bullets, emphasis, code ticks, links.
MARKDOWN = re.compile(r"(^|\s)#{1,6}\s|^[-*+>]\s|\*\*|__|`|\]\(|\[[^\]]*\]|(^|\s)[*_]\w")
# Words a card must never ask for.
FUNCTION_WORDS = {"the", "a", "an", "so", "next", "of", "and", "is", "are", "it", "its", "their"}
FUNCTION_CHARS = set("的了是在和与")

EN_MARKDOWN = """# Durable execution with Temporal

Temporal runs **long, fault-tolerant** processes called *workflows*. A workflow is
ordinary code, see [the docs](https://docs.temporal.io) and `temporal.workflow`.

## Retries

- An activity that fails is retried with a _backoff_ between attempts.
- Errors marked non-retryable fail at once.

> The next attempt resumes from the last heartbeat.

```python
# A comment. Not a sentence at all.
print("Not prose either.")
```
"""

ZH_MARKDOWN = """# 向量检索简介

**向量检索**把文本转换成高维向量，再通过计算相似度找到语义上最接近的内容。

## 文本分块

- 长文档在嵌入之前需要切分成较小的块。
- 块太大时语义被稀释，块太小时上下文不足。
"""


class BagOfWords:
    """A deterministic stand-in for the embedder: counts of words and CJK characters."""

    model_id = "test:bag-of-words"

    async def embed(self, texts: Sequence[str], on_wait: object = None) -> list[list[float]]:
        tokens = [re.findall(r"[a-z]+|[\u4e00-\u9fff]", t.lower()) for t in texts]
        vocab = sorted({w for ws in tokens for w in ws}) or ["-"]
        return [[float(ws.count(w)) + 0.01 for w in vocab] for ws in tokens]


def import_chunks(tmp_path: Path, name: str) -> list[Chunk]:
    """An example file parsed and chunked as a document import does (default chunk size)."""
    sections = tmp_path / "doc.sections.jsonl"
    parsed = extract_sections(EXAMPLES / name, name, "doc", sections)
    chunks_dir = tmp_path / "chunks"
    options = ChunkingOptions()
    chunk_sections(sections, chunks_dir, "doc", "v1", options, markdown=parsed.format == "md")
    reader = ChunkReader(chunks_dir, "doc", "v1")
    try:
        return reader.read(0, reader.count)
    finally:
        reader.close()


def collapse(text: str) -> str:
    return " ".join(text.split())


def assert_no_markdown(texts: Sequence[str]) -> None:
    for text in texts:
        assert not MARKDOWN.search(text.replace(CLOZE_BLANK, "blank")), text


# -- sentences --------------------------------------------------------------------------------


def test_markdown_markers_are_removed_and_code_is_no_prose() -> None:
    assert sentences(EN_MARKDOWN) == [
        "Temporal runs long, fault-tolerant processes called workflows.",
        "A workflow is ordinary code, see the docs and temporal.workflow.",
        "An activity that fails is retried with a backoff between attempts.",
        "Errors marked non-retryable fail at once.",
        "The next attempt resumes from the last heartbeat.",
    ]
    assert sentences(ZH_MARKDOWN) == [
        "向量检索把文本转换成高维向量，再通过计算相似度找到语义上最接近的内容。",
        "长文档在嵌入之前需要切分成较小的块。",
        "块太大时语义被稀释，块太小时上下文不足。",
    ]


def test_a_heading_on_a_bare_line_is_never_merged_into_the_next_sentence() -> None:
    # As PDF, HTML and DOCX text has them: headings on lines of their own, no markup.
    pdf_page = (
        "Groundwater\nSome precipitation infiltrates the soil and recharges aquifers. "
        "Groundwater can stay underground for\nthousands of years before reaching a spring."
    )
    assert sentences(pdf_page) == [
        "Some precipitation infiltrates the soil and recharges aquifers.",
        "Groundwater can stay underground for thousands of years before reaching a spring.",
    ]
    docx = (
        "Study plan\nWeek 1: functional groups\nLearn to recognise alcohols, aldehydes, "
        "ketones, carboxylic acids, esters and amines."
    )
    assert sentences(docx) == [
        "Learn to recognise alcohols, aldehydes, ketones, carboxylic acids, esters and amines."
    ]
    # A line wrapped inside a sentence is joined, with a space in English, none in Chinese,
    # also where the next line starts with a name (a wrapped line fills the width).
    wrapped = (
        "Reviews are spread over growing intervals of time to fight forgetting.\n"
        "The method was made popular in the late eighties by the researcher\n"
        "Piotr Wozniak, who wrote the first spaced repetition program for computers."
    )
    assert sentences(wrapped) == [
        "Reviews are spread over growing intervals of time to fight forgetting.",
        "The method was made popular in the late eighties by the researcher Piotr Wozniak, "
        "who wrote the first spaced repetition program for computers.",
    ]
    assert sentences("文本分块\n长文档在嵌入之前需要\n切分成较小的块。") == [
        "长文档在嵌入之前需要切分成较小的块。"
    ]
    # A heading the chunk names is left out even where it looks like prose.
    assert sentences("Why rivers flood\nHeavy rain is the cause.", ["Why rivers flood"]) == [
        "Heavy rain is the cause."
    ]


@pytest.mark.parametrize(
    ("name", "headings"),
    [
        ("water-cycle.pdf", ["The water cycle", "Groundwater", "Human impact"]),
        ("photosynthesis.html", ["Photosynthesis", "Light-dependent reactions", "Calvin cycle"]),
        (
            "chemistry-plan.docx",
            [
                "Study plan for organic chemistry",
                "Week 1: functional groups",
                "Week 2: reaction mechanisms",
            ],
        ),
        ("temporal-retries.md", ["Durable execution with Temporal", "Heartbeats"]),
        ("向量检索.md", ["向量检索简介", "文本分块", "重复导入"]),
    ],
)
def test_summary_sentences_of_the_examples_have_no_heading_and_no_markers(
    tmp_path: Path, name: str, headings: list[str]
) -> None:
    chunks = import_chunks(tmp_path, name)
    found = [text for text, _ in artifacts.chunk_sentences(chunks)]
    leads = [p.text for p in artifacts.leading_sentences(chunks)]
    assert found and leads
    assert_no_markdown(found + leads)
    source = collapse(" ".join(c.text for c in chunks))
    for text in found:
        # A heading glued on would stand before the sentence's own capital (or, in Chinese,
        # right before it).
        assert not any(
            re.match(re.escape(h) + r"(\s+[A-Z]|\s*[\u4e00-\u9fff])", text) for h in headings
        ), text
        # Each is a sentence of the document as written (these files have no inline markup).
        assert text in source or collapse(text).replace(" ", "") in source.replace(" ", ""), text


def test_the_water_cycle_summary_starts_where_the_section_text_starts(tmp_path: Path) -> None:
    chunks = import_chunks(tmp_path, "water-cycle.pdf")
    found = [text for text, _ in artifacts.chunk_sentences(chunks)]
    assert "Some precipitation infiltrates the soil and recharges aquifers." in found
    assert "Dams, irrigation and urban surfaces change how water moves." in found
    assert not [s for s in found if "Groundwater Some" in s or "Human impact Dams" in s]


# -- cloze ------------------------------------------------------------------------------------


def test_cloze_blanks_exactly_one_occurrence_of_a_real_term() -> None:
    sentence = "The heartbeat can carry a checkpoint, so the next attempt resumes instead."
    assert cloze(sentence, "checkpoint") == Cloze(
        "The heartbeat can carry a ____, so the next attempt resumes instead.", "checkpoint"
    )
    assert CLOZE_BLANK == "____"
    # Case-insensitive, the answer as the sentence writes it; whole words only.
    assert cloze(sentence, "HEARTBEAT") == Cloze(
        "The ____ can carry a checkpoint, so the next attempt resumes instead.", "heartbeat"
    )
    assert cloze("The by-product is oxygen.", "product") is None
    # Function words and short words are no terms; neither is a term written twice.
    for word in ("next", "the", "so", "can"):
        assert cloze(sentence, word) is None, word
    assert cloze("Temporal retries it, and Temporal records it.", "Temporal") is None


def test_cloze_blanks_a_chinese_term_without_word_boundaries() -> None:
    assert cloze("向量检索把文本转换成高维向量。", "文本") == Cloze(
        "向量检索把____转换成高维向量。", "文本"
    )
    # English inside Chinese text: no \b falls between 用 and T.
    assert cloze("使用Temporal运行工作流。", "Temporal") == Cloze(
        "使用____运行工作流。", "Temporal"
    )
    # A function character, a phrase with 的, a term written twice: refused.
    assert cloze("块太大时语义被稀释的原因。", "的") is None
    assert cloze("块太大时语义的稀释。", "语义的") is None
    assert cloze("向量检索把文本转换成高维向量。", "向量") is None


# -- the local methods ------------------------------------------------------------------------


class Card(NamedTuple):
    front: str
    back: str
    chunk: Chunk


async def cards_of(tmp_path: Path, name: str) -> list[Card]:
    chunks = import_chunks(tmp_path, name)
    cards = await review_cards.key_sentence_cards(BagOfWords(), chunks, 20)
    return [Card(made.front, made.answer, s.chunk) for s, made in cards]


def check_cards(cards: Sequence[Card]) -> None:
    assert cards
    assert_no_markdown([c.front for c in cards])
    for c in cards:
        assert c.front.count(CLOZE_BLANK) == 1, c.front
        assert c.back.lower() not in FUNCTION_WORDS and not set(c.back) & FUNCTION_CHARS, c
        filled = collapse(c.front.replace(CLOZE_BLANK, c.back))
        # The blanked sentence, term filled in, is a sentence of the card's chunk; the term
        # does not show anywhere else in the front.
        assert filled.replace(" ", "") in collapse(c.chunk.text).replace(" ", ""), c
        edges = "" if re.search(r"[\u4e00-\u9fff]", c.back) else r"\b"
        assert not re.search(edges + re.escape(c.back) + edges, c.front, re.I), c


async def test_english_cards_have_one_blank_no_heading_and_no_function_word(
    tmp_path: Path,
) -> None:
    cards = await cards_of(tmp_path, "temporal-retries.md")
    check_cards(cards)
    assert not [c for c in cards if "Durable execution" in c.front]
    by_front = {c.front.replace(CLOZE_BLANK, c.back): c.back for c in cards}
    # The heading no longer leads this sentence (it was "# Durable execution with ____ ____
    # runs ...": the heading kept, its term blanked twice).
    assert "Temporal runs long, fault-tolerant processes called workflows." in by_front
    # "next" is no term: this card asks for a word that is.
    resumes = "The heartbeat can carry a checkpoint, so the next attempt resumes instead of "
    assert by_front.get(resumes + "starting over.") not in (None, "next", "so", "the")


def test_a_card_never_asks_for_a_function_word_even_when_the_terms_are_used_up() -> None:
    text = Path(EXAMPLES / "temporal-retries.md").read_text()
    found = sentences(text)
    resumes = next(s for s in found if "next attempt resumes" in s)
    # "heartbeat" and "attempt" were asked by earlier cards: "next" recurs as often as they
    # do, but it is no term.
    made = review_cards.key_term_cloze(
        resumes, term_counts(found), frozenset({"heartbeat", "attempt"})
    )
    assert made == Cloze(
        "The heartbeat can carry a ____, so the next attempt resumes instead of starting over.",
        "checkpoint",
    )


async def test_chinese_cards_blank_chinese_terms(tmp_path: Path) -> None:
    cards = await cards_of(tmp_path, "向量检索.md")
    check_cards(cards)
    assert all(re.fullmatch(r"[\u4e00-\u9fff]{2,4}|[A-Za-z]+", c.back) for c in cards), cards
    assert sum(bool(re.fullmatch(r"[\u4e00-\u9fff]+", c.back)) for c in cards) >= 3
    # A fragment of a longer term that never occurs alone ("向量检" of "向量检索") is no term.
    assert not {c.back for c in cards} & {"向量检", "量检索", "量检"}


async def test_cards_and_quiz_of_the_other_examples(tmp_path: Path) -> None:
    for name in ("water-cycle.pdf", "photosynthesis.html", "spaced-repetition.txt"):
        check_cards(await cards_of(tmp_path / name, name))
    chunks = import_chunks(tmp_path / "quiz", "spaced-repetition.txt")
    picks = await artifacts.central_sentences(BagOfWords(), artifacts.chunk_sentences(chunks), 30)
    terms = artifacts.key_terms([artifacts.term_stats(chunks)], 30)
    quiz = artifacts.cloze_quiz(picks, terms, 10)
    assert len(quiz) >= 3
    for q in quiz:
        assert q.question.count(CLOZE_BLANK) == 1, q
        assert q.answer.lower() not in FUNCTION_WORDS
        filled = collapse(q.question.replace(CLOZE_BLANK, q.answer)).lower()
        assert filled in collapse(" ".join(c.text for c in chunks)).lower(), q
