"""Outages of the services a task needs are waited out, bounded (knowledgeops/runtime/outages.py):
the object store (rclone serve s3, stopped and started again on its port) goes away in the
middle of imports. Within OUTAGE_WAIT_SECONDS every import completes once it is back, with no
chunk embedded twice; past it the import fails naming the service, and a retry resumes. The
long rehearsals (3 minutes of object store, 1 minute of PostgreSQL, five imports, uploads
answered 503 meanwhile) run in CI's PostgreSQL pass: tests/deploy/test_long_outages.py."""

from __future__ import annotations

from pathlib import Path

from knowledgeops.config.settings import Settings
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.environment import openai_settings, running_env
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.s3_server import rclone_s3_outages
from tests.helpers.waiting import eventually


async def test_an_outage_longer_than_its_bound_fails_naming_the_service_and_a_retry_resumes(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    with rclone_s3_outages(tmp_path / "s3") as (s3, outage):
        cfg = s3.settings(openai_settings(settings, fake_openai), outage_wait_seconds=3)
        # Embedding waits at the gate: the store goes down after parse and chunk, mid-import.
        fake_openai.hold = lambda kind, _n: kind == "embeddings"
        async with running_env(cfg) as env:
            doc = tmp_path / "notes.md"
            doc.write_text(numbered_paragraphs(80))
            ref = await env.documents.import_file(doc)
            await eventually(lambda: fake_openai.held, lambda n: n >= 1, what="an embed request")
            outage.down()
            fake_openai.release()

            failed = await env.service.wait(ref.task_id, timeout=120)
            assert failed.status == "failed", failed
            assert failed.last_error is not None
            assert "object store has been unreachable" in failed.last_error, failed.last_error
            assert "OUTAGE_WAIT_SECONDS=3" in failed.last_error, failed.last_error

            outage.up()
            again = await env.service.retry(ref.task_id, reason="the store is back")
            done = await env.service.wait(again.task_id, timeout=120)
            assert done.status == "completed", done.last_error
            chunks = done.result["total_chunks"] if done.result else 0
            assert chunks > 0
            assert await env.points(ref.document_id) == chunks
            # The retry resumed: what was embedded before the outage was not paid for again.
            assert fake_openai.duplicates() == 0
            assert fake_openai.embedded_count() == chunks
