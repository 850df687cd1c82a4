"""A group of files in one parser job (a batch import's): each file's own problem is its own
answer; a file that makes the whole job fail (here: over the CPU limit) is found by
running the group's files one job each, and fails alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.files.chunk_store import ChunkReader
from knowledgeops.ingest import parse_runner
from knowledgeops.ingest.parse_runner import run_parse_chunk_group
from knowledgeops.ingest.parser_pool import ParserPool
from knowledgeops.ingest.parser_process import BatchParseItem, ParserLimits
from tests.helpers.documents import heavy_markdown


@pytest.fixture(autouse=True)
def own_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[ParserPool]:
    pool = ParserPool()
    monkeypatch.setattr(parse_runner, "POOL", pool)
    try:
        yield pool
    finally:
        pool.close()


def items(paths: list[Path]) -> list[BatchParseItem]:
    return [BatchParseItem(path=str(p), filename=p.name, document_id=p.stem) for p in paths]


async def test_each_file_answers_for_itself(tmp_path: Path) -> None:
    notes = []
    for i in range(5):
        notes.append(tmp_path / f"n{i}.md")
        notes[-1].write_text(f"# Note {i}\n\nThe heron{i} waits at the edge of the pond.\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "prog.txt").write_bytes(b"\x7fELF" + bytes(64))
    paths = [*notes, tmp_path / "empty.txt", tmp_path / "prog.txt"]
    chunks = tmp_path / "chunks"
    out = await run_parse_chunk_group(
        items(paths), chunks, "v1", ChunkingOptions(), 1024, ParserLimits()
    )
    assert [o.chunks for o in out[:5]] == [1] * 5 and out[0].title == "Note 0"
    assert [o.error.kind if o.error else None for o in out[5:]] == [
        "EmptyDocument",
        "UnsupportedFormat",
    ]
    reader = ChunkReader(chunks, "n3", "v1")
    assert "heron3" in reader.read(0, 1)[0].text
    reader.close()
    # Nothing but the versions' chunk files is left (no parsed text, no temporary file).
    assert sorted(p.name for p in chunks.iterdir()) == sorted(
        f"n{i}~v1.{ext}" for i in range(5) for ext in ("jsonl", "idx")
    )


async def test_a_file_that_fails_the_job_fails_alone(tmp_path: Path) -> None:
    notes = []
    for i in range(3):
        notes.append(tmp_path / f"n{i}.txt")
        notes[-1].write_text(f"Note {i}: the heron{i} waits.\n")
    heavy = heavy_markdown(tmp_path / "heavy.md", mb=48)  # seconds of CPU to chunk
    out = await run_parse_chunk_group(
        items([notes[0], heavy, *notes[1:]]),
        tmp_path / "chunks",
        "v1",
        ChunkingOptions(),
        1024,
        ParserLimits(cpu_seconds=1),
    )
    assert [o.chunks for o in out] == [1, 0, 1, 1]
    assert out[1].error is not None and out[1].error.kind == "DocumentTooComplex"
