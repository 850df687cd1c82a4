"""Token-aware chunking of parsed sections into the chunk store."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from semantic_text_splitter import MarkdownSplitter, TextSplitter

from activities.ingest.parsing import Section, parse
from knowledgeops.contracts.document_import import ChunkingOptions, ParseResult
from knowledgeops.errors import DocumentError
from knowledgeops.formats import detect_format
from knowledgeops.stores.chunk_store import ChunkWriter

# Token counts follow OpenAI's cl100k vocabulary; the splitter ships it, so no download.
TOKENIZER_MODEL = "gpt-3.5-turbo"


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class Splitters:
    text: TextSplitter
    markdown: MarkdownSplitter

    @classmethod
    def create(cls, options: ChunkingOptions) -> Splitters:
        overlap = min(options.overlap_tokens, options.chunk_tokens - 1)
        return cls(
            text=TextSplitter.from_tiktoken_model(TOKENIZER_MODEL, options.chunk_tokens, overlap),
            markdown=MarkdownSplitter.from_tiktoken_model(
                TOKENIZER_MODEL, options.chunk_tokens, overlap
            ),
        )


def write_chunks(
    sections: Iterable[Section],
    splitter: TextSplitter | MarkdownSplitter,
    writer: ChunkWriter,
    max_chunks: int | None = None,
    max_characters: int | None = None,
) -> int:
    """Checked as the text comes out of the parser: a small compressed file can expand to
    far more than anyone wants indexed, so stop at the limit instead of after it."""
    characters = 0
    for section in sections:
        characters += len(section.text)
        if max_characters is not None and characters > max_characters:
            raise DocumentError(
                "DocumentTooLarge",
                f"the document holds more than {max_characters} characters of text "
                "(MAX_DOCUMENT_CHARACTERS); split it into smaller documents",
            )
        for piece in splitter.chunks(section.text):
            if piece.strip():
                if max_chunks is not None and writer.count >= max_chunks:
                    raise DocumentError(
                        "DocumentTooLarge",
                        f"the document yields more than {max_chunks} chunks "
                        "(MAX_DOCUMENT_CHUNKS); split it into smaller documents",
                    )
                writer.add(piece, content_hash(piece), section.page, section.heading)
    return characters


def parse_and_chunk(
    path: Path,
    filename: str,
    document_id: str,
    chunks_dir: Path,
    options: ChunkingOptions,
    max_chunks: int | None = None,
    max_characters: int | None = None,
) -> ParseResult:
    """Parse a stored file and write its chunks; runs inside the parser subprocess."""
    fmt = detect_format(path, filename or path.name)
    splitters = Splitters.create(options)
    splitter = splitters.markdown if fmt == "md" else splitters.text
    writer = ChunkWriter(chunks_dir, document_id)
    pages: list[int] = []
    title: list[str] = []

    def observed(sections: Iterable[Section]) -> Iterable[Section]:
        for s in sections:
            if s.page is not None:
                pages.append(s.page)
            if not title and s.heading:
                title.append(s.heading.split(" > ")[0])
            yield s

    try:
        characters = write_chunks(
            observed(parse(path, fmt, filename)), splitter, writer, max_chunks, max_characters
        )
        if writer.count == 0:
            hint = " (a scanned PDF needs OCR_PROCESS)" if fmt == "pdf" else ""
            raise DocumentError(
                "EmptyDocument", f"{filename or path.name} contains no extractable text{hint}"
            )
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return ParseResult(
        document_id=document_id,
        format=fmt,
        total_chunks=writer.count,
        pages=_page_count(path) if fmt == "pdf" else None,
        title=title[0] if title else None,
        characters=characters,
    )


def _page_count(path: Path) -> int:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        return len(pdf)
    finally:
        pdf.close()
