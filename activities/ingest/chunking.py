"""Token-aware chunking of parsed sections into the chunk store (the chunk step)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from semantic_text_splitter import MarkdownSplitter, TextSplitter

from activities.ingest.parsing import Section
from activities.ingest.sections import read_sections, with_ocr_pages
from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.errors import DocumentError
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
) -> None:
    for section in sections:
        for piece in splitter.chunks(section.text):
            if piece.strip():
                if max_chunks is not None and writer.count >= max_chunks:
                    raise DocumentError(
                        "DocumentTooLarge",
                        f"the document yields more than {max_chunks} chunks "
                        "(MAX_DOCUMENT_CHUNKS); split it into smaller documents",
                    )
                writer.add(piece, content_hash(piece), section.page, section.heading)


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
        write_chunks(
            sections,
            splitters.markdown if markdown else splitters.text,
            writer,
            max_chunks,
        )
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
