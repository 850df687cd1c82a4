"""Search quality on public retrieval sets, measured as a user meets search: every document
uploaded through the HTTP API (`POST /v1/documents`, the real import path: parse, chunk,
embed with the local model, upsert into the embedded engine), every query through
`GET /v1/search`, for the modes `dense`, `keyword` and `hybrid`. Beside them, in the same run,
what a user would otherwise have: plain BM25 over the same documents (bm25s; English stemmed
with stop words removed, Chinese segmented by jieba).

    python -m bench.search_quality SET_DIR [SET_DIR ...] [--queries 2000] [--sweep]

A SET_DIR is in BEIR's layout (`python -m bench.retrieval_sets convert ...`). `--sweep` also
fuses the dense and keyword candidate lists the API returned with other methods and weights,
in this process, with the engine's own `fuse()`: what hybrid would rank with those settings.
Needs the benchmark extras: `pip install -e '.[bench]'`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import bench_settings, temporal_server, worker_process
from bench.retrieval_sets import RetrievalSet, document_markdown, documents_of, load, measure
from knowledgeops.index.engine import Scored
from knowledgeops.index.fusion import Fusion, FusionConfig, fuse

MODES = ("dense", "keyword", "hybrid")
SWEEP = [(Fusion.CONVEX, w) for w in (0.5, 0.6, 0.7, 0.8, 0.9)] + [
    (Fusion.RRF, w) for w in (0.5, 0.7, 0.8)
]


def _chinese(rs: RetrievalSet) -> bool:
    sample = "".join(t for _, t in list(rs.corpus.values())[:20])
    return sum("\u4e00" <= c <= "\u9fff" for c in sample) > len(sample) / 4


def plain_bm25(rs: RetrievalSet, qids: list[str]) -> dict[str, list[str]]:
    import bm25s

    ids = list(rs.corpus)
    texts = [f"{rs.corpus[i][0]}\n{rs.corpus[i][1]}" for i in ids]
    retriever = bm25s.BM25()
    if _chinese(rs):
        import jieba

        def tokens(s: str) -> list[str]:
            return [w for w in jieba.lcut(s) if w.strip()]

        retriever.index([tokens(t) for t in texts], show_progress=False)
        queries: Any = [tokens(rs.queries[q]) for q in qids]
    else:
        import Stemmer

        stem = Stemmer.Stemmer("english")
        retriever.index(
            bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False),
            show_progress=False,
        )
        queries = [
            bm25s.tokenize([rs.queries[q]], stopwords="en", stemmer=stem, show_progress=False)
            for q in qids
        ]
    out = {}
    for q, query in zip(qids, queries, strict=True):
        docs, _ = retriever.retrieve(
            query if not isinstance(query, list) else [query], k=100, show_progress=False
        )
        out[q] = [ids[j] for j in docs[0]]
    return out


async def _upload(http: httpx.AsyncClient, folder: Path, rs: RetrievalSet) -> dict[str, str]:
    """Corpus id -> document id, every import completed."""
    gate = asyncio.Semaphore(8)
    tasks: dict[str, str] = {}
    doc_of: dict[str, str] = {}

    async def one(cid: str) -> None:
        title, text = rs.corpus[cid]
        path = folder / f"{cid}.md"
        path.write_text(document_markdown(title, text), encoding="utf-8")
        async with gate:
            r = await http.post(
                "/v1/documents",
                files={"file": (path.name, path.read_bytes())},
                headers={"X-Requested-With": "bench"},
            )
        r.raise_for_status()
        tasks[cid] = r.json()["task_id"]
        doc_of[r.json()["document_id"]] = cid

    await asyncio.gather(*(one(c) for c in rs.corpus))
    for cid, task in tasks.items():
        while True:
            st = (await http.get(f"/v1/tasks/{task}")).json()
            if st["status"] == "completed":
                break
            if st["status"] in ("failed", "cancelled", "terminated", "timed_out"):
                raise RuntimeError(f"import of {cid} ended {st['status']}: {st.get('last_error')}")
            await asyncio.sleep(0.5)
    return doc_of


async def _search(
    http: httpx.AsyncClient, queries: dict[str, str], mode: str
) -> tuple[dict[str, list[dict[str, Any]]], float]:
    gate = asyncio.Semaphore(4)
    out: dict[str, list[dict[str, Any]]] = {}
    latencies: list[float] = []

    async def one(qid: str) -> None:
        async with gate:
            t = time.perf_counter()
            r = await http.get("/v1/search", params={"q": queries[qid], "k": 100, "mode": mode})
            latencies.append(time.perf_counter() - t)
        r.raise_for_status()
        out[qid] = r.json()

    await asyncio.gather(*(one(q) for q in queries))
    latencies.sort()
    return out, latencies[len(latencies) // 2] * 1000


def _ranking(hits: dict[str, list[dict[str, Any]]], doc_of: dict[str, str]) -> dict[str, list[str]]:
    return {q: documents_of(doc_of[h["document_id"]] for h in hs) for q, hs in hits.items()}


def _scored(hits: list[dict[str, Any]]) -> list[Scored]:
    return [Scored(f"{h['document_id']}\x00{h['chunk_index']}", h["score"]) for h in hits]


def run_set(folder: Path, n_queries: int, sweep: bool) -> dict[str, Any]:
    rs = load(folder)
    qids = sorted(rs.qrels)
    random.Random(7).shuffle(qids)
    qids = qids[:n_queries]
    rs.qrels = {q: rs.qrels[q] for q in qids}
    report: dict[str, Any] = {"set": rs.name, "documents": len(rs.corpus), "queries": len(qids)}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        with temporal_server(tmp / "temporal") as server:
            settings = bench_settings(tmp / "data", server.address)
            with worker_process(settings, tmp / "worker.log"):
                base = f"http://{settings.api_host}:{settings.api_port}"
                lists, doc_of = asyncio.run(_measure(base, tmp, rs, qids, report))
    ndcg, recall = measure(plain_bm25(rs, qids), rs)
    report["plain_bm25"] = {"ndcg10": ndcg, "recall100": recall}
    if sweep:
        report["sweep"] = _sweep(lists, doc_of, rs, qids)
    return report


async def _measure(
    base: str, tmp: Path, rs: RetrievalSet, qids: list[str], report: dict[str, Any]
) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], dict[str, str]]:
    queries = {q: rs.queries[q] for q in qids}
    async with httpx.AsyncClient(base_url=base, timeout=300) as http:
        t = time.monotonic()
        (tmp / "docs").mkdir()
        doc_of = await _upload(http, tmp / "docs", rs)
        report["import_seconds"] = round(time.monotonic() - t, 1)
        lists = {}
        for mode in MODES:
            hits, p50 = await _search(http, queries, mode)
            lists[mode] = hits
            ndcg, recall = measure(_ranking(hits, doc_of), rs)
            report[mode] = {"ndcg10": ndcg, "recall100": recall, "p50_ms": p50}
    return lists, doc_of


def _sweep(
    lists: dict[str, dict[str, list[dict[str, Any]]]],
    doc_of: dict[str, str],
    rs: RetrievalSet,
    qids: list[str],
) -> dict[str, tuple[float, float]]:
    out = {}
    for method, w in SWEEP:
        cfg = FusionConfig(method, w)
        ranked = {}
        for q in qids:
            fused = fuse(_scored(lists["dense"][q]), _scored(lists["keyword"][q]), cfg)
            ranked[q] = documents_of(doc_of[s.id.split("\x00")[0]] for s in fused)
        out[f"{method.value} {w}"] = measure(ranked, rs)
    return out


def _print(r: dict[str, Any]) -> None:
    print(
        f"\n{r['set']}: {r['documents']} documents, {r['queries']} queries, "
        f"imported in {r['import_seconds']} s"
    )
    for name in (*MODES, "plain_bm25"):
        m = r[name]
        lat = f"  search p50 {m['p50_ms']:.0f} ms" if "p50_ms" in m else ""
        print(f"  {name:<11} nDCG@10 {m['ndcg10']:.3f}  Recall@100 {m['recall100']:.3f}{lat}")
    for name, (ndcg, recall) in r.get("sweep", {}).items():
        print(f"  fused {name:<10} nDCG@10 {ndcg:.3f}  Recall@100 {recall:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("sets", nargs="+", type=Path)
    p.add_argument("--queries", type=int, default=2000, help="sampled per set (seeded)")
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = p.parse_args()
    reports = []
    for folder in args.sets:
        r = run_set(folder, args.queries, args.sweep)
        _print(r)
        reports.append(r)
    if args.out:
        args.out.write_text(json.dumps(reports, indent=2))


if __name__ == "__main__":
    main()
