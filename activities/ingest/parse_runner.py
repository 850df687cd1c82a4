"""Run the parser subprocess (activities.ingest.parser_process) and interpret its outcome."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from activities.ingest.parser_process import EXIT_DOCUMENT_ERROR, ParserInput
from knowledgeops.contracts.document_import import ChunkingOptions, ParseResult
from knowledgeops.errors import DocumentError

# Parsers are CPU-bound: more at once than cores only adds contention (and memory).
_SLOTS: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}


def _parse_slots() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    if loop not in _SLOTS:
        _SLOTS[loop] = asyncio.Semaphore(max(1, (os.cpu_count() or 2) // 2))
    return _SLOTS[loop]


class ParserFailedError(RuntimeError):
    """The parser process failed for a reason that is not the document's fault."""


async def run_parse(
    path: Path,
    filename: str,
    document_id: str,
    chunks_dir: Path,
    chunking: ChunkingOptions,
    memory_mb: int,
) -> ParseResult:
    request = ParserInput(
        path=str(path),
        filename=filename,
        document_id=document_id,
        chunks_dir=str(chunks_dir),
        chunking=chunking,
        memory_mb=memory_mb,
    )
    async with _parse_slots():
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "activities.ingest.parser_process",
            request.model_dump_json(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await proc.communicate()
        except asyncio.CancelledError:
            # The activity was cancelled or timed out: the parser must not outlive it.
            proc.kill()
            await proc.wait()
            raise
    rc = proc.returncode or 0
    last = out.decode(errors="replace").strip().splitlines()[-1:] or [""]
    if rc == 0 or rc == EXIT_DOCUMENT_ERROR:
        msg = json.loads(last[0])
        if "ok" in msg:
            return ParseResult.model_validate(msg["ok"])
        raise DocumentError(msg["error"]["kind"], msg["error"]["message"])
    tail = err.decode(errors="replace").strip()[-800:]
    if rc < 0 and -rc in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGKILL):
        # The document crashed the parsing engine or hit the memory cap: retrying won't help.
        raise DocumentError(
            "ParserCrashed",
            f"{filename or path.name} crashed the parser ({signal.Signals(-rc).name}); "
            "the file is likely malformed or hostile",
        )
    if "MemoryError" in tail:
        raise DocumentError(
            "DocumentTooComplex",
            f"{filename or path.name} needs more than the parser memory limit of {memory_mb} MB "
            "(PARSER_MEMORY_MB)",
        )
    raise ParserFailedError(f"parser exited with code {rc}: {tail}")
