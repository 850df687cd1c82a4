"""A folder of one-paragraph notes as one batch task, beside the same kind of notes through the
per-document path, in one `knowledgeops dev` process, with an embedding server that answers at
once (the tests' fake OpenAI-compatible server).

    .venv/bin/python -m bench.folder_import [--docs 10000] [--per-document 1000]

Per-document: `--per-document` notes uploaded one by one through the HTTP API (8 clients, as
bench.small_docs), each its own DOCUMENT_IMPORT. Folder: `--docs` notes written to a folder and
sent as `knowledgeops import DIR` sends them (one multipart request, then one
DOCUMENT_BATCH_IMPORT). Documents/s end to end = from the first byte sent to the last import
completed (as Temporal records it). Prints both, the embedding requests each made, and the
batch's own counts. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

from bench.common import bench_settings, running_process
from bench.small_docs import upload_all
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentMetadata
from knowledgeops.runtime.temporal import connect
from starter.cli import folder_import
from starter.dev_server import free_port, port_in_use
from tests.helpers.fake_openai import FakeOpenAI

_FOLDER_NOTE = "Folder note {i}: card {i} is due in {d} days; spacing reviews beats cramming.\n"
_IMPORTS = 'TaskType = "DOCUMENT_IMPORT"'


async def per_document(settings: Settings, docs: int) -> float:
    """Documents/s of `docs` notes uploaded one by one (each its own import)."""
    temporal = await connect(settings)
    first_sent = datetime.now().astimezone()
    task_ids, failures, upload_s = await upload_all(settings.resolved_api_url, docs, 8)
    while True:
        running = await temporal.count_workflows(f'{_IMPORTS} AND ExecutionStatus = "Running"')
        if running.count == 0:
            ended = await temporal.count_workflows(f'{_IMPORTS} AND ExecutionStatus != "Running"')
            if ended.count >= len(task_ids):
                break
        await asyncio.sleep(1.0)
    closes = [w.close_time async for w in temporal.list_workflows(_IMPORTS) if w.close_time]
    seconds = (max(closes) - first_sent).total_seconds()
    rate = len(task_ids) / seconds
    print(
        f"per-document: {len(task_ids)} notes ({upload_s:.1f} s to upload), "
        f"{rate:.1f} documents/s end to end ({seconds:.1f} s); upload failures: "
        f"{sum(failures.values())}"
    )
    return rate


async def folder(settings: Settings, docs: int, root: Path) -> float:
    """Documents/s of a folder of `docs` notes sent as `knowledgeops import DIR` sends it."""
    for i in range(docs):
        sub = root / f"week-{i % 50:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note-{i:05d}.md").write_text(_FOLDER_NOTE.format(i=i, d=i % 30 + 1))
    named = folder_import.collect([root])
    temporal = await connect(settings)
    started = time.perf_counter()
    first_sent = datetime.now().astimezone()
    [batch] = await folder_import.submit_through_api(settings, named, DocumentMetadata())
    submitted = time.perf_counter() - started
    handle = temporal.get_workflow_handle(batch.task_id)
    await handle.result()
    desc = await handle.describe()
    assert desc.close_time is not None
    seconds = (desc.close_time - first_sent).total_seconds()
    async with httpx.AsyncClient(base_url=settings.resolved_api_url, timeout=60) as http:
        view = (await http.get(f"/v1/document-batches/{batch.task_id}")).json()
    rate = view["imported"] / seconds
    print(
        f"folder: {batch.total} notes in one batch ({submitted:.1f} s to send and store), "
        f"{rate:.1f} documents/s end to end ({seconds:.1f} s); imported {view['imported']}, "
        f"failed {view['failed']}, chunks {view['chunks']}"
    )
    return rate


async def measure(
    settings: Settings, fake: FakeOpenAI, args: argparse.Namespace, tmp: Path
) -> None:
    if args.per_document:
        before = fake.requests
        single = await per_document(settings, args.per_document)
        print(f"  embedding: {fake.requests - before} requests")
    before = fake.requests
    batch = await folder(settings, args.docs, tmp / "notes")
    print(f"  embedding: {fake.requests - before} requests")
    if args.per_document:
        print(f"folder / per-document: {batch / single:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=10_000, help="notes in the folder")
    ap.add_argument(
        "--per-document", type=int, default=1000, help="notes uploaded one by one (0: skip)"
    )
    ap.add_argument("--keep-log", type=Path, help="copy the dev process's log here")
    args = ap.parse_args()
    fake = FakeOpenAI().start()
    try:
        with tempfile.TemporaryDirectory(prefix="ko-bench-folder-") as tmp:
            port = free_port()
            while port + 1000 > 65535 or port_in_use("127.0.0.1", port + 1000):
                port = free_port()  # the dev server's Web UI takes port + 1000
            settings = bench_settings(
                Path(tmp) / "data",
                f"127.0.0.1:{port}",
                EMBEDDING_PROVIDER="openai",
                EMBEDDING_MODEL="fake-embed",
                OPENAI_BASE_URL=fake.base_url,
                OPENAI_API_KEY=fake.api_key,
            )
            log = Path(tmp) / "dev.log"
            dev = [sys.executable, "-m", "starter.cli.main", "dev"]
            try:
                with running_process(dev, settings, log, "knowledgeops is running", timeout=90):
                    asyncio.run(measure(settings, fake, args, Path(tmp)))
            finally:
                if args.keep_log:
                    shutil.copy(log, args.keep_log)
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
