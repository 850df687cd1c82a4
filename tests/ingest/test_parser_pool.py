"""The warm parser pool (knowledgeops/ingest/parser_pool.py): real parser processes, reused
across jobs, and every way a job can end still handled as a fresh process handled it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psutil
import pytest

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.errors import DocumentError
from knowledgeops.ingest import parse_runner
from knowledgeops.ingest.parse_runner import ParserFailedError, run_chunk, run_parse
from knowledgeops.ingest.parser_pool import ParserPool
from knowledgeops.ingest.parser_process import ParserLimits
from tests.helpers.documents import heavy_markdown
from tests.helpers.waiting import eventually, eventually_sync

OPTS = ChunkingOptions(chunk_tokens=64, overlap_tokens=8)
MAX_JOBS = 3


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[ParserPool]:
    """A pool of its own (a process serves MAX_JOBS jobs), closed after the test; every
    process it started must then be gone."""
    own = ParserPool(max_jobs=MAX_JOBS)
    monkeypatch.setattr(parse_runner, "POOL", own)
    yield own
    left = own.idle_pids() + own.busy_pids()
    own.close()
    for pid in left:
        assert gone(pid), f"parser process {pid} outlived the pool"


def gone(pid: int, timeout: float = 10) -> bool:
    """The process has ended and was reaped (the pool's thread waits for it)."""
    try:
        eventually_sync(
            partial(psutil.pid_exists, pid),
            lambda alive: not alive,
            timeout=timeout,
            interval=0.05,
            what=f"parser process {pid} gone",
        )
    except AssertionError:
        return False
    return True


def note(folder: Path, name: str = "note.md") -> Path:
    path = folder / name
    path.write_text("# A note\n\nSpaced repetition beats rereading.\n")
    return path


async def parse(
    pool: ParserPool, doc: Path, out: Path, memory_mb: int = 1024, **limits: int
) -> int:
    """Parse `doc`; the pid of the warm process that did it (idle again afterwards)."""
    await run_parse(doc, doc.name, "doc1", out, memory_mb, ParserLimits(**limits))
    [pid] = pool.idle_pids()
    return pid


def temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".tmp-" in p.name]


async def test_a_warm_process_serves_jobs_until_it_is_replaced(
    pool: ParserPool, tmp_path: Path
) -> None:
    doc = note(tmp_path)
    pids = [await parse(pool, doc, tmp_path / f"s{i}.jsonl") for i in range(MAX_JOBS - 1)]
    assert pids == [pids[0]] * (MAX_JOBS - 1), "one process served them all"
    # The chunk step runs there too: its MAX_JOBS-th job, after which it is replaced.
    total = await run_chunk(
        tmp_path / "s0.jsonl", doc.name, "doc1", "v1", tmp_path / "chunks", OPTS, True, 1024
    )
    assert total == 1
    assert pool.idle_pids() == [] and gone(pids[0])
    pids.append(await parse(pool, doc, tmp_path / "next.jsonl"))
    assert pids[-1] != pids[0]
    # A different memory cap is a different process: the cap is set when it starts.
    await run_parse(doc, doc.name, "doc1", tmp_path / "m.jsonl", 512)
    other = set(pool.idle_pids()) - {pids[-1]}
    assert len(other) == 1 and not other & set(pids)


async def test_an_idle_process_is_closed(pool: ParserPool, tmp_path: Path) -> None:
    pool.idle_seconds = 0.3
    pid = await parse(pool, note(tmp_path), tmp_path / "a.jsonl")
    await eventually(
        pool.idle_pids, lambda pids: pids == [], timeout=5, interval=0.02, what="no idle process"
    )
    assert gone(pid)


async def test_after_a_document_error_the_next_job_gets_a_new_process(
    pool: ParserPool, tmp_path: Path
) -> None:
    doc = note(tmp_path)
    first = await parse(pool, doc, tmp_path / "a.jsonl")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(DocumentError) as e:
        await run_parse(empty, empty.name, "doc1", tmp_path / "e.jsonl", 1024)
    assert e.value.kind == "EmptyDocument"
    assert pool.idle_pids() == [] and gone(first)
    assert await parse(pool, doc, tmp_path / "b.jsonl") != first


