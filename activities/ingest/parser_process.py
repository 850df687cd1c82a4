"""Parser subprocess: `python -m activities.ingest.parser_process REQUEST_JSON`.

Everything that reads untrusted content runs here, not in the worker: the parse step (a file
into text sections: activities/ingest/sections.py) and the chunk step (sections into chunks:
a hostile text can make splitting slow too). A file that crashes the PDF engine or eats
memory or CPU kills this process (capped by RLIMIT_AS / RLIMIT_CPU), and the worker reports
a clean error. Prints one JSON line: {"ok": result} or {"error": {"kind", "message"}}.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.process_guard import die_with_parent

EXIT_DOCUMENT_ERROR = 3


class ParserLimits(BaseModel):
    """What one parse may use (CPU and wall-clock seconds) and produce (characters)."""

    cpu_seconds: int = 300
    wall_seconds: int = 600
    max_characters: int = 200_000_000


class ParserInput(BaseModel):
    mode: Literal["parse", "chunk"] = "parse"
    # parse: the stored file; chunk: the sections file.
    path: str
    filename: str
    document_id: str
    # parse: the sections file to write; chunk: the chunk store's folder.
    out: str
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


def main() -> int:
    die_with_parent()
    request = ParserInput.model_validate_json(sys.argv[1])
    # Batch work yields the CPU to the API and Temporal on the same machine.
    os.nice(10)
    limit = request.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # SIGXCPU at the soft limit (the runner reports it), SIGKILL at the hard one.
    cpu = request.limits.cpu_seconds
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))

    from activities.ingest.chunking import chunk_sections
    from activities.ingest.sections import extract_sections
    from knowledgeops.errors import DocumentError

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
        print(json.dumps({"error": {"kind": e.kind, "message": e.message}}))
        return EXIT_DOCUMENT_ERROR
    except MemoryError:
        print(
            json.dumps(
                {
                    "error": {
                        "kind": "DocumentTooComplex",
                        "message": f"{request.filename} needs more than the parser's memory limit "
                        f"of {request.memory_mb} MB (PARSER_MEMORY_MB)",
                    }
                }
            )
        )
        return EXIT_DOCUMENT_ERROR
    print(json.dumps({"ok": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
