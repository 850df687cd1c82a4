"""SIGKILL the worker in the middle of embedding (a crash, with the files in S3 and the new
worker starting with no working copy of them), or SIGTERM it (a deploy); a new worker finishes
the import.

The figures that matter: the point count equals the chunk count exactly (no duplicates, no
gaps), and at most two batches were embedded twice (paid twice). The domain events and the
catalogue come through the crash whole: each event once, in order. A SIGTERM drains: the worker
hands the running attempt back itself once its grace period is over and exits cleanly, so the
retry starts at once, not after a heartbeat timeout."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from pathlib import Path

import pytest

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import EMBED_CHUNKS
from knowledgeops.contracts.events import EventType
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.db.database import Database
from knowledgeops.db.events import EventStore
from knowledgeops.index.opening import open_index
from knowledgeops.index.vector_index import VectorIndex
from tests.helpers.activity_retries import retries
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.environment import (
    openai_settings,
    running_env,
    start_worker_process,
    stop_process,
)
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.s3_server import rclone_s3
from tests.helpers.waiting import eventually

BATCH = 32
GRACE_SECONDS = 1.0


@pytest.mark.parametrize(
    ("sig", "s3"),
    # The crash with the files in S3 and no working copy left (the harder case of the two).
    [(signal.SIGKILL, True), (signal.SIGTERM, False)],
    ids=["sigkill-storage-url", "sigterm"],
)
async def test_a_worker_stopped_mid_embedding_resumes_without_duplicates(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path, sig: signal.Signals, s3: bool
) -> None:
    with contextlib.ExitStack() as stack:
        if s3:
            # The files in S3 (rclone on loopback); the new worker starts with no working copy.
            settings = stack.enter_context(rclone_s3(tmp_path / "s3")).settings(settings)
        await _stopped_mid_embedding(settings, fake_openai, tmp_path, sig, forget_files=s3)


async def _stopped_mid_embedding(
    settings: Settings,
    fake_openai: FakeOpenAI,
    tmp_path: Path,
    sig: signal.Signals,
    *,
    forget_files: bool,
) -> None:
    cfg = openai_settings(
        settings,
        fake_openai,
        embedding_batch_size=BATCH,
        worker_shutdown_grace_seconds=GRACE_SECONDS,
    )
    doc = tmp_path / "big.txt"
    doc.write_text(numbered_paragraphs(1100))
    fake_openai.latency = 0.08
    log = tmp_path / "worker.log"
    first = start_worker_process(cfg, log)
    second = None
    try:
        async with running_env(cfg, worker=False) as env:
            ref = await env.documents.import_file(doc)

            async def checkpoint() -> int:
                assert first.poll() is None, f"the worker exited ({first.returncode})"
                return (await env.service.get_status(ref.task_id)).progress.done

            # Kill right after the server's copy of the checkpoint passes 400 chunks, so what
            # the new attempt finds already indexed beyond it is bounded by a batch or two.
            try:
                await eventually(
                    checkpoint,
                    lambda done: done >= 400,
                    timeout=60,
                    interval=0.01,
                    what="the checkpoint past 400 chunks",
                )
            except AssertionError as e:  # with the worker's log
                raise AssertionError(f"{e}\n{log.read_text()[-3000:]}") from None
            # Slow from here on, so the ~700 chunks left outlast the 1 s drain: a SIGTERMed
            # worker must hand the attempt back, not finish it inside its grace period.
            fake_openai.latency = 1.0
            first.send_signal(sig)
            code = await asyncio.to_thread(first.wait, 30)
            fake_openai.latency = 0.08
            at_kill = fake_openai.embedded_count()
            if forget_files:
                for folder in (cfg.files_dir, cfg.chunks_dir):
                    shutil.rmtree(folder)

            second = start_worker_process(cfg, log)
            st = await env.service.wait(ref.task_id, timeout=120)
            retried = await retries(env.client, ref.task_id)
        assert st.status == "completed", st.last_error
        assert stop_process(second) == 0
    finally:
        for p in (first, second):
            if p is not None:
                stop_process(p)

    total = st.result["total_chunks"]  # type: ignore[index]
    assert total >= 1000
    store = open_index(cfg)
    try:
        collection = VectorIndex.collection_name(f"openai:{cfg.embedding_model}")
        points = await store.count(collection, ref.document_id)
    finally:
        store.close()
    twice = fake_openai.duplicates()
    print(
        f"\nchunks={total} points={points} embedded_before_kill={at_kill} "
        f"embedded_total={fake_openai.embedded_count()} embedded_twice={twice} "
        f"reused={st.result['reused']} retried={retried}"  # type: ignore[index]
    )
    assert points == total
    db = await Database.open(cfg)
    try:
        events = await EventStore(db).after(task_id=ref.task_id)
        row = await DocumentCatalogue(db).get(ref.document_id)
    finally:
        await db.close()
    assert [e.event_type for e in events] == [
        EventType.TASK_ENQUEUED,
        EventType.TASK_STARTED,
        EventType.TASK_COMPLETED,
    ]
    assert row is not None and row.status == "ready" and row.indexed_chunks == total
    assert fake_openai.embedded_count() - twice == total, "every chunk embedded at least once"
    assert twice <= 2 * BATCH
    # The retry resumed from the checkpoint: had it started over, every chunk before the kill
    # (>= 400) would show up as reused (found in the index by content hash) instead.
    assert st.result["embedded"] + st.result["reused"] == total  # type: ignore[index]
    assert st.result["reused"] <= 3 * BATCH, st.result  # type: ignore[index]
    if sig == signal.SIGTERM:
        # Drained: a clean exit, and the cancelled attempt was handed back by the worker
        # itself (its WorkerShutdown failure): the retry had no heartbeat timeout to wait out.
        assert code == 0, code
        assert retried == {EMBED_CHUNKS.name: "WorkerShutdown"}, retried
    else:
        # The killed attempt was given up by its heartbeat timeout (20 s), not by its
        # start-to-close clock: that timeout is what the retry waited for.
        assert retried == {EMBED_CHUNKS.name: "HEARTBEAT"}, retried
