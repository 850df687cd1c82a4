"""Search latency through the HTTP API at a fixed size, beside the index's own time for the
same queries: how much the API adds to what the engine costs.

    .venv/bin/python -m bench.search_latency --docs 20 --paragraphs 370 [--local]

Documents (generated, half owned by `alice`) are imported through the system with an instant
embedding server (`--local`: the local model, the default provider, for imports and queries);
then 80 varied hybrid queries (2 to 4 words, seeded) go to `GET /v1/search?k=10`, one at a time:
once right after the import (while the index is still being built in the background), then,
once the index has settled (no build for 40 s, `GET /v1/admin/index`), unscoped and
owner-scoped after a warm-up pass of the same queries: the figure a knowledge base at rest
gives. The reference: the worker stopped, the same index
opened in this process, the same queries through `VectorIndex.search` with each query's vector
made beforehand (the engine's dense and BM25 queries, their fusion and the hits' payloads: no
HTTP, no embedding call, no catalogue). Beside it, one query's embedding made in this process,
one at a time (the part of the API's time that is the model's or the embedding server's), and
each query embedded then searched there, one after the other: what a caller of the engine
itself would otherwise have, the second reference ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.common import _WORDS, bench_settings, temporal_server, worker_process, write_corpus
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentMetadata
from knowledgeops.db.database import Database
from knowledgeops.index.edge_mapping import BuildSettings
from knowledgeops.index.live import live_index
from knowledgeops.index.opening import open_index
from knowledgeops.index.points import Scope
from knowledgeops.models.embedding import make_embedder
from knowledgeops.runtime.temporal import connect
from starter.services.documents import DocumentService
from starter.services.tasks import TaskQueueService
from tests.helpers.fake_openai import FakeOpenAI

WARM_UP = 10
ADMIN_TOKEN = "bench-admin-token"
# Longer than the builder's idle wait (BuildSettings.idle_seconds) and one look (CHECK_SECONDS):
# a count unchanged this long means no build is due or running.
SETTLED_AFTER = 40.0


def queries(n: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(_WORDS, rng.randint(2, 4))) for _ in range(n)]


def percentiles(ms: list[float]) -> tuple[float, float]:
    ordered = sorted(ms)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


async def import_all(settings: Settings, files: list[Path]) -> int:
    service = TaskQueueService(await connect(settings), settings)
    db = await Database.open(settings)
    try:
        documents = DocumentService(service, db, settings)
        refs = [
            await documents.import_file(
                p, metadata=DocumentMetadata(owner="alice" if i % 2 == 0 else "bob")
            )
            for i, p in enumerate(files)
        ]
        statuses = await asyncio.gather(*(service.wait(r.task_id) for r in refs))
        failed = [s for s in statuses if s.status != "completed"]
        if failed:
            raise SystemExit(f"{len(failed)} imports failed: {failed[0].last_error}")
        return sum((s.result or {}).get("total_chunks", 0) for s in statuses)
    finally:
        await db.close()


async def wait_settled(settings: Settings, limit: float = 600.0) -> tuple[float, int]:
    """Seconds until the background builder has nothing left to do, and the points it left
    unindexed: fewer than it builds on its own once idle (a partition's build takes minutes at
    1M points and the count changes only at its swap, so an unchanged count alone is not
    enough), unchanged for SETTLED_AFTER. The builder looks at a split collection's partitions
    one by one, so each may keep up to `idle_points` unindexed."""
    build = BuildSettings()
    base = f"http://127.0.0.1:{settings.api_port}"
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    started = changed = time.monotonic()
    last = -1
    async with httpx.AsyncClient(base_url=base, timeout=30, headers=headers) as http:
        while True:
            try:
                r = await http.get("/v1/admin/index")
            except httpx.TransportError as e:
                # The worker's event loop can stall for seconds (an Edge flush holds the
                # interpreter lock: bench/edge_gil.py), and its server then drops a kept-alive
                # connection as the request arrives; ask again on a new one.
                print(f"  asking the index's state again: {e!r}", flush=True)
                await asyncio.sleep(2.0)
                continue
            r.raise_for_status()
            info = r.json()
            live = [c for c in info["collections"] if c["live"]]
            now = sum(c["unindexed"] for c in live)
            split = sum(c["points"] for c in live) >= build.split_points
            most = build.idle_points * (build.partitions if split else 1)
            if now != last:
                last, changed = now, time.monotonic()
            idle = time.monotonic() - changed >= SETTLED_AFTER
            if idle and last < most:
                return changed - started, last
            if time.monotonic() - started > limit:
                raise SystemExit(f"the index did not settle in {limit:.0f} s ({last} unindexed)")
            await asyncio.sleep(2.0)


async def through_api(
    settings: Settings, texts: list[str], owner: str | None, *, warm_up: int = WARM_UP
) -> list[float]:
    base = f"http://127.0.0.1:{settings.api_port}"
    times: list[float] = []
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        for i, q in enumerate([*texts[:warm_up], *texts]):
            params: dict[str, str | int] = {"q": q, "k": 10}
            if owner:
                params["owner"] = owner
            t = time.perf_counter()
            r = await http.get("/v1/search", params=params)
            elapsed = (time.perf_counter() - t) * 1000
            r.raise_for_status()
            if i >= warm_up:
                times.append(elapsed)
    return times


@dataclass
class Reference:
    """The same queries without the API, in this process: the engine alone (each query's
    vector made beforehand), each query's embedding alone, and both one after the other (what a
    caller of the engine would otherwise have: embed the question with the model, then ask the
    engine)."""

    engine: list[float]
    embedding: list[float]
    embed_then_engine: list[float]


async def engine_alone(settings: Settings, texts: list[str], owner: str | None) -> Reference:
    # The engine in this process, whatever the worker ran (INDEX_PROCESS): the reference is the
    # engine itself, not a trip to another process.
    index = open_index(settings.model_copy(update={"index_process": False}))
    embedder = make_embedder(settings)
    try:
        live = await live_index(index, embedder.model_id)
        await embedder.warm_up()
        scope = Scope(owner=owner)
        vectors, embedding = [], []
        for i, q in enumerate([*texts[:WARM_UP], *texts]):
            t = time.perf_counter()
            [v] = await embedder.embed([q])
            if i >= WARM_UP:
                embedding.append((time.perf_counter() - t) * 1000)
                vectors.append(v)
        times: list[float] = []
        pairs = list(zip(texts, vectors, strict=True))
        # A whole warm-up pass, as the API's settled measurement has.
        for i, (q, v) in enumerate([*pairs, *pairs]):
            t = time.perf_counter()
            await index.search(live.collection, 10, vector=v, text=q, scope=scope)
            if i >= len(pairs):
                times.append((time.perf_counter() - t) * 1000)
        both: list[float] = []
        for q in texts:
            t = time.perf_counter()
            [v] = await embedder.embed([q])
            await index.search(live.collection, 10, vector=v, text=q, scope=scope)
            both.append((time.perf_counter() - t) * 1000)
        return Reference(times, embedding, both)
    finally:
        index.close()
        await embedder.aclose()


def report(label: str, api: list[float], ref: Reference) -> None:
    a50, a95 = percentiles(api)
    e50, e95 = percentiles(ref.engine)
    m50, m95 = percentiles(ref.embedding)
    b50, b95 = percentiles(ref.embed_then_engine)
    print(f"API {label}: p50 {a50:.1f} ms, p95 {a95:.1f} ms ({len(api)} queries)")
    print(
        f"engine {label}: p50 {e50:.1f} ms, p95 {e95:.1f} ms; API / engine at p95: {a95 / e95:.2f}"
    )
    print(f"query embedding alone: p50 {m50:.1f} ms, p95 {m95:.1f} ms")
    print(
        f"embedding then engine {label}: p50 {b50:.1f} ms, p95 {b95:.1f} ms; "
        f"API / (embedding then engine) at p95: {a95 / b95:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--paragraphs", type=int, default=370, help="per document (~0.27 chunks each)")
    ap.add_argument("--queries", type=int, default=80)
    ap.add_argument(
        "--local", action="store_true", help="the local embedding model, not an instant server"
    )
    args = ap.parse_args()
    fake = FakeOpenAI(dim=512).start()
    provider = {} if args.local else fake.embedding_settings()
    try:
        with tempfile.TemporaryDirectory(prefix="ko-bench-search-") as tmp:
            work = Path(tmp)
            files = write_corpus(work / "corpus", args.docs, args.paragraphs)
            texts = queries(args.queries)
            with temporal_server(work) as server:
                settings = bench_settings(
                    work / "data", server.address, ADMIN_TOKENS=f"{ADMIN_TOKEN}:bench", **provider
                )
                with worker_process(settings, work / "worker.log"):
                    chunks = asyncio.run(import_all(settings, files))
                    print(f"index: {args.docs} documents, {chunks} chunks")
                    fresh = asyncio.run(through_api(settings, texts, None))
                    p50, p95 = percentiles(fresh)
                    print(f"API right after the import: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
                    waited, left = asyncio.run(wait_settled(settings))
                    print(f"index settled {waited:.0f} s later ({left} points left unindexed)")
                    api = {
                        o: asyncio.run(through_api(settings, texts, o, warm_up=len(texts)))
                        for o in (None, "alice")
                    }
                engine = {o: asyncio.run(engine_alone(settings, texts, o)) for o in (None, "alice")}
            model = "local model" if args.local else "instant embedding server"
            print(f"embedding: {model}")
            report("hybrid", api[None], engine[None])
            report("hybrid, owner-scoped", api["alice"], engine["alice"])
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
