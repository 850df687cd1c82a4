"""Run the OCR subprocess (knowledgeops.ocr.process) and interpret what it says.

The child reports each page as soon as it is stored; `on_page` turns that into the heartbeat
checkpoint. A child that dies mid-scan leaves every reported page stored, so a retry resumes
after the last one. What is the file's fault (unreadable, a page that crashes the engine or
runs too long) becomes DocumentError (non-retryable); anything else is OcrFailedError, which
Temporal retries.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from knowledgeops.errors import DocumentError
from knowledgeops.files.ocr_results import OcrResults
from knowledgeops.ingest.parse_runner import parser_env, tail_of
from knowledgeops.ocr.process import EXIT_DOCUMENT_ERROR, OcrChildInput

log = logging.getLogger("knowledgeops.ocr")

OCR_COMMAND = [sys.executable, "-m", "knowledgeops.ocr.process"]
# Measured (bench/ocr.py, bench/results/ocr.txt): a child peaks at ~0.8 GB resident and
# ~2.0 GB of address space (onnxruntime's threads and arenas reserve more than they touch) on
# 2000-pixel pages; the cap leaves room above that and still stops a runaway page.
OCR_MEMORY_MB = 3072
# A dense A4 page takes ~2-6 s on this 2-core machine (model loading adds ~1 s to the first);
# one that takes this long is a pathological image, not a slow machine.
PAGE_WALL_SECONDS = 300
STDERR_KEEP = 8 * 1024
# The longest answer line the child writes is far shorter; anything longer is not ours.
_LINE_LIMIT = 64 * 1024


class OcrFailedError(RuntimeError):
    """The OCR process failed for a reason that is not the file's fault (retried)."""


async def run_ocr_child(
    request: OcrChildInput, on_page: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run one child; returns its "inspected" answer (mode "inspect") or {} after every
    requested page was stored (mode "recognize"), calling `on_page` for each stored page."""
    name = request.filename or Path(request.path).name
    proc = await asyncio.create_subprocess_exec(
        *OCR_COMMAND,
        request.model_dump_json(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=parser_env(),
        limit=_LINE_LIMIT,
    )
    stderr = asyncio.create_task(tail_of(proc.stderr, STDERR_KEEP))
    answer: dict[str, Any] = {}
    error: dict[str, Any] | None = None
    reported: list[int] = []
    stalled = False
    try:
        while True:
            try:
                line = await asyncio.wait_for(_readline(proc), PAGE_WALL_SECONDS)
            except TimeoutError:
                stalled = True
                proc.kill()
                break
            if not line:
                break
            msg = _message(line, name)
            if "page" in msg:
                reported.append(int(msg["page"]))
                if on_page is not None:
                    on_page(msg)
            elif "error" in msg:
                error = msg["error"]
            elif "inspected" in msg:
                answer = msg["inspected"]
        await proc.wait()
        err = await stderr
    except BaseException:
        # Cancelled, timed out, or an unreadable answer: the child must not outlive us.
        proc.kill()
        await proc.wait()
        stderr.cancel()
        _remove_unfinished(request, proc.pid)
        raise
    rc = proc.returncode or 0
    if rc < 0:
        _remove_unfinished(request, proc.pid)
    at = _next_page(request, reported)
    if stalled:
        raise DocumentError(
            "PageTooComplex",
            f"{at} of {name} took longer than {PAGE_WALL_SECONDS} s to recognise; "
            "scan it again or split the file",
        )
    if rc == EXIT_DOCUMENT_ERROR and error is not None:
        raise DocumentError(str(error.get("kind")), str(error.get("message")))
    if rc < 0 and -rc in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS):
        # Pages before it are stored; retrying the page that crashed the engine won't help.
        raise DocumentError(
            "OcrCrashed",
            f"{at} of {name} crashed the OCR engine ({signal.Signals(-rc).name}); "
            "the image is likely malformed",
        )
    tail = err.decode(errors="replace").strip()
    if rc == 0:
        missing = len(request.pages) - len(reported)
        if request.mode == "inspect" and answer:
            return answer
        if request.mode == "recognize" and missing == 0:
            return {}
        log.error("OCR process ended early for %s (%s): %s", name, request.path, tail[-2000:])
        raise OcrFailedError(f"the OCR process ended early on {name}; it is retried")
    # A SIGKILL we did not send (the host's OOM killer, an operator) lands here: retried, and
    # the retry resumes after the last stored page. Details go to the log, not the task error.
    log.error(
        "OCR process exited with code %s for %s (%s): %s", rc, name, request.path, tail[-2000:]
    )
    raise OcrFailedError(
        f"the OCR process failed on {at} of {name} (exit code {rc}); "
        "the worker log has the details; it is retried"
    )


async def _readline(proc: asyncio.subprocess.Process) -> bytes:
    assert proc.stdout is not None
    return await proc.stdout.readline()


def _message(line: bytes, name: str) -> dict[str, Any]:
    try:
        msg = json.loads(line)
        if isinstance(msg, dict):
            return msg
    except ValueError:
        pass
    log.error("unreadable line from the OCR process for %s: %r", name, line[:2000])
    raise OcrFailedError(f"the OCR process gave an unreadable answer for {name}; it is retried")


def _next_page(request: OcrChildInput, reported: list[int]) -> str:
    if request.mode == "inspect":
        return "the file"
    rest = request.pages[len(reported) :]
    return f"page {rest[0]}" if rest else "the end"


def _remove_unfinished(request: OcrChildInput, pid: int) -> None:
    if request.mode == "recognize":
        OcrResults(Path(request.ocr_dir)).remove_unfinished(request.file_id, pid)
