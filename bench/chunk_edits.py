"""Chunks an edit re-embeds, and chunk sizes: the chunk step's real output for documents and
their edited copies (issue 29).

    .venv/bin/python -m bench.chunk_edits [--docs 20] [--paragraphs 1200] [--corpus DIR]

A document is paragraphs separated by blank lines: generated (20 to 160 words each) or, with
--corpus, paragraphs drawn from a retrieval set in BEIR's layout (e.g. squad-dev). The edit:
one paragraph inserted near the start and the middle one rewritten. Each file goes through the
parse step and the chunk step at the default chunk size; the figure is how many of the edited
copy's chunks have a content hash (the embedding cache's key) that none of the original's has:
what a re-import embeds. Then the chunks' sizes in tokens (cl100k, counted with the splitter)
for the first --sizes documents, and the chunk step's CPU time. Asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from semantic_text_splitter import TextSplitter

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.files.chunk_store import Chunk, ChunkReader
from knowledgeops.ingest.chunking import TOKENIZER_MODEL, chunk_sections
from knowledgeops.ingest.sections import extract_sections
from tests.helpers.documents import edited_copy, varied_paragraphs


@functools.lru_cache(maxsize=64)
def _at(capacity: int) -> TextSplitter:
    return TextSplitter.from_tiktoken_model(TOKENIZER_MODEL, capacity)


def tokens(text: str) -> int:
    """The least capacity the splitter leaves `text` whole at: its size in tokens."""
    hi = 64
    while len(_at(hi).chunks(text)) > 1:
        hi *= 2
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if len(_at(mid).chunks(text)) <= 1 else (mid + 1, hi)
    return hi


def chunk_file(folder: Path, name: str, text: str) -> tuple[list[Chunk], float]:
    """The chunks of a text file with this text, and the chunk step's CPU seconds."""
    source = folder / name
    source.write_text(text)
    sections = folder / f"{name}.sections.jsonl"
    extract_sections(source, name, name, sections)
    started = time.process_time()
    chunk_sections(sections, folder / "chunks", name, "v1", ChunkingOptions(), markdown=False)
    cpu = time.process_time() - started
    return ChunkReader(folder / "chunks", name, "v1").read(0, 1_000_000), cpu


def corpus_paragraphs(folder: Path) -> list[str]:
    with (folder / "corpus.jsonl").open(encoding="utf-8") as f:
        return [" ".join(json.loads(line)["text"].split()) for line in f]


def percentile(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[int(p * (len(ordered) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--paragraphs", type=int, default=1200)
    ap.add_argument("--corpus", type=Path, help="draw paragraphs from this BEIR-layout set")
    ap.add_argument("--sizes", type=int, default=3, help="documents whose chunks are measured")
    args = ap.parse_args()
    pool = corpus_paragraphs(args.corpus) if args.corpus else []
    counts, sizes, chunks, cpu = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.docs):
            if pool:
                paragraphs = random.Random(n).sample(pool, args.paragraphs)
            else:
                paragraphs = varied_paragraphs(args.paragraphs, seed=n)
            folder = Path(tmp) / str(n)
            folder.mkdir()
            before, seconds = chunk_file(folder, "a.txt", "\n\n".join(paragraphs) + "\n")
            after, _ = chunk_file(folder, "b.txt", "\n\n".join(edited_copy(paragraphs)) + "\n")
            known = {c.content_hash for c in before}
            counts.append(sum(c.content_hash not in known for c in after))
            chunks.append(len(before))
            cpu.append(seconds)
            if n < args.sizes:
                sizes += [tokens(c.text) for c in before]
            print(f"document {n}: {len(before)} chunks, edited copy re-embeds {counts[-1]}")
    print(
        f"\nre-embedded per edited copy over {args.docs} documents: "
        f"mean {statistics.mean(counts):.2f}, median {statistics.median(counts)}, "
        f"max {max(counts)}, over 4 in {sum(c > 4 for c in counts)}"
    )
    print(
        f"chunks per document: mean {statistics.mean(chunks):.0f}; chunk step "
        f"{statistics.median(cpu) * 1000:.0f} ms CPU (median)"
    )
    if sizes:
        print(
            f"tokens per chunk ({len(sizes)} chunks): mean {statistics.mean(sizes):.0f}, "
            f"p10 {percentile(sizes, 0.1)}, p50 {percentile(sizes, 0.5)}, "
            f"p90 {percentile(sizes, 0.9)}"
        )


if __name__ == "__main__":
    main()
