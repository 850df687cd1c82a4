"""A group of small files parsed and chunked in one parser job (DOCUMENT_BATCH_IMPORT).

Runs inside the parser process (knowledgeops/ingest/parser_process.py, mode "many"), so
untrusted content is read where a single import reads it, under the same limits. Each file
goes through exactly the single import's code (`extract_sections`, then `chunk_sections`), so
a file gets the same chunks, title and errors either way; what the group saves is the round
trips: one job instead of two per document (measured: a job's exchange and a warm process's
turn cost more than parsing a one-paragraph note).

A file's own problem (empty, corrupt, unsupported, too long) is its answer, not the job's:
the others go on. A crash or a limit hit by one file ends the whole job; the caller then
runs the group's files one job each, so only that file fails (parse_runner.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.errors import DocumentError
from knowledgeops.files.chunk_store import sections_file
from knowledgeops.ingest.chunking import chunk_sections
from knowledgeops.ingest.parser_process import BatchParseItem
from knowledgeops.ingest.sections import extract_sections

# A file's error message in an answer: enough to act on, never a flood in the answer line.
MESSAGE_CHARS = 2000


def parse_and_chunk_many(
    items: list[BatchParseItem],
    chunks_dir: Path,
    version: str,
    chunking: ChunkingOptions,
    max_characters: int,
    max_chunks: int | None,
) -> list[dict[str, Any]]:
    """One answer per item, in order: {"ok": {chunks, format, title, pages}}, {"ocr": true}
    (scanned pages or an image: the file needs its own import), or {"error": {kind, message}}."""
    return [_one(item, chunks_dir, version, chunking, max_characters, max_chunks) for item in items]


def _one(
    item: BatchParseItem,
    chunks_dir: Path,
    version: str,
    chunking: ChunkingOptions,
    max_characters: int,
    max_chunks: int | None,
) -> dict[str, Any]:
    sections = sections_file(chunks_dir, item.document_id, version)
    try:
        parsed = extract_sections(
            Path(item.path), item.filename, item.document_id, sections, max_characters
        )
        if parsed.ocr:
            return {"ocr": True}
        total = chunk_sections(
            sections,
            chunks_dir,
            item.document_id,
            version,
            chunking,
            parsed.format == "md",
            max_chunks,
        )
    except DocumentError as e:
        return {"error": {"kind": e.kind, "message": e.message[:MESSAGE_CHARS]}}
    except MemoryError:
        return {
            "error": {
                "kind": "DocumentTooComplex",
                "message": f"{item.filename} needs more than the parser's memory limit "
                "(PARSER_MEMORY_MB)",
            }
        }
    finally:
        # The chunks are what the batch keeps; the parsed text was only their source.
        sections.unlink(missing_ok=True)
    return {
        "ok": {
            "chunks": total,
            "format": parsed.format,
            "title": parsed.title,
            "pages": parsed.pages,
        }
    }
