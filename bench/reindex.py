"""Re-index rate: documents/s and chunks/s of `knowledgeops reindex`, while search answers.

    .venv/bin/python -m bench.reindex [--docs 100] [--paragraphs 20] [--concurrency 4]

A real dev server and worker (the local embedder, as `knowledgeops dev`). Imports the corpus,
then runs two re-indexes one after the other, each timed from start to switch (grace 0):
  1. same model, same chunks: every vector comes from the embedding cache (the cost of the
     re-index machinery: child tasks, index writes);
  2. `--chunk-tokens 256`: every document parsed and split again, new texts embedded.
Meanwhile a client searches every 0.2 s through the API; prints how many searches answered,
failed, or returned nothing. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import bench_settings, temporal_server, worker_process, write_corpus
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.indexing import ReindexOptions
from knowledgeops.db.database import Database
from knowledgeops.runtime.temporal import connect
from starter.services.documents import DocumentService
from starter.services.reindex import start_reindex
from starter.services.tasks import TaskQueueService


async def searching(base: str, stop: asyncio.Event, tally: dict[str, int]) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        while not stop.is_set():
            try:
                r = await http.get("/v1/search", params={"q": "theory of the market", "k": 5})
                key = "answered" if r.status_code == 200 and r.json() else f"http {r.status_code}"
                if r.status_code == 200 and not r.json():
                    key = "empty"
            except httpx.HTTPError as e:
                key = type(e).__name__
            tally[key] = tally.get(key, 0) + 1
            await asyncio.sleep(0.2)


async def measure(settings: Settings, corpus: list[Path], concurrency: int) -> None:
    service = TaskQueueService(await connect(settings), settings)
    db = await Database.open(settings)
    documents = DocumentService(service, db, settings)
    started = time.perf_counter()
    refs = [await documents.import_file(p) for p in corpus]
    chunks = 0
    for ref in refs:
        st = await service.wait(ref.task_id, timeout=3600)
        assert st.status == "completed", st.last_error
        chunks += int((st.result or {})["total_chunks"])
    took = time.perf_counter() - started
    print(f"import: {len(refs)} documents, {chunks} chunks in {took:.1f} s")
    base = f"http://{settings.api_host}:{settings.api_port}"
    for label, tokens in (("same model and chunks (cache)", None), ("--chunk-tokens 256", 256)):
        tally: dict[str, int] = {}
        stop = asyncio.Event()
        client = asyncio.create_task(searching(base, stop, tally))
        options = ReindexOptions(chunk_tokens=tokens, concurrency=concurrency, grace_seconds=0)
        started = time.perf_counter()
        ref = await start_reindex(service, options, model=None, actor="bench")
        st = await service.wait(ref.task_id, timeout=3600)
        took = time.perf_counter() - started
        stop.set()
        await client
        assert st.status == "completed", st.last_error
        r: dict[str, Any] = st.result or {}
        print(
            f"re-index, {label}: {r['documents']} documents, {r['points']} chunks in "
            f"{took:.1f} s = {r['documents'] / took:.1f} documents/s, "
            f"{r['points'] / took:.1f} chunks/s; searches meanwhile: {tally}"
        )
    await db.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--paragraphs", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ko-reindex-") as tmp:
        work = Path(tmp)
        corpus = write_corpus(work / "corpus", args.docs, args.paragraphs)
        with temporal_server(work) as server:
            settings = bench_settings(work / "data", server.address)
            with worker_process(settings, work / "worker.log"):
                asyncio.run(measure(settings, corpus, args.concurrency))


if __name__ == "__main__":
    main()
