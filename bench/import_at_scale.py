"""Importing a large corpus through the system, with searches through the API all along, beside
the engine writing the same points alone.

    .venv/bin/python -m bench.import_at_scale                               # ~50,000 chunks
    .venv/bin/python -m bench.import_at_scale --docs 300 --paragraphs 12200  # ~1,000,000 chunks

A generated corpus (0.274 chunks a paragraph, measured; half the documents owned by `alice`)
is imported by a worker process embedding with an instant server (the tests' fake, 512
dimensions): each document submitted as a client would (`DocumentService.import_file`, again a
second later while the backlog admission refuses it), then Temporal and the worker's parse,
chunk, embed, upsert and publish steps. Meanwhile: the worker's RSS, with its index's process
(INDEX_PROCESS) counted in (peak, and at every 10 % of the imports done); one
`GET /v1/search?k=10` at a time (80 varied queries in a loop, a pause between them); a
one-page note uploaded every few seconds (owned by `carol`), each timed from its submission
to its import completed (fairness at this size); and each import's completion,
which gives the chunks/s of every 10 % window and overall (first submit to last import
completed; the notes are not counted in it). The pipeline also writes every vector into
the embedding cache: that is part of its cost. After the import: the wait until the background
builder has indexed it (the unindexed count unchanged for 40 s), then the same searches once
settled, through the API and (worker stopped) through the engine alone.

The reference, in the same run: the worker stopped, its index opened in this process, every
point of the live collection read back (vector and payload) and written into a fresh index
with the same settings, in the upsert step's batches (256 consecutive chunks of one document a
write: the engine routes a write by document, so mixed batches would cost it more), one write
at a time, the background builder running as in the worker; only the writes are timed.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench import note_traces
from bench.common import (
    MemorySampler,
    bench_settings,
    mb,
    temporal_server,
    worker_process,
    write_corpus,
)
from bench.during_import import OnePager, Searcher, submit
from bench.engine_reference import UPSERT_BATCH, Reference, engine_reference
from bench.search_latency import (
    ADMIN_TOKEN,
    engine_alone,
    percentiles,
    queries,
    through_api,
    wait_settled,
)
from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database
from knowledgeops.runtime.temporal import connect
from starter.services.document_models import ImportRef
from starter.services.documents import DocumentService
from starter.services.task_models import TaskStatus
from starter.services.tasks import TaskQueueService
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.trace_collector import TraceCollector

RSS_TARGET = 3 * 1024**3


class _Unrecorded(list[str]):
    """A record that keeps nothing: the fake server keeps every text it embeds (for tests),
    which would be ~2 GB of this process's memory at 1M chunks."""

    def extend(self, items: Iterable[str], /) -> None:
        return None


def _proc_status(pid: int, key: str) -> int:
    """A /proc/<pid>/status figure in bytes: VmRSS (resident now), RssAnon (of it, not file
    pages: the index's mapped files are counted in VmRSS and reclaimable); with the index in a
    process of its own (INDEX_PROCESS, the default), the worker's and that process's together."""
    total = 0
    for p in [pid] + [c.pid for c in psutil.Process(pid).children() if _is_index(c)]:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                total += int(line.split()[1]) * 1024
    return total


def _is_index(child: psutil.Process) -> bool:
    try:
        return "index.engine_process" in " ".join(child.cmdline())
    except psutil.Error:
        return False


@dataclass
class Imported:
    seconds: float  # first submit to last import completed
    statuses: list[TaskStatus]
    windows: list[tuple[float, int]]  # (seconds since first submit, chunks done) at each 10 %
    refused: int  # submissions the backlog admission refused (each went again)
    catalogue_chunks: int
    catalogue_ready: int
    peak_anonymous: int


