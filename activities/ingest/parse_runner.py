"""Run the parser subprocess (activities.ingest.parser_process) for the parse step and the
chunk step, and interpret its outcome."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from activities.ingest.parser_process import EXIT_DOCUMENT_ERROR, ParserInput, ParserLimits
from knowledgeops.contracts.document_import import ChunkingOptions, ParseResult
from knowledgeops.errors import DocumentError
from knowledgeops.stores.chunk_store import remove_unfinished

log = logging.getLogger("knowledgeops.parser")

# How the parser is started (a module of this project, run by this interpreter).
PARSER_COMMAND = [sys.executable, "-m", "activities.ingest.parser_process"]
# What is kept of the parser's output: its answer is one short JSON line; stderr is only for
# the log, and a hostile file must not make the worker buffer gigabytes of it.
STDOUT_KEEP = 1024 * 1024
STDERR_KEEP = 8 * 1024
# The project root, so the child finds its modules with no inherited environment.
_ROOT = str(Path(__file__).resolve().parents[2])
# The only variables a parser child gets: no secret (API keys, database URL, tokens) of the
# worker's environment reaches code that handles untrusted files.
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ")


def parser_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _PASSED_ENV}
    return env | {"PYTHONPATH": _ROOT, "PYTHONNOUSERSITE": "1", "PYTHONUNBUFFERED": "1"}


class ParserFailedError(RuntimeError):
    """The parser process failed for a reason that is not the document's fault."""


def _remove_unfinished(out: Path, pid: int) -> None:
    out.with_name(f"{out.name}.tmp-{pid}").unlink(missing_ok=True)


async def tail_of(stream: asyncio.StreamReader | None, keep: int) -> bytes:
    """Read a stream to its end, keeping only its last `keep` bytes."""
    kept = b""
    if stream is None:
        return kept
    while block := await stream.read(64 * 1024):
        kept = (kept + block)[-keep:]
    return kept


async def run_parse(
    path: Path,
    filename: str,
    document_id: str,
    sections_file: Path,
    memory_mb: int,
    limits: ParserLimits | None = None,
) -> ParseResult:
    """Parse `path` into `sections_file` in a subprocess."""
    request = ParserInput(
        path=str(path),
        filename=filename,
        document_id=document_id,
        out=str(sections_file),
        memory_mb=memory_mb,
        limits=limits or ParserLimits(),
    )
    answer = await _run(request, lambda pid: _remove_unfinished(sections_file, pid))
    try:
        return ParseResult.model_validate(answer)
    except ValueError:  # a ValidationError
        raise ParserFailedError(
            f"the parser gave no readable result for {filename}; the import is retried"
        ) from None


async def run_chunk(
    sections_file: Path,
    filename: str,
    document_id: str,
    version: str,
    chunks_dir: Path,
    chunking: ChunkingOptions,
    markdown: bool,
    memory_mb: int,
    limits: ParserLimits | None = None,
    max_chunks: int | None = None,
    ocr: tuple[Path, str, list[int]] | None = None,
) -> int:
    """Split a version's sections into its chunk files in a subprocess; the chunk count."""
    request = ParserInput(
        mode="chunk",
        path=str(sections_file),
        filename=filename,
        document_id=document_id,
        out=str(chunks_dir),
        memory_mb=memory_mb,
        limits=limits or ParserLimits(),
        version=version,
        chunking=chunking,
        markdown=markdown,
        max_chunks=max_chunks,
    )
    if ocr is not None:
        request.ocr_dir, request.ocr_file_id, request.ocr_pages = str(ocr[0]), ocr[1], ocr[2]
    answer = await _run(
        request, lambda pid: remove_unfinished(chunks_dir, document_id, pid, version)
    )
    try:
        return int(answer["total_chunks"])
    except (KeyError, TypeError, ValueError):
        raise ParserFailedError(
            f"the chunker gave no chunk count for {filename}; the import is retried"
        ) from None


async def _run(request: ParserInput, on_killed: Callable[[int], None]) -> dict[str, Any]:
    limits, memory_mb, path = request.limits, request.memory_mb, Path(request.path)
    filename = request.filename
    name = filename or path.name
    proc = await asyncio.create_subprocess_exec(
        *PARSER_COMMAND,
        request.model_dump_json(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=parser_env(),
    )
    timed_out = False
    try:
        reading = asyncio.gather(
            tail_of(proc.stdout, STDOUT_KEEP), tail_of(proc.stderr, STDERR_KEEP)
        )
        try:
            out, err = await asyncio.wait_for(reading, limits.wall_seconds)
        except TimeoutError:
            timed_out = True
            out, err = b"", b""
        if timed_out:
            proc.kill()
        await proc.wait()
    except asyncio.CancelledError:
        # The activity was cancelled or timed out: the parser must not outlive it.
        proc.kill()
        await proc.wait()
        on_killed(proc.pid)
        raise
    rc = proc.returncode or 0
    if rc < 0:
        # Killed (by us, a limit or a crash) before it could remove its temporary files.
        on_killed(proc.pid)
    if timed_out:
        raise DocumentError(
            "DocumentTooComplex",
            f"{name} took longer than {limits.wall_seconds} s to parse (PARSER_WALL_SECONDS); "
            "split it or convert it to a simpler format",
        )
    last = out.decode(errors="replace").strip().splitlines()[-1:] or [""]
    if rc == 0 or rc == EXIT_DOCUMENT_ERROR:
        try:
            msg = json.loads(last[0])
            if "ok" in msg:
                return dict(msg["ok"])
            kind, message = str(msg["error"]["kind"]), str(msg["error"]["message"])
        except (ValueError, KeyError, TypeError):  # ValidationError is a ValueError
            log.error("parser answer unreadable for %s (%s): %r", name, path, last[0][:2000])
            raise ParserFailedError(
                f"the parser gave no readable answer for {name}; the worker log has the "
                "details; the import is retried"
            ) from None
        raise DocumentError(kind, message)
    tail = err.decode(errors="replace").strip()
    if rc == -signal.SIGXCPU:
        raise DocumentError(
            "DocumentTooComplex",
            f"{name} needs more than {limits.cpu_seconds} s of CPU to parse "
            "(PARSER_CPU_SECONDS); split it or convert it to a simpler format",
        )
    if rc < 0 and -rc in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS):
        # The document crashed the parsing engine or hit the memory cap: retrying won't help.
        # (A SIGKILL we did not send is the host's OOM killer or an operator: retried below.)
        raise DocumentError(
            "ParserCrashed",
            f"{name} crashed the parser ({signal.Signals(-rc).name}); "
            "the file is likely malformed or hostile",
        )
    if "MemoryError" in tail:
        raise DocumentError(
            "DocumentTooComplex",
            f"{name} needs more than the parser memory limit of {memory_mb} MB (PARSER_MEMORY_MB)",
        )
    # Paths and tracebacks go to the operator's log, never into the task's public error.
    log.error("parser exited with code %s for %s (%s): %s", rc, name, path, tail[-2000:])
    raise ParserFailedError(
        f"the parser failed unexpectedly on {name} (exit code {rc}); "
        "the worker log has the details; the import is retried"
    )
