"""A folder of one-paragraph notes as one batch task, beside the same kind of notes through the
per-document path, and (`--mixed`) a folder of mixed real files as one batch task, in one
`knowledgeops dev` process, with an embedding server that answers at once (the tests' fake
OpenAI-compatible server).

    .venv/bin/python -m bench.folder_import [--docs 10000] [--per-document 1000] [--mixed N]

Per-document: `--per-document` notes uploaded one by one through the HTTP API (8 clients, as
bench.small_docs), each its own DOCUMENT_IMPORT. Folder: `--docs` notes written to a folder and
sent as `knowledgeops import DIR` sends them (one multipart request, then one
DOCUMENT_BATCH_IMPORT). Mixed (skipped unless `--mixed N`, e.g. 10000): N files written by
bench.mixed_files (40% markdown notes, 25% plain text, 20% HTML pages, 15% PDFs of 1-3 pages)
into subfolders, sent the same way; writing them is timed and printed on its own, never part
of the rate. Documents/s end to end = from the first byte sent to the last import completed
(as Temporal records it). Prints each rate, the embedding requests each made, and the batch's
own counts (for mixed files also per kind, the child imports the batch started, and the first
failures with their reasons). Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from bench.common import bench_settings, running_process
from bench.mixed_files import write_mixed
from bench.small_docs import upload_all
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentMetadata
from knowledgeops.runtime.temporal import connect
from starter.cli import folder_import
from starter.dev_server import free_port, port_in_use
from starter.services.document_batches import BatchAccepted, BatchView
from tests.helpers.fake_openai import FakeOpenAI

_FOLDER_NOTE = "Folder note {i}: card {i} is due in {d} days; spacing reviews beats cramming.\n"
_IMPORTS = 'TaskType = "DOCUMENT_IMPORT"'
# Failures of the mixed folder printed with their reasons (all are counted).
_FAILURES_SHOWN = 5


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


@dataclass
class Imported:
    """A folder's batch once it has closed, and how long it took."""

    batch: BatchAccepted
    view: BatchView
    submitted: float  # seconds to send the request and store the files (the API's answer)
    seconds: float  # first byte sent to the batch's close, as Temporal records it
    children: int  # its bigger files' and scans' own imports (child DOCUMENT_IMPORTs)

    @property
    def rate(self) -> float:
        return self.view.imported / self.seconds


async def import_folder(settings: Settings, root: Path) -> Imported:
    """A folder sent as `knowledgeops import DIR` sends it, followed until its batch closes."""
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
        r = await http.get(f"/v1/document-batches/{batch.task_id}")
        r.raise_for_status()
        view = BatchView.model_validate(r.json())
    children = await temporal.count_workflows(
        f'{_IMPORTS} AND ParentWorkflowId = "{batch.task_id}"'
    )
    return Imported(batch, view, submitted, seconds, children.count)


async def folder(settings: Settings, docs: int, root: Path) -> float:
    """Documents/s of a folder of `docs` notes sent as `knowledgeops import DIR` sends it."""
    for i in range(docs):
        sub = root / f"week-{i % 50:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note-{i:05d}.md").write_text(_FOLDER_NOTE.format(i=i, d=i % 30 + 1))
    run = await import_folder(settings, root)
    v = run.view
    print(
        f"folder: {run.batch.total} notes in one batch ({run.submitted:.1f} s to send and store), "
        f"{run.rate:.1f} documents/s end to end ({run.seconds:.1f} s); imported {v.imported}, "
        f"failed {v.failed}, chunks {v.chunks}"
    )
    return run.rate


async def mixed(settings: Settings, files: int, root: Path) -> float:
    """Documents/s of a folder of `files` mixed real files (bench.mixed_files), sent as
    `knowledgeops import DIR` sends it; writing them is timed apart."""
    started = time.perf_counter()
    written = await asyncio.to_thread(write_mixed, root, files)
    wrote = time.perf_counter() - started
    each = ", ".join(
        f"{k} {written.seconds[k] / n * 1000:.1f} ms" for k, n in written.files.items() if n
    )
    print(
        f"mixed: wrote {written.total} files ({sum(written.bytes.values()) / 2**20:.1f} MB) in "
        f"{wrote:.1f} s, not counted in the rate; each: {each}"
    )
    run = await import_folder(settings, root)
    v = run.view
    print(
        f"mixed: {run.batch.total} files in one batch ({run.submitted:.1f} s to send and store), "
        f"{run.rate:.1f} documents/s end to end ({run.seconds:.1f} s); imported {v.imported}, "
        f"failed {v.failed}, chunks {v.chunks}, child imports {run.children}"
        + (f", duplicates {run.batch.duplicates}" if run.batch.duplicates else "")
    )
    # The batch counts documents, not kinds: a kind's failures are read from their names.
    failed = Counter(Path(f.filename).suffix.lstrip(".") for f in v.failures)
    print(
        "  kinds: "
        + ", ".join(
            f"{k} {n} ({written.bytes[k] / n / 1024:.1f} KB avg"
            + (f", {failed[k]} failed)" if failed[k] else ")")
            for k, n in written.files.items()
            if n
        )
    )
    for f in v.failures[:_FAILURES_SHOWN]:
        print(f"  failed: {f.filename}: {f.error}")
    if v.failed > _FAILURES_SHOWN:
        print(f"  ... and {v.failed - _FAILURES_SHOWN} more failures")
    return run.rate


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
    if args.mixed:
        before = fake.requests
        await mixed(settings, args.mixed, tmp / "mixed")
        print(f"  embedding: {fake.requests - before} requests")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=10_000, help="notes in the folder")
    ap.add_argument(
        "--per-document", type=int, default=1000, help="notes uploaded one by one (0: skip)"
    )
    ap.add_argument(
        "--mixed", type=int, default=0, help="mixed real files in a second folder (0: skip)"
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
                **fake.embedding_settings(),
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
