"""Parser subprocess: `python -m activities.ingest.parser_process REQUEST_JSON`.

Parsing untrusted files runs here, not in the worker: a file that crashes the PDF engine or
eats memory kills this process (capped by RLIMIT_AS), and the worker reports a clean error.
Prints one JSON line: {"ok": ParseResult} or {"error": {"kind", "message"}}.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

from pydantic import BaseModel

from knowledgeops.contracts.document_import import ChunkingOptions

EXIT_DOCUMENT_ERROR = 3


class ParserLimits(BaseModel):
    """What one parse may use (CPU and wall-clock seconds) and produce (chunks, characters)."""

    cpu_seconds: int = 300
    wall_seconds: int = 600
    max_chunks: int = 100_000
    max_characters: int = 200_000_000


class ParserInput(BaseModel):
    path: str
    filename: str
    document_id: str
    chunks_dir: str
    chunking: ChunkingOptions
    memory_mb: int
    limits: ParserLimits = ParserLimits()


def main() -> int:
    request = ParserInput.model_validate_json(sys.argv[1])
    # Batch work yields the CPU to the API and Temporal on the same machine.
    os.nice(10)
    limit = request.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # SIGXCPU at the soft limit (the runner reports it), SIGKILL at the hard one.
    cpu = request.limits.cpu_seconds
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))

    from activities.ingest.chunking import parse_and_chunk
    from knowledgeops.errors import DocumentError

    try:
        result = parse_and_chunk(
            Path(request.path),
            request.filename,
            request.document_id,
            Path(request.chunks_dir),
            request.chunking,
            request.limits.max_chunks,
            request.limits.max_characters,
        )
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
    print(json.dumps({"ok": result.model_dump()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
