"""Run the parse step and the chunk step in a warm parser process (knowledgeops/ingest/
parser_pool.py, running knowledgeops.ingest.parser_process), and interpret its outcome."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledgeops.contracts.document_import import ChunkingOptions, ParseResult
from knowledgeops.errors import DocumentError
from knowledgeops.files.chunk_store import remove_unfinished, sections_file
from knowledgeops.ingest.parser_pool import POOL, Outcome
from knowledgeops.ingest.parser_process import BatchParseItem, ParserInput, ParserLimits

log = logging.getLogger("knowledgeops.parser")

# How the parser is started (a module of this project, run by this interpreter). Read when a
# process is started, so a test can swap it.
PARSER_COMMAND = [sys.executable, "-m", "knowledgeops.ingest.parser_process"]
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


@dataclass(frozen=True)
class GroupItemOutcome:
    """One file of a group job: its chunks, that it needs OCR (its own import), or why not."""

    chunks: int = 0
    format: str = ""
    title: str | None = None
    pages: int | None = None
    ocr: bool = False
    error: DocumentError | None = None


async def run_parse_chunk_group(
    items: Sequence[BatchParseItem],
    chunks_dir: Path,
    version: str,
    chunking: ChunkingOptions,
    memory_mb: int,
    limits: ParserLimits,
    max_chunks: int | None = None,
) -> list[GroupItemOutcome]:
    """Parse and chunk a group of small files into their versions' chunk files, one parser
    job for all (knowledgeops/ingest/batch_parsing.py). If the job itself fails (a file
    crashed the parser or hit a limit), each file runs in a job of its own, so only the file
    at fault fails."""
    if not items:
        return []
    try:
        return await _group_job(items, chunks_dir, version, chunking, memory_mb, limits, max_chunks)
    except (DocumentError, ParserFailedError) as e:
        if len(items) == 1:
            if isinstance(e, DocumentError):
                return [GroupItemOutcome(error=e)]
            raise
        log.warning("a group job of %s files failed (%s); one job per file", len(items), e)
    outcomes = []
    for item in items:
        try:
            one = await _group_job(
                [item], chunks_dir, version, chunking, memory_mb, limits, max_chunks
            )
            outcomes.extend(one)
        except DocumentError as e:
            outcomes.append(GroupItemOutcome(error=e))
        except ParserFailedError as e:
            # Alone in its job and still failing: this file's, not the group's.
            outcomes.append(GroupItemOutcome(error=DocumentError("ParserFailed", str(e))))
    return outcomes


async def _group_job(
    items: Sequence[BatchParseItem],
    chunks_dir: Path,
    version: str,
    chunking: ChunkingOptions,
    memory_mb: int,
    limits: ParserLimits,
    max_chunks: int | None,
) -> list[GroupItemOutcome]:
    name = items[0].filename if len(items) == 1 else f"a group of {len(items)} files"
    request = ParserInput(
        mode="many",
        path="",
        filename=name,
        document_id=items[0].document_id,
        out=str(chunks_dir),
        memory_mb=memory_mb,
        limits=limits,
        version=version,
        chunking=chunking,
        max_chunks=max_chunks,
        items=list(items),
    )

    def killed(pid: int) -> None:
        for item in items:
            remove_unfinished(chunks_dir, item.document_id, pid, version)
            sections = sections_file(chunks_dir, item.document_id, version)
            _remove_unfinished(sections, pid)
            sections.unlink(missing_ok=True)

    answer = await _run(request, killed)
    try:
        raw = answer["items"]
        if not isinstance(raw, list) or len(raw) != len(items):
            raise TypeError("one answer per file expected")
        return [_item_outcome(a) for a in raw]
    except (KeyError, TypeError, ValueError):
        raise ParserFailedError(
            f"the parser gave no readable answer for {name}; the import is retried"
        ) from None


def _item_outcome(answer: object) -> GroupItemOutcome:
    if not isinstance(answer, dict):
        raise TypeError("an answer per file is an object")
    error = answer.get("error")
    if isinstance(error, dict):
        return GroupItemOutcome(error=DocumentError(str(error["kind"]), str(error["message"])))
    if answer.get("ocr"):
        return GroupItemOutcome(ocr=True)
    ok = answer["ok"]
    if not isinstance(ok, dict):
        raise TypeError("an ok answer is an object")
    title, pages = ok.get("title"), ok.get("pages")
    return GroupItemOutcome(
        chunks=int(ok["chunks"]),
        format=str(ok["format"]),
        title=str(title) if title is not None else None,
        pages=int(pages) if isinstance(pages, int) else None,
    )


def _out_of_memory(outcome: Outcome) -> bool:
    """The job hit the process's memory cap (an answer saying so, or a MemoryError on
    stderr). A crash is not retried: it is the document's (a fresh process crashes too)."""
    error = (outcome.answer or {}).get("error")
    if isinstance(error, dict) and "PARSER_MEMORY_MB" in str(error.get("message", "")):
        return True
    return outcome.answer is None and b"MemoryError" in outcome.stderr


async def _run(request: ParserInput, on_killed: Callable[[int], None]) -> dict[str, Any]:
    limits, memory_mb, path = request.limits, request.memory_mb, Path(request.path)
    name = request.filename or path.name
    outcome = await POOL.run(request, PARSER_COMMAND, parser_env(), on_killed)
    if outcome.jobs > 1 and _out_of_memory(outcome):
        # What earlier jobs left in that process (heap, library caches) counted against its
        # memory cap: a fresh process decides whether the document itself is too big.
        log.info("parser out of memory on %s after %s jobs: again, fresh", name, outcome.jobs)
        outcome = await POOL.run(request, PARSER_COMMAND, parser_env(), on_killed, fresh=True)
    if outcome.timed_out:
        raise DocumentError(
            "DocumentTooComplex",
            f"{name} took longer than {limits.wall_seconds} s to parse (PARSER_WALL_SECONDS); "
            "split it or convert it to a simpler format",
        )
    if outcome.line:
        try:
            msg = outcome.answer or {}
            if "ok" in msg:
                return dict(msg["ok"])
            kind, message = str(msg["error"]["kind"]), str(msg["error"]["message"])
        except (ValueError, KeyError, TypeError):
            log.error("parser answer unreadable for %s (%s): %r", name, path, outcome.line[:2000])
            raise ParserFailedError(
                f"the parser gave no readable answer for {name}; the worker log has the "
                "details; the import is retried"
            ) from None
        raise DocumentError(kind, message)
    # No answer: the process ended during the job.
    rc = outcome.returncode or 0
    tail = outcome.stderr.decode(errors="replace").strip()
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
