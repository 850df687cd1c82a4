"""SIGKILL the worker in the middle of a batch import (a group's embedding request in flight);
a new worker finishes the batch.

The figures that matter: every note's text was paid for once, except the request in flight
when the worker died (the provider answered it to a dead worker); every note ends `ready`
with exactly one point; the groups that had completed are not run again."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_batch import IMPORT_GROUP
from starter.services.document_batches import DocumentBatchService
from tests.helpers.activity_retries import retries
from tests.helpers.environment import (
    openai_settings,
    running_env,
    start_worker_process,
    stop_process,
)
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.waiting import eventually

NOTES, GROUP, BATCH = 60, 20, 8
# Embedding requests per group (20 texts in requests of 8): the 4th is the second group's first.
HELD_REQUEST = 4


async def test_a_worker_killed_mid_batch_resumes_without_paying_twice(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    cfg = openai_settings(settings, fake_openai, embedding_batch_size=BATCH)
    fake_openai.hold = lambda kind, n: kind == "embeddings" and n == HELD_REQUEST
    log = tmp_path / "worker.log"
    first = start_worker_process(cfg, log)
    try:
        async with running_env(cfg, worker=False) as env:
            batches = DocumentBatchService(env.documents)
            texts = [
                f"Note {i}: the axolotl{i} regrows what it loses, day {i}.\n" for i in range(NOTES)
            ]
            accepted = await batches.submit(
                [(f"n{i:02d}.txt", [t.encode()]) for i, t in enumerate(texts)],
                size=sum(len(t) for t in texts),
                group_size=GROUP,
                groups_at_once=1,
            )
            try:
                await eventually(
                    lambda: fake_openai.held,
                    lambda held: held == 1,
                    timeout=60,
                    interval=0.02,
                    what="the second group's first embedding request in flight",
                )
            except AssertionError as e:  # with the worker's log
                raise AssertionError(f"{e}\n{log.read_text()[-3000:]}") from None
            first.send_signal(signal.SIGKILL)
            await asyncio.to_thread(first.wait, 30)
    finally:
        stop_process(first)
    # Everything answered so far was paid once: the first group's 20 texts.
    assert (fake_openai.embedded_count(), fake_openai.duplicates()) == (GROUP, 0)
    fake_openai.release()  # the held request is answered now, to nobody

    # A new worker (in this process: the dead one's index lock is free).
    async with running_env(cfg) as env:
        done = await env.service.wait(accepted.task_id, timeout=90)
        retried = await retries(env.client, accepted.task_id)
        page = await env.documents.list(limit=500)
        points = await env.points()
    assert done.status == "completed", done.last_error
    assert done.result is not None and done.result["imported"] == NOTES
    assert {d.status for d in page.items} == {"ready"} and page.total == NOTES
    assert points == NOTES
    # Every text once, plus the request the dead worker never got the answer of.
    assert len(set(fake_openai.inputs)) == NOTES
    assert fake_openai.duplicates() == BATCH
    # The killed group was retried after its heartbeat timeout; the first was not run again.
    assert retried == {IMPORT_GROUP.name: "HEARTBEAT"}, retried
