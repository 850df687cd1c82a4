"""Chunks as the local methods read them: their sentences, and their heading paths."""

from __future__ import annotations

from knowledgeops.files.chunk_store import Chunk
from knowledgeops.text.sentences import sentences

# How a chunk's heading path joins its headings (knowledgeops/ingest/parsing.py writes it).
HEADING_SEPARATOR = " > "


def heading_path(chunk: Chunk) -> list[str]:
    """The headings the chunk stands under, outermost first."""
    if not chunk.heading:
        return []
    return [h.strip() for h in chunk.heading.split(HEADING_SEPARATOR)]


def sentences_of(chunk: Chunk) -> list[str]:
    """The chunk's sentences; a line that is one of its headings is never part of one, even
    where nothing else marks it (PDF, HTML and DOCX text)."""
    return sentences(chunk.text, heading_path(chunk))


def passages(chunks: list[Chunk]) -> str:
    """Chunk text as a model reads it: each passage marked with the index it is cited by."""
    return "\n\n".join(
        f"[chunk {c.index}]" + (f" ({c.heading})" if c.heading else "") + f"\n{c.text}"
        for c in chunks
    )