async def import_watched(
    settings: Settings, files: list[Path], worker_pid: int, searcher: Searcher, pager: OnePager
) -> Imported:
    service = TaskQueueService(await connect(settings), settings)
    db = await Database.open(settings)
    documents = DocumentService(service, db, settings)
    stop = asyncio.Event()
    searching = asyncio.create_task(searcher.run(stop))
    paging = asyncio.create_task(pager.run(service, documents, stop))
    # Imports completed at which a line is printed: every 10 % of the documents.
    marks = {math.ceil(k * len(files) / 10) for k in range(1, 11)}
    windows: list[tuple[float, int]] = [(0.0, 0)]
    done = chunks = 0
    peak_anonymous = 0
    started = time.perf_counter()

    async def finished(ref: ImportRef) -> TaskStatus:
        nonlocal done, chunks, peak_anonymous
        status = await service.wait(ref.task_id)
        done += 1
        chunks += (status.result or {}).get("total_chunks", 0)
        if done in marks:
            at = time.perf_counter() - started
            (t0, c0), now = windows[-1], _proc_status(worker_pid, "VmRSS")
            anonymous = _proc_status(worker_pid, "RssAnon")
            peak_anonymous = max(peak_anonymous, anonymous)
            windows.append((at, chunks))
            print(
                f"  {done / len(files):4.0%} {done}/{len(files)} imports, {chunks:,} chunks at "
                f"{at:.0f} s: {(chunks - c0) / max(at - t0, 1e-9):,.0f} chunks/s in this window;"
                f" worker RSS {mb(now)} (anonymous {mb(anonymous)});"
                f" searches so far {searcher.summary()}",
                flush=True,
            )
        return status

    async def sample_anonymous() -> None:
        # The anonymous part's peak (VmHWM, MemorySampler's peak, counts file pages too).
        nonlocal peak_anonymous
        while not stop.is_set():
            peak_anonymous = max(peak_anonymous, _proc_status(worker_pid, "RssAnon"))
            await asyncio.sleep(0.5)

    sampling = asyncio.create_task(sample_anonymous())
    refused = 0
    try:
        waits = []
        for i, path in enumerate(files):
            ref, n = await submit(documents, path, "alice" if i % 2 == 0 else "bob")
            refused += n
            waits.append(asyncio.create_task(finished(ref)))
        print(f"  all {len(files)} submitted at {time.perf_counter() - started:.0f} s", flush=True)
        statuses = list(await asyncio.gather(*waits))
        elapsed = time.perf_counter() - started
        rows = await documents.catalogue.by_id(
            {s.result["document_id"] for s in statuses if s.result}
        )
    finally:
        stop.set()
        await asyncio.gather(searching, sampling, paging)
        await db.close()
    return Imported(
        elapsed,
        statuses,
        windows,
        refused,
        sum(r.indexed_chunks for r in rows.values()),
        sum(r.status == "ready" for r in rows.values()),
        peak_anonymous,
    )


@dataclass
class Settled:
    """Search once the background builder has indexed what the import wrote."""

    waited: float = 0.0
    left: int = 0
    api: list[float] = field(default_factory=list)
    engine: list[float] = field(default_factory=list)
    # Each query embedded then searched in this process (bench.search_latency's Reference).
    embed_then_engine: list[float] = field(default_factory=list)
    peak: int = 0  # the worker's peak RSS, the settling included

    def report(self) -> None:
        if not self.api:
            return
        print(
            f"after the import: the index settled {self.waited:.0f} s later ({self.left:,} "
            f"points left unindexed); worker peak RSS with the settling {mb(self.peak)}"
        )
        a50, a95 = percentiles(self.api)
        e50, e95 = percentiles(self.engine)
        b50, b95 = percentiles(self.embed_then_engine)
        print(
            f"search once settled: API p50 {a50:.1f} ms, p95 {a95:.1f} ms; engine alone p50 "
            f"{e50:.1f} ms, p95 {e95:.1f} ms (API / engine at p95 {a95 / e95:.2f}); embedding "
            f"then engine p50 {b50:.1f} ms, p95 {b95:.1f} ms (API / that at p95 {a95 / b95:.2f})"
        )


async def search_settled(settings: Settings, texts: list[str], args: argparse.Namespace) -> Settled:
    if not args.settle_limit:
        return Settled()
    try:
        waited, left = await wait_settled(settings, args.settle_limit)
    except SystemExit as e:  # the import's figures still print
        print(f"no search once settled: {e}", flush=True)
        return Settled()
    # A whole pass of warm-up, as bench.search_latency's settled figure.
    return Settled(waited, left, await through_api(settings, texts, None, warm_up=len(texts)))


