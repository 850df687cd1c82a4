"""Warm parser process: `python -m knowledgeops.ingest.parser_process --serve --memory-mb N`.

Everything that reads untrusted content runs here, not in the worker: the parse step (a file
into text sections: knowledgeops/ingest/sections.py) and the chunk step (sections into chunks:
a hostile text can make splitting slow too). A file that crashes the PDF engine or eats
memory or CPU kills this process (capped by RLIMIT_AS / RLIMIT_CPU), and the worker reports
a clean error (knowledgeops/ingest/parse_runner.py).

The process is started once and serves one job after another (knowledgeops/ingest/
parser_pool.py keeps a few warm, so a small document does not pay for a process start): it
reads one request per line (ParserInput JSON) on stdin and answers each with one JSON line,
{"ok": result} or {"error": {"kind", "message"}}. It exits when stdin closes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.process_guard import die_with_parent


class ParserLimits(BaseModel):
    """What one parse may use (CPU and wall-clock seconds) and produce (characters)."""

    cpu_seconds: int = 300
    wall_seconds: int = 600
    max_characters: int = 200_000_000


class BatchParseItem(BaseModel):
    """One file of a "many" job (knowledgeops/ingest/batch_parsing.py)."""

    path: str
    filename: str
    document_id: str


class ParserInput(BaseModel):
    # "many": a group of small files parsed and chunked (DOCUMENT_BATCH_IMPORT's `items`).
    mode: Literal["parse", "chunk", "many"] = "parse"
    # parse: the stored file; chunk: the sections file.
    path: str
    filename: str
    document_id: str
    # parse: the sections file to write; chunk and many: the chunk store's folder.
    out: str
    # The address-space cap of the process that runs it (set once, when the process starts).
    memory_mb: int
    limits: ParserLimits = ParserLimits()
    # The chunk step's parameters.
    version: str = ""
    chunking: ChunkingOptions = ChunkingOptions()
    markdown: bool = False
    max_chunks: int | None = None
    # OCR'd pages to merge: the OCR store's folder, the file id and the pages.
    ocr_dir: str = ""
    ocr_file_id: str = ""
    ocr_pages: list[int] = []
    items: list[BatchParseItem] = []


def limit_cpu(seconds: int) -> None:
    """Let the next job use `seconds` of CPU. RLIMIT_CPU counts the whole life of the
    process, so the soft limit is moved to what was used so far plus the job's allowance;
    SIGXCPU (which kills) fires there. The hard limit stays where it is: an unprivileged
    process could never raise it again for the next job."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime) + seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def handle(request: ParserInput) -> dict[str, Any]:
    """One job's answer. Any other exception ends the process (a traceback on stderr, a
    non-zero exit), which the worker reports as an unexpected parser failure."""
    from knowledgeops.errors import DocumentError
    from knowledgeops.ingest.batch_parsing import parse_and_chunk_many
    from knowledgeops.ingest.chunking import chunk_sections
    from knowledgeops.ingest.sections import extract_sections

    try:
        result: dict[str, object]
        if request.mode == "parse":
            result = extract_sections(
                Path(request.path),
                request.filename,
                request.document_id,
                Path(request.out),
                request.limits.max_characters,
            ).model_dump()
        elif request.mode == "many":
            result = {
                "items": parse_and_chunk_many(
                    request.items,
                    Path(request.out),
                    request.version,
                    request.chunking,
                    request.limits.max_characters,
                    request.max_chunks,
                )
            }
        else:
            total = chunk_sections(
                Path(request.path),
                Path(request.out),
                request.document_id,
                request.version,
                request.chunking,
                request.markdown,
                request.max_chunks,
                (Path(request.ocr_dir), request.ocr_file_id, request.ocr_pages)
                if request.ocr_file_id
                else None,
            )
            result = {"total_chunks": total}
    except DocumentError as e:
        return {"error": {"kind": e.kind, "message": e.message}}
    except MemoryError:
        return {
            "error": {
                "kind": "DocumentTooComplex",
                "message": f"{request.filename} needs more than the parser's memory limit "
                f"of {request.memory_mb} MB (PARSER_MEMORY_MB)",
            }
        }
    return {"ok": result}


def _private_answers() -> TextIO:
    """The answer channel: the real stdout, moved to a descriptor of its own. fd 1 then
    points at stderr, so whatever a parsing library prints lands in the log instead of
    corrupting an answer."""
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return answers


def serve(memory_mb: int) -> int:
    die_with_parent()
    answers = _private_answers()
    # Batch work yields the CPU to the API and Temporal on the same machine.
    os.nice(10)
    # Set once, before anything is imported: the cap covers the parsers' own memory too.
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # Imported before the first job: that is what the warm process saves each document.
    from knowledgeops.ingest import chunking, sections  # noqa: F401

    while line := sys.stdin.buffer.readline():
        request = ParserInput.model_validate_json(line)
        limit_cpu(request.limits.cpu_seconds)
        answers.write(json.dumps(handle(request)) + "\n")
        answers.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parser_process", description=__doc__)
    parser.add_argument("--serve", action="store_true", required=True)
    parser.add_argument("--memory-mb", type=int, required=True, help="address-space cap")
    args = parser.parse_args(argv)
    return serve(args.memory_mb)


if __name__ == "__main__":
    sys.exit(main())
