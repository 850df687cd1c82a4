"""The embedded index at scale: 10k, 100k and 1M chunks (synthetic vectors and text), written
and searched through `VectorIndex` exactly as the worker does (the project's payload, BM25
vectors from the text, the background builder indexing while points arrive).

    python -m bench.index_scale [--points 10000 100000 1000000] [--dim 512]

Per size: upsert rate (batches of 256, as the upsert step writes), how long until every point
is in the HNSW graph, search p50 / p95 for hybrid, dense, keyword and a search scoped to 50
documents, dense recall@10 against an exact scan (the cost of HNSW), reopen time, the
process's peak RSS and the index's disk use. Vectors come from a seeded mixture of clusters
(real embeddings cluster; uniform random vectors are HNSW's worst case and nobody's corpus).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from knowledgeops.contracts.search import SearchMode
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.index.edge import EdgeEngine
from knowledgeops.index.edge_builder import Builder
from knowledgeops.index.edge_mapping import BuildSettings
from knowledgeops.index.engine import QuerySpec
from knowledgeops.index.points import Scope
from knowledgeops.index.vector_index import VectorIndex

COLLECTION = "chunks_scale"
CHUNKS_PER_DOC = 40
CLUSTERS = 256
BATCH = 256


class Corpus:
    """Deterministic chunks: point i's vector and text depend only on (seed, i)."""

    def __init__(self, dim: int, seed: int = 5) -> None:
        rng = np.random.default_rng(seed)
        self.dim = dim
        self.centers = rng.standard_normal((CLUSTERS, dim)).astype(np.float32)
        self.seed = seed
        words = [f"w{i}" for i in range(50_000)]
        # Zipf-like word frequencies, as in text.
        weights = 1.0 / np.arange(1, len(words) + 1)
        self.words, self.p = np.array(words), weights / weights.sum()

    def vectors(self, start: int, n: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, start))
        c = rng.integers(0, CLUSTERS, n)
        v = self.centers[c] + 0.6 * rng.standard_normal((n, self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def texts(self, start: int, n: int) -> list[str]:
        rng = np.random.default_rng((self.seed + 1, start))
        drawn = rng.choice(len(self.words), (n, 60), p=self.p)
        return [" ".join(self.words[row]) for row in drawn]

    def query(self, i: int) -> tuple[list[float], str]:
        v = self.vectors(10**9 + i, 1)[0]
        return v.tolist(), " ".join(self.texts(10**9 + i, 1)[0].split()[:4])


def _rss(field: str = "VmHWM") -> int:
    """This process's peak (VmHWM) or current (VmRSS) resident memory, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


class _AnonymousPeak:
    """The highest anonymous RSS of this process, sampled: VmHWM counts the shard's file pages
    too (mapped by writes and reads, reclaimable), this is the memory the process needs."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, _rss("RssAnon"))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def _disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def _timed(index: VectorIndex, n: int, corpus: Corpus, **kw: object) -> list[float]:
    out = []
    rng = random.Random(3)
    for i in range(n):
        vector, text = corpus.query(i)
        docs = kw.get("docs")
        scope = None
        if isinstance(docs, int):
            first = rng.randrange(0, max(1, docs - 50))
            scope = Scope(document_ids=[f"doc-{d}" for d in range(first, first + 50)])
        t = time.perf_counter()
        await index.search(
            COLLECTION,
            10,
            vector=vector,
            text=text,
            mode=kw["mode"],
            scope=scope,  # type: ignore[arg-type]
        )
        out.append((time.perf_counter() - t) * 1000)
    return out


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


async def run(points: int, dim: int, root: Path) -> None:
    corpus = Corpus(dim)
    engine = EdgeEngine(root, BuildSettings())
    index = VectorIndex(engine)
    builder = Builder(engine)
    builder.start()
    anonymous = _AnonymousPeak()
    t = time.perf_counter()
    for start in range(0, points, BATCH):
        n = min(BATCH, points - start)
        vecs = corpus.vectors(start, n)
        texts = corpus.texts(start, n)
        by_doc: dict[str, list[tuple[Chunk, list[float]]]] = {}
        for j in range(n):
            i = start + j
            chunk = Chunk(i % CHUNKS_PER_DOC, texts[j], f"{i:032x}", page=1, heading="Section")
            by_doc.setdefault(f"doc-{i // CHUNKS_PER_DOC}", []).append((chunk, vecs[j].tolist()))
        for doc, items in by_doc.items():
            await index.upsert(
                COLLECTION,
                doc,
                [c for c, _ in items],
                [v for _, v in items],
                version="v1",
                owner="o",
                tags=["t"],
            )
    upsert_s = time.perf_counter() - t
    print(f"\n{points:,} points, {dim} dimensions")
    print(
        f"  upsert: {points / upsert_s:,.0f} points/s ({upsert_s:.1f} s); "
        f"RSS now {_rss('VmRSS') / 2**20:,.0f} MB ({_rss('RssAnon') / 2**20:,.0f} MB "
        f"anonymous), peak {_rss() / 2**20:,.0f} MB"
    )
    # Searches while the builder may still be at work, then once everything is indexed.
    during = await _timed(index, 100, corpus, mode=SearchMode.HYBRID)
    print(
        f"  hybrid while indexing: p50 {_pct(during, 0.5):.1f} ms, p95 {_pct(during, 0.95):.1f} ms"
    )
    while (await index.unindexed()).get(COLLECTION, 0) >= engine.build.idle_points:  # noqa: ASYNC110
        await asyncio.sleep(1)
    print(
        f"  all indexed {time.perf_counter() - t - upsert_s:.0f} s after the last write "
        f"({builder.builds} builds)"
    )
    docs = points // CHUNKS_PER_DOC
    for mode, extra in (
        (SearchMode.HYBRID, {}),
        (SearchMode.DENSE, {}),
        (SearchMode.KEYWORD, {}),
        (SearchMode.HYBRID, {"docs": docs}),
    ):
        lat = await _timed(index, 300, corpus, mode=mode, **extra)
        name = f"{mode.value}{' scoped to 50 documents' if extra else ''}"
        print(f"  {name:<32} p50 {_pct(lat, 0.5):6.1f} ms  p95 {_pct(lat, 0.95):6.1f} ms")
    # Before the recall check: its exact scan reads every full vector (2 GB of file pages at
    # 1M points) that no search of the worker's ever reads.
    print(
        f"  RSS once indexed and searched: {_rss('VmRSS') / 2**20:,.0f} MB "
        f"({_rss('RssAnon') / 2**20:,.0f} MB anonymous, {_rss('RssFile') / 2**20:,.0f} MB "
        f"file pages of the shard); peak so far {_rss() / 2**20:,.0f} MB"
    )
    print(f"  recall@10 of HNSW vs exact: {await _recall(engine, corpus):.3f}")
    builder.stop()
    index.close()
    print(
        f"  peak RSS of this process (writing, building, swapping): {_rss() / 2**20:,.0f} MB, "
        f"anonymous {anonymous.stop() / 2**20:,.0f} MB; disk {_disk(root) / 2**20:,.0f} MB"
    )
    # A worker started on this index: a fresh process opens it and searches.
    out = subprocess.run(  # noqa: ASYNC221 (nothing else runs meanwhile)
        [sys.executable, "-m", "bench.index_scale", "--reopen", str(root), "--dim", str(dim)],
        capture_output=True,
        text=True,
        check=True,
    )
    print(out.stdout.rstrip())


async def reopen(root: Path, dim: int) -> None:
    corpus = Corpus(dim)
    t = time.perf_counter()
    index = VectorIndex(EdgeEngine(root))
    await index.search(COLLECTION, 10, vector=corpus.query(0)[0], mode=SearchMode.DENSE)
    opened = time.perf_counter() - t
    lat = await _timed(index, 300, corpus, mode=SearchMode.HYBRID)
    index.close()
    print(
        f"  a fresh process: reopen + first search {opened:.2f} s; hybrid p50 "
        f"{_pct(lat, 0.5):.1f} ms, p95 {_pct(lat, 0.95):.1f} ms; RSS after 300 searches "
        f"{_rss('VmRSS') / 2**20:,.0f} MB ({_rss('RssAnon') / 2**20:,.0f} MB anonymous), "
        f"peak {_rss() / 2**20:,.0f} MB"
    )


async def _recall(engine: EdgeEngine, corpus: Corpus, n: int = 100) -> float:
    from qdrant_edge import QuantizationSearchParams, Query, QueryRequest, SearchParams

    parts = engine.collection(COLLECTION).parts
    hits = []
    for i in range(n):
        vector = corpus.query(i)[0]
        # As the index searches (engine.query): HNSW, quantized, rescored.
        [approx] = engine.query(COLLECTION, [QuerySpec(10, dense=vector)], None)
        # Exact: every point compared with its full vector, no graph, no quantization.
        request = QueryRequest(
            limit=10,
            query=Query.Nearest(vector),
            params=SearchParams(exact=True, quantization=QuantizationSearchParams(ignore=True)),
        )
        exact = []
        for part in parts:
            with part.reading() as shard:
                exact.extend(shard.query(request))
        best = sorted(exact, key=lambda p: p.score, reverse=True)[:10]
        hits.append(len({p.id for p in approx} & {str(p.id) for p in best}) / 10)
    return statistics.mean(hits)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--points", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--reopen", type=Path, help=argparse.SUPPRESS)  # the fresh process's part
    args = p.parse_args()
    if args.reopen:
        asyncio.run(reopen(args.reopen, args.dim))
        return
    for n in args.points:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(run(n, args.dim, Path(tmp) / "index"))
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