@pytest.mark.parametrize(
    ("sig", "kind"),
    [(signal.SIGSEGV, "ParserCrashed"), (signal.SIGKILL, None), (None, "DocumentTooComplex")],
    ids=["crash", "killed-by-someone-else", "wall-clock-limit"],
)
async def test_a_crash_or_timeout_stays_in_its_process_and_leaves_nothing(
    pool: ParserPool, tmp_path: Path, sig: signal.Signals | None, kind: str | None
) -> None:
    heavy = heavy_markdown(tmp_path / "heavy.md")
    sections = tmp_path / "heavy.jsonl"
    await run_parse(heavy, heavy.name, "doc1", sections, 1024)
    [warm] = pool.idle_pids()
    chunks = tmp_path / "chunks"
    limits = ParserLimits(wall_seconds=1 if sig is None else 600)
    job = asyncio.create_task(
        run_chunk(sections, heavy.name, "doc1", "v1", chunks, OPTS, True, 1024, limits)
    )
    if sig is not None:
        # It is writing chunks.
        await eventually(partial(temp_files, chunks), bool, interval=0.02, what="a chunk file")
        os.kill(warm, sig)
    expected = ParserFailedError if kind is None else DocumentError
    with pytest.raises(expected) as e:
        await job
    if isinstance(e.value, DocumentError):
        assert e.value.kind == kind
    else:  # a SIGKILL we did not send: the host's OOM killer, an operator; retried
        assert "exit code -9" in str(e.value)
    assert gone(warm) and temp_files(tmp_path) == []
    # The next job runs in a new process and succeeds.
    assert await parse(pool, note(tmp_path), tmp_path / "next.jsonl") != warm


async def test_cancelling_a_parse_kills_its_process_and_leaves_no_temp_file(
    pool: ParserPool, tmp_path: Path
) -> None:
    heavy = heavy_markdown(tmp_path / "heavy.md")
    sections = tmp_path / "heavy.jsonl"
    await run_parse(heavy, heavy.name, "doc1", sections, 1024)
    chunks = tmp_path / "chunks"
    job = asyncio.create_task(
        run_chunk(sections, heavy.name, "doc1", "v1", chunks, OPTS, True, 1024)
    )
    await eventually(partial(temp_files, chunks), bool, interval=0.02, what="a chunk file")
    [busy] = pool.busy_pids()
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert gone(busy), "the cancelled job's parser outlived it"
    assert temp_files(tmp_path) == [] and pool.busy_pids() == pool.idle_pids() == []


async def test_the_cpu_limit_is_per_job_on_a_warm_process(pool: ParserPool, tmp_path: Path) -> None:
    pool.max_jobs = 10
    small = heavy_markdown(tmp_path / "small.md", mb=2)  # ~1 s of CPU to chunk
    sections = tmp_path / "small.jsonl"
    await run_parse(small, small.name, "doc1", sections, 1024)
    [warm] = pool.idle_pids()
    chunks = tmp_path / "chunks"
    limits = ParserLimits(cpu_seconds=2)
    for i in range(6):  # together well over 2 s: each job has 2 s of its own
        await run_chunk(sections, small.name, "doc1", f"v{i}", chunks, OPTS, True, 1024, limits)
    cpu = psutil.Process(warm).cpu_times()
    assert pool.idle_pids() == [warm] and cpu.user + cpu.system > 2 * limits.cpu_seconds
    # Still stopped: a job over its own allowance on this process that has done so much.
    heavy = heavy_markdown(tmp_path / "heavy.md")  # ~5 s of CPU to chunk
    await run_parse(heavy, heavy.name, "doc2", tmp_path / "heavy.jsonl", 1024)
    assert pool.idle_pids() == [warm]
    one_second = ParserLimits(cpu_seconds=1)
    with pytest.raises(DocumentError) as e:
        await run_chunk(
            tmp_path / "heavy.jsonl", heavy.name, "doc2", "v1", chunks, OPTS, True, 1024, one_second
        )
    assert e.value.kind == "DocumentTooComplex" and "PARSER_CPU_SECONDS" in e.value.message
    assert gone(warm) and temp_files(tmp_path) == []


async def test_the_memory_cap_still_stops_a_document(
    pool: ParserPool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "knowledgeops.parser")
    doc = note(tmp_path)
    warm = await parse(pool, doc, tmp_path / "a.jsonl", memory_mb=200)
    # One 40 MB line: the text reader holds all of it, and more while it decodes.
    line = tmp_path / "line.txt"
    line.write_text("word " * (8 * 1024 * 1024))
    with pytest.raises(DocumentError) as e:
        await run_parse(line, line.name, "doc1", tmp_path / "l.jsonl", 200)
    assert e.value.kind == "DocumentTooComplex" and "PARSER_MEMORY_MB" in e.value.message
    # The warm process ran out first; a fresh one decided (it ran out too).
    assert "again, fresh" in caplog.text
    assert gone(warm) and temp_files(tmp_path) == []
    assert await parse(pool, doc, tmp_path / "b.jsonl", memory_mb=200) != warm


async def test_what_a_parser_prints_cannot_corrupt_the_answers(
    pool: ParserPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real parser process, with a parsing step that prints to stdout (as libraries do).
    chatty = (
        "import sys; from knowledgeops.ingest import parser_process as p; real = p.handle; "
        'p.handle = lambda r: (print(\'{"ok": "noise"}\'), real(r))[1]; '
        "sys.exit(p.main(sys.argv[1:]))"
    )
    monkeypatch.setattr(parse_runner, "PARSER_COMMAND", [sys.executable, "-c", chatty])
    doc = note(tmp_path)
    # Had the noise reached the answer channel, it would have been taken for the answer.
    pids = [await parse(pool, doc, tmp_path / f"s{i}.jsonl") for i in range(2)]
    assert pids[0] == pids[1]
