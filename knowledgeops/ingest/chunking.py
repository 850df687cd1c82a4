"""Token-aware chunking of parsed sections into the chunk store (the chunk step).

A section is cut into pieces of at most the chunk size at content-defined breaks (boundaries.py:
an edit moves only the cuts near it, so an edited document re-embeds few chunks); a piece that
would be too small to be worth searching (a heading alone, "1.", half a phrase) is merged into
a neighbour here, and every chunk records the heading path search indexes with it
(`Chunk.context`).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from semantic_text_splitter import MarkdownSplitter, TextSplitter

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.errors import DocumentError
from knowledgeops.files.chunk_store import ChunkWriter, index_text_of
from knowledgeops.ingest.boundaries import ContentDefinedSplitter
from knowledgeops.ingest.parsing import Section
from knowledgeops.ingest.sections import read_sections, with_ocr_pages

# Token counts follow OpenAI's cl100k vocabulary; the splitter ships it, so no download.
TOKENIZER_MODEL = "gpt-3.5-turbo"

# Pieces with fewer characters than this (heading markers aside) are merged into a neighbour.
# Measured: chunks under 40 characters (a heading, "1.", a fragment) were 7% of those on
# public retrieval sets, and they match as noise. 80 is one short English sentence or two
# Chinese ones, about the least that states something, and small beside a default chunk
# (512 tokens: ~2,300 English or ~370 Chinese characters), so a merged one stays near its size.
MIN_CHUNK_CHARACTERS = 80

# A run of heading-only sections (a table of contents) longer than this becomes a chunk of its
# own rather than being carried further, so what is held back stays small.
MAX_CARRY_CHARACTERS = 4000

# ATX heading markers at a line start; a setext heading's underline; a line of a heading.
_MARKERS = re.compile(r"^[ \t]{0,3}#{1,6}(?=\s|$)", re.MULTILINE)
_UNDERLINE = re.compile(r"[ \t]{0,3}(=+|-+)[ \t]*")
_HEADING_LINE = re.compile(r"[ \t]{0,3}#{1,6}(\s.*)?|" + _UNDERLINE.pattern)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class Splitters:
    """The text splitters (token-aware; they judge every chunk's size and cut what is too long
    for one at its sentences) and the chunk size they were built for."""

    text: TextSplitter
    markdown: MarkdownSplitter
    tokens: int
    # The same without overlap: what judges whether a span fits (boundaries.py).
    text_judge: TextSplitter
    markdown_judge: MarkdownSplitter

    @classmethod
    def create(cls, options: ChunkingOptions) -> Splitters:
        return _splitters(
            options.chunk_tokens, min(options.overlap_tokens, options.chunk_tokens - 1)
        )

    def sections(self, markdown: bool) -> ContentDefinedSplitter:
        """What cuts a section into chunks."""
        if markdown:
            return ContentDefinedSplitter(self.markdown, self.tokens, True, self.markdown_judge)
        return ContentDefinedSplitter(self.text, self.tokens, False, self.text_judge)


@functools.lru_cache(maxsize=4)
def _splitters(tokens: int, overlap: int) -> Splitters:
    # Built once per (size, overlap) in a warm parser process: loading the vocabulary took
    # ~60 ms, longer than chunking a one-page document (profiled).
    text = TextSplitter.from_tiktoken_model(TOKENIZER_MODEL, tokens, overlap)
    markdown = MarkdownSplitter.from_tiktoken_model(TOKENIZER_MODEL, tokens, overlap)
    if overlap:
        judges = (
            TextSplitter.from_tiktoken_model(TOKENIZER_MODEL, tokens),
            MarkdownSplitter.from_tiktoken_model(TOKENIZER_MODEL, tokens),
        )
    else:
        judges = (text, markdown)
    return Splitters(text, markdown, tokens, *judges)


def headings_only(text: str) -> bool:
    """Markdown heading lines and whitespace, nothing else."""
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and all(_HEADING_LINE.fullmatch(line) for line in lines)


def _bare(text: str) -> str:
    """Text without heading markup, its whitespace collapsed (for comparing with a heading)."""
    lines = (line for line in _MARKERS.sub("", text).splitlines() if not _UNDERLINE.fullmatch(line))
    return " ".join(" ".join(lines).split())


def content_length(text: str) -> int:
    """Characters that count towards MIN_CHUNK_CHARACTERS: heading markers and the whitespace
    around the text do not."""
    return len(_MARKERS.sub("", text).strip())


def heading_context(text: str, heading: str | None) -> str | None:
    """The heading path to index with `text`, unless the text begins with its heading."""
    if not heading:
        return None
    last = " ".join(heading.rsplit(" > ", 1)[-1].split())
    start = " ".join(text.lstrip().lstrip("#")[: len(last) + 64].split())
    return None if start.startswith(last) else heading


def _section_is_heading(section: Section) -> bool:
    """Only heading lines, or only the text of its heading (a PDF title page, an HTML heading
    with nothing under it before the next one)."""
    if headings_only(section.text):
        return True
    if not section.heading:
        return False
    heading = section.heading
    return _bare(section.text) in {_bare(heading), _bare(heading.rsplit(" > ", 1)[-1])}


@dataclass(frozen=True)
class _Part:
    """A piece on its way to becoming a chunk (or some merged ones)."""

    text: str
    page: int | None
    heading: str | None
    section: int  # the section its last piece came from
    end: int  # where that piece ends in the section's text
    size: int  # content_length; 0 when headings only (a heading never names a chunk's page)

    @classmethod
    def of(cls, text: str, page: int | None, heading: str | None, section: int, end: int) -> _Part:
        size = 0 if headings_only(text) else content_length(text)
        return cls(text, page, heading, section, end, size)

    @property
    def small(self) -> bool:
        return self.size < MIN_CHUNK_CHARACTERS


def _join(first: _Part, second: _Part, section_text: str | None) -> _Part:
    """`first` followed by `second`; the larger names the page and heading (so a heading
    carried over, or a stray line of the previous page, does not)."""
    if section_text is not None and first.section == second.section:
        # Pieces of one section: the text between them as written, an overlap only once.
        text = first.text + section_text[first.end : second.end]
    else:
        text = f"{first.text}\n\n{second.text}"
    larger = first if first.size > second.size else second
    return _Part.of(text, larger.page, larger.heading, second.section, second.end)


class _Merger:
    """Holds back at most one chunk (`pending`, which a tail fragment may still join) and
    one small part (`carry`, which the next piece starts with), so memory stays flat."""

    def __init__(self, writer: ChunkWriter, max_chunks: int | None) -> None:
        self.writer = writer
        self.max_chunks = max_chunks
        self.pending: _Part | None = None
        self.carry: _Part | None = None

    def heading(self, part: _Part) -> None:
        """A heading with nothing under it (yet): it goes with the text that follows."""
        self.carry = part if self.carry is None else _join(self.carry, part, None)
        if len(self.carry.text) > MAX_CARRY_CHARACTERS:
            self._hold(self.carry)
            self.carry = None

    def piece(self, part: _Part, section_text: str, last: bool) -> None:
        if self.carry is not None:
            part = _join(self.carry, part, section_text)
            self.carry = None
        if not part.small:
            self._hold(part)
        elif part.size == 0:
            self.heading(part)  # a heading goes forward, with what is under it
        elif last and self.pending is not None and self.pending.section == part.section:
            # A section's last piece, cut off by the splitter: it goes with the one before it.
            self.pending = _join(self.pending, part, section_text)
        else:
            # A leading fragment (or a section's only, small, piece): the next piece starts
            # with it, across a section or page only because it would otherwise stand alone.
            self.carry = part

    def finish(self) -> None:
        if self.carry is not None:
            # Left at the end: it joins the last chunk, or is the whole (small) document.
            self.pending = (
                self.carry if self.pending is None else _join(self.pending, self.carry, None)
            )
            self.carry = None
        if self.pending is not None:
            self._write(self.pending)
            self.pending = None

    def _hold(self, part: _Part) -> None:
        if self.pending is not None:
            self._write(self.pending)
        self.pending = part

    def _write(self, part: _Part) -> None:
        if self.max_chunks is not None and self.writer.count >= self.max_chunks:
            raise DocumentError(
                "DocumentTooLarge",
                f"the document yields more than {self.max_chunks} chunks "
                "(MAX_DOCUMENT_CHUNKS); split it into smaller documents",
            )
        context = heading_context(part.text, part.heading)
        self.writer.add(
            part.text,
            content_hash(index_text_of(part.text, context)),
            part.page,
            part.heading,
            context,
        )


def write_chunks(
    sections: Iterable[Section],
    splitter: ContentDefinedSplitter,
    writer: ChunkWriter,
    max_chunks: int | None = None,
) -> None:
    """Split each section and write its pieces as chunks, small ones merged (see _Merger)."""
    merger = _Merger(writer, max_chunks)
    for n, section in enumerate(sections):
        if _section_is_heading(section):
            text = section.text.strip()
            merger.heading(_Part(text, section.page, section.heading, n, len(section.text), 0))
            continue
        pieces = [(at, t) for at, t in splitter.chunk_indices(section.text) if t.strip()]
        for k, (at, text) in enumerate(pieces):
            part = _Part.of(text, section.page, section.heading, n, at + len(text))
            merger.piece(part, section.text, last=k == len(pieces) - 1)
    merger.finish()


def chunk_sections(
    sections_file: Path,
    chunks_dir: Path,
    document_id: str,
    version: str,
    options: ChunkingOptions,
    markdown: bool,
    max_chunks: int | None = None,
    ocr: tuple[Path, str, list[int]] | None = None,
) -> int:
    """Split a version's parsed sections (and the OCR'd pages' text, `ocr` = (OCR store folder,
    file id, pages)) into its chunk files; returns the number of chunks. Streams section by
    section, so memory does not grow with the document."""
    splitters = Splitters.create(options)
    writer = ChunkWriter(chunks_dir, document_id, version)
    try:
        sections = read_sections(sections_file)
        if ocr is not None:
            sections = with_ocr_pages(sections, *ocr)
        write_chunks(sections, splitters.sections(markdown), writer, max_chunks)
        if writer.count == 0:
            raise DocumentError(
                "EmptyDocument",
                "the document contains no text to index"
                + (" (OCR found none on its pages either)" if ocr else ""),
            )
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return writer.count
