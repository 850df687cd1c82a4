"""Chunk boundaries are content-defined: an edit re-cuts only the text near it, so an edited
document re-embeds a few chunks, not every chunk after the edit until the packing realigns
(issue 29: 10 chunks for a two-paragraph edit). Measured on the chunk step's real output (the
parse step, then the chunk step), counting chunks whose content hash (the embedding cache's key)
is new."""

from __future__ import annotations

import re
from pathlib import Path

from semantic_text_splitter import TextSplitter

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.files.chunk_store import Chunk, ChunkReader
from knowledgeops.ingest.chunking import TOKENIZER_MODEL, chunk_sections
from knowledgeops.ingest.parsing import TEXT_BLOCK_BYTES
from knowledgeops.ingest.sections import extract_sections
from tests.helpers.documents import edited_copy, varied_paragraphs

DEFAULT = ChunkingOptions()  # 512 tokens, as imports chunk unless told otherwise


def chunks_of(tmp_path: Path, name: str, text: str) -> tuple[int, list[Chunk]]:
    """(sections parsed, chunks) of a file with this text, through the parse and chunk steps."""
    source = tmp_path / name
    source.write_text(text)
    sections = tmp_path / f"{name}.sections.jsonl"
    parsed = extract_sections(source, name, name, sections)
    chunk_sections(sections, tmp_path / "c", name, "v1", DEFAULT, markdown=name.endswith(".md"))
    return parsed.sections, ChunkReader(tmp_path / "c", name, "v1").read(0, 100_000)


def re_embedded(tmp_path: Path, original: str, edited: str, suffix: str = ".txt") -> int:
    """Chunks of the edited copy that the original's embeddings do not cover."""
    _, before = chunks_of(tmp_path, "original" + suffix, original)
    _, after = chunks_of(tmp_path, "edited" + suffix, edited)
    known = {c.content_hash for c in before}
    return sum(c.content_hash not in known for c in after)


def test_an_edit_re_embeds_only_the_chunks_near_it(tmp_path: Path) -> None:
    paragraphs = varied_paragraphs(1200)
    original = "\n\n".join(paragraphs) + "\n"
    # The edit: one paragraph inserted near the start, one rewritten in the middle.
    # Greedy packing re-embedded 7 chunks of this document (2 to 47 over 20 like it).
    assert re_embedded(tmp_path, original, "\n\n".join(edited_copy(paragraphs)) + "\n") <= 4
    _, chunks = chunks_of(tmp_path, "again.txt", original)
    at_size = TextSplitter.from_tiktoken_model(TOKENIZER_MODEL, DEFAULT.chunk_tokens)
    at_half = TextSplitter.from_tiktoken_model(TOKENIZER_MODEL, DEFAULT.chunk_tokens // 2)
    # The splitter still judges size: no chunk is over the limit, and few are small.
    assert all(len(at_size.chunks(c.text)) == 1 for c in chunks)
    assert sum(len(at_half.chunks(c.text)) > 1 for c in chunks) > 0.8 * len(chunks)
    # Every paragraph is whole in one chunk (none is too long for one).
    for i in (0, 1, 599, 1199):
        assert sum(paragraphs[i] in c.text for c in chunks) == 1


def test_paragraphs_of_one_length_do_not_repack_every_chunk(tmp_path: Path) -> None:
    # Greedy packing never realigns here: every chunk after the insertion changed.
    paragraphs = [p.split(": ")[0] + ": river delta tide" * 30 for p in varied_paragraphs(400)]
    original = "\n\n".join(paragraphs) + "\n"
    assert re_embedded(tmp_path, original, "\n\n".join(edited_copy(paragraphs)) + "\n") <= 4


def test_a_file_of_many_blocks_keeps_its_block_ends(tmp_path: Path) -> None:
    # A text file is parsed in blocks of about TEXT_BLOCK_BYTES; were a block's end the last
    # break before that size, text inserted near the start would move every later block's end
    # (13 to 22 chunks re-embedded for such an edit, over three such files).
    paragraphs = varied_paragraphs(6000, seed=1)
    original = "\n\n".join(paragraphs) + "\n"
    assert len(original) > 3 * TEXT_BLOCK_BYTES
    inserted = varied_paragraphs(8, seed=99)  # ~1,200 tokens: a page pasted in
    edited = "\n\n".join([*paragraphs[:3], *inserted, *paragraphs[3:]]) + "\n"
    sections, _ = chunks_of(tmp_path, "blocks.txt", original)
    assert sections >= 3
    assert re_embedded(tmp_path, original, edited) <= 6


def test_lines_without_blank_lines_between_them_are_cut_at_lines(tmp_path: Path) -> None:
    # One paragraph a line, as Chinese text often comes: no blank line anywhere.
    lines = [re.sub(r"\s+", " ", p) for p in varied_paragraphs(1200, seed=2)]
    original = "\n".join(lines) + "\n"
    edited = "\n".join(edited_copy(lines)) + "\n"
    assert re_embedded(tmp_path, original, edited) <= 4
    _, chunks = chunks_of(tmp_path, "lines-again.txt", original)
    assert all(any(c.text.startswith(line) for line in lines[:40]) for c in chunks[:3])


def test_a_fenced_code_block_is_not_cut_at_its_blank_lines(tmp_path: Path) -> None:
    code = "\n\n".join(f"def step_{i}(x):\n    return x + {i}" for i in range(20))
    text = "# Steps\n\n" + "\n\n".join(varied_paragraphs(12, seed=3)) + "\n\n```python\n"
    text += code + "\n```\n\n" + "\n\n".join(varied_paragraphs(12, seed=4)) + "\n"
    _, chunks = chunks_of(tmp_path, "steps.md", text)
    assert len(chunks) > 3
    [block] = [c for c in chunks if "def step_0(" in c.text]
    assert "```python\n" + code + "\n```" in block.text


def test_a_heading_line_stays_with_the_text_after_it(tmp_path: Path) -> None:
    paragraphs = varied_paragraphs(600, seed=5)
    parts = [f"Chapter {n // 4}\n\n{p}" if n % 4 == 0 else p for n, p in enumerate(paragraphs)]
    _, chunks = chunks_of(tmp_path, "chapters.txt", "\n\n".join(parts) + "\n")
    assert not [c.text[-40:] for c in chunks if re.search(r"\nChapter \d+$", c.text)]
    assert sum(c.text.startswith("Chapter ") for c in chunks) > len(chunks) / 4
