"""A sample platform report over realistic data, rendered by a real browser into docs/.

    .venv/bin/python -m bench.report_screenshot [--out docs/report-sample.png] [--keep DIR]

Starts a Temporal dev server and a worker process (temporary directory, free ports), records
a week of representative history (imports, backups, cleanups, reports with their failures,
retries and durations) as domain events, then does real work on top: imports every file in
examples/, a corrupt PDF that fails and is retried by hand, an import cancelled while it
embeds. Then runs REPORT_GENERATE through TaskQueueService and has headless Chromium (Debian's
`chromium` package) screenshot the HTML. Prints the report id and the headline figures.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import ROOT, bench_settings, temporal_server, worker_process, write_corpus
from knowledgeops.contracts.events import EventType, TaskEvent
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from knowledgeops.registry.task_types import TaskType
from knowledgeops.runtime.temporal import connect
from starter.services.documents import DocumentService
from starter.services.tasks import TaskQueueService

EXAMPLES = ROOT / "examples"
WAIT = 300.0
# (task type, share of runs, median seconds, failure rate, failure messages)
HISTORY = [
    ("DOCUMENT_IMPORT", 0.70, 14.0, 0.06, [
        "CorruptDocument: scan-0412.pdf is not a readable PDF (Data format error); re-export it",
        "EncryptedDocument: contract.pdf is password protected; upload an unprotected copy",
        "UnsupportedFormat: slides.key is not one of txt, md, html, pdf, docx",
        "EmbeddingUnavailable: the embedding API kept answering 503 after 6 retries",
    ]),
    ("GENERATE_ARTIFACT", 0.12, 38.0, 0.08, [
        "ModelTimeout: the model did not answer within 120 s; try again later",
    ]),
    ("REPORT_GENERATE", 0.05, 3.0, 0.0, []),
    ("CLEANUP_EXECUTE", 0.06, 9.0, 0.0, []),
    ("BACKUP_EXECUTE", 0.07, 55.0, 0.1, [
        "BackupTargetFull: no space left on /backups (needs 2.1 GB); free space or keep fewer",
    ]),
]  # fmt: skip


def history(now: datetime, runs: int, seed: int = 5) -> list[TaskEvent]:
    """A week of finished runs, busier in working hours, with failures, cancels and retries."""
    rng = random.Random(seed)
    events: list[TaskEvent] = []
    start = now - timedelta(days=7)
    for i in range(runs):
        task_type, _, median, fail_rate, messages = rng.choices(
            HISTORY, weights=[h[1] for h in HISTORY]
        )[0]
        while True:  # working hours are busier
            at = start + timedelta(seconds=rng.uniform(0, 7 * 86400 - 7200))
            if 8 <= at.hour < 19 or rng.random() < 0.25:
                break
        task_id, run_id = f"sample-{task_type.lower()}-{i:04d}", f"run-{i:04d}"
        ev = _events_of(events, task_type, task_id, run_id)
        ev(EventType.TASK_ENQUEUED, at)
        began = at + timedelta(seconds=rng.uniform(0.05, 2.0))
        ev(EventType.TASK_STARTED, began)
        ended = began + timedelta(seconds=rng.lognormvariate(0, 0.6) * median)
        roll = rng.random()
        if roll < fail_rate:
            ev(EventType.TASK_FAILED, ended, rng.choice(messages))
        elif roll < fail_rate + 0.02:
            ev(EventType.TASK_CANCELLED, ended)
        elif task_type == "DOCUMENT_IMPORT":
            chunks = rng.randint(8, 400)
            reused = chunks if rng.random() < 0.15 else rng.randint(0, chunks // 10)
            ev(EventType.TASK_COMPLETED, ended, total_chunks=chunks, embedded=chunks - reused,
               reused=reused, stale_removed=0, format="pdf", pages=rng.randint(1, 60))  # fmt: skip
        else:
            ev(EventType.TASK_COMPLETED, ended)
    return events


def _events_of(
    into: list[TaskEvent], task_type: str, task_id: str, run_id: str
) -> Callable[..., None]:
    def ev(kind: EventType, at: datetime, error: str | None = None, **data: object) -> None:
        into.append(
            TaskEvent(
                event_id=f"{task_id}/{run_id}/{kind.value}",
                event_type=kind,
                task_id=task_id,
                run_id=run_id,
                task_type=task_type,
                at=at,
                error=error,
                data=dict(data),
            )
        )

    return ev


async def sample(data_dir: Path, out: Path, address: str, work: Path) -> None:
    settings = bench_settings(data_dir, address)
    db = await Database.open(settings)
    now = datetime.now(UTC)
    await EventStore(db).record(history(now - timedelta(hours=1), runs=420))
    client = await connect(settings)
    service = TaskQueueService(client, settings, db)
    documents = DocumentService(service, db, settings, None)
    with worker_process(settings, work / "worker.log"):
        refs = [await documents.import_file(p) for p in sorted(EXAMPLES.iterdir())]
        bad = work / "broken-scan.pdf"
        bad.write_bytes(b"%PDF-1.7\n this is not a PDF body")
        refs.append(await documents.import_file(bad))
        for ref in refs:
            await service.wait(ref.task_id, timeout=WAIT)
        await service.retry(refs[-1].task_id, reason="re-uploaded?", actor="alice")
        await service.wait(refs[-1].task_id, timeout=WAIT)
        # Big enough (~600 chunks, ~10 batches) to be still embedding when the cancel lands.
        [big] = write_corpus(work / "big", docs=1, paragraphs=3000)
        ref = await documents.import_file(big)
        for _ in range(600):  # cancel once it is embedding
            if (await service.get_status(ref.task_id)).progress.done > 0:
                break
            await asyncio.sleep(0.1)
        await service.cancel(ref.task_id, reason="wrong file", actor="bob")
        print("cancelled import:", (await service.wait(ref.task_id, timeout=WAIT)).status)
        task = await service.enqueue(
            TaskType.REPORT_GENERATE, {"period_days": 7, "title": "Platform report (sample)"}
        )
        st = await service.wait(task.task_id, timeout=WAIT)
    await db.close()
    if st.status != "completed" or st.result is None:
        raise SystemExit(f"the report failed: {st.last_error}")
    print("report", st.result["report_id"])
    print("headline", st.result["headline"])
    html = Path(st.result["html_path"])
    screenshot(html, out)
    print("html", html, "\nscreenshot", out)


def screenshot(html: Path, out: Path, size: str = "1280,4200") -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium is not installed: apt-get install -y chromium")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--screenshot={out.resolve()}", f"--window-size={size}", html.resolve().as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report-sample.png")
    parser.add_argument("--keep", type=Path, help="keep the data directory here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ko-report-") as tmp:
        work = Path(tmp)
        with temporal_server(work / "temporal") as server:
            data_dir = args.keep or work / "data"
            asyncio.run(sample(data_dir, args.out, server.address, work))


if __name__ == "__main__":
    main()