def report(
    args: argparse.Namespace,
    run: Imported,
    peak: int,
    parser_peak: int,
    searcher: Searcher,
    pager: OnePager,
    ref: Reference,
) -> None:
    failed = [s for s in run.statuses if s.status != "completed"]
    chunks = sum((s.result or {}).get("total_chunks", 0) for s in run.statuses)
    paragraphs = args.docs * args.paragraphs
    rate = chunks / run.seconds
    print(f"\ncorpus: {args.docs} documents x {args.paragraphs} paragraphs")
    print(
        f"imported through the system: {chunks:,} chunks ({chunks / paragraphs:.3f} a "
        f"paragraph) in {run.seconds:.1f} s: {rate:,.0f} chunks/s end to end"
        + (f"; {len(failed)} FAILED, first: {failed[0].last_error}" if failed else "")
    )
    print(
        f"  catalogue: {run.catalogue_ready}/{args.docs} documents ready, "
        f"{run.catalogue_chunks:,} chunks; live collection {ref.collection}: "
        f"{ref.in_collection:,} points"
    )
    if run.refused:
        print(f"  submissions refused by the backlog admission (sent again): {run.refused}")
    rates = [
        (c1 - c0) / max(t1 - t0, 1e-9)
        for (t0, c0), (t1, c1) in zip(run.windows, run.windows[1:], strict=False)
    ]
    print("  chunks/s by 10 % window of imports:", ", ".join(f"{r:,.0f}" for r in rates))
    print(
        f"worker peak RSS {mb(peak)} (target < {mb(RSS_TARGET)}: "
        f"{'met' if peak < RSS_TARGET else 'NOT met'}); peak anonymous {mb(run.peak_anonymous)}"
        f"; parser subprocess peak {mb(parser_peak)}"
    )
    errors = sum(searcher.errors.values())
    print(
        f"search during the import: {len(searcher.times)} answered "
        f"({searcher.empty} with no hits), {errors} errors; {searcher.summary()}"
    )
    for text, n in searcher.errors.most_common(3):
        print(f"  {n} x {text}")
    print(f"one-page uploads during the import (one every {pager.gap:.0f} s): {pager.summary()}")
    e_rate = ref.written / ref.seconds if ref.seconds else float("nan")
    print(
        f"engine alone: {ref.written:,} points upserted into a fresh index in batches of "
        f"{UPSERT_BATCH} in {ref.seconds:.1f} s: {e_rate:,.0f} points/s (fresh index holds "
        f"{ref.fresh_count:,})"
    )
    print(f"pipeline / engine (chunks/s over points/s): {rate / e_rate:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--docs", type=int, default=84)
    ap.add_argument("--paragraphs", type=int, default=2200, help="per document (~0.27 chunks each)")
    ap.add_argument("--search-interval", type=float, default=0.1, help="pause between searches (s)")
    ap.add_argument(
        "--one-page-interval", type=float, default=5.0, help="pause between one-page uploads (s)"
    )
    ap.add_argument("--keep-log", type=Path, help="copy the worker's log here")
    ap.add_argument(
        "--trace-notes", action="store_true", help="trace the one-page uploads (bench.note_traces)"
    )
    ap.add_argument(
        "--index-in-worker",
        action="store_true",
        help="the index in the worker process itself (INDEX_PROCESS=false; by default it runs "
        "in a child of the worker, and RSS figures are the two processes' together)",
    )
    ap.add_argument(
        "--settle-limit",
        type=float,
        default=1800.0,
        help="seconds to wait for the index to settle after the import (0: skip that search)",
    )
    args = ap.parse_args()
    unrecorded: dict[str, list[str]] = {"fake-embed": _Unrecorded()}
    fake = FakeOpenAI(dim=512, inputs=_Unrecorded(), inputs_by_model=unrecorded).start()
    provider = fake.embedding_settings()
    collector = TraceCollector() if args.trace_notes else None
    traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url} if collector else {}
    try:
        with (
            tempfile.TemporaryDirectory(prefix="ko-bench-scale-") as tmp,
            collector or contextlib.nullcontext(),
        ):
            work = Path(tmp)
            t = time.perf_counter()
            files = write_corpus(work / "corpus", args.docs, args.paragraphs)
            print(f"corpus written in {time.perf_counter() - t:.0f} s; importing ...", flush=True)
            with temporal_server(work) as server:
                settings = bench_settings(
                    work / "data",
                    server.address,
                    ADMIN_TOKENS=f"{ADMIN_TOKEN}:bench",
                    INDEX_PROCESS=not args.index_in_worker,
                    **provider,
                    **traced,
                )
                searcher = Searcher(settings, queries(80), args.search_interval)
                with (
                    worker_process(settings, work / "worker.log") as proc,
                    MemorySampler(proc.pid) as mem,
                ):
                    pager = OnePager(work / "notes", args.one_page_interval)
                    run = asyncio.run(import_watched(settings, files, proc.pid, searcher, pager))
                    # With the index in a process of its own, the two sampled together (each
                    # process's own peak, VmHWM, may fall at different moments).
                    peak = max(mem.peak_self(), mem.peak_with_index)
                    settled = asyncio.run(search_settled(settings, searcher.texts, args))
                    settled.peak = max(mem.peak_self(), mem.peak_with_index)
                    if mem.peak_index:
                        print(
                            f"worker peak RSS alone {mb(mem.peak_self())}; index process peak "
                            f"{mb(mem.peak_index)}; the two together (sampled) {mb(peak)}"
                        )
                if any(s.status != "completed" for s in run.statuses):
                    print((work / "worker.log").read_text()[-3000:])
                if args.keep_log:
                    shutil.copy(work / "worker.log", args.keep_log)
            documents = [
                (str(r["document_id"]), r.get("version"), int(r["total_chunks"]))
                for s in run.statuses
                if (r := s.result)
            ]
            if settled.api:
                alone = asyncio.run(engine_alone(settings, searcher.texts, None))
                settled.engine, settled.embed_then_engine = alone.engine, alone.embed_then_engine
            ref = asyncio.run(engine_reference(settings, work / "reference", documents))
            report(args, run, peak, mem.peak_parser, searcher, pager, ref)
            settled.report()
            if collector:
                note_traces.report(collector.spans, pager.notes)
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
