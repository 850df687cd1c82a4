"""The outages a deployment meets, at their real length, in the middle of five imports through
the HTTP API: the object store down 3 minutes, PostgreSQL stopped 1 minute. Every import
completes once the service is back, with points equal to chunks and no chunk embedded twice;
uploads meanwhile are answered 503 with Retry-After, naming the service, and accepted again
afterwards. Minutes long: CI's PostgreSQL pass runs them (KNOWLEDGEOPS_TEST_LONG_OUTAGES=1);
KNOWLEDGEOPS_TEST_OUTAGE_SECONDS shortens both outages for a quick local run."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from knowledgeops.config.settings import Settings
from tests.helpers.documents import numbered_paragraphs, upload
from tests.helpers.environment import Api, openai_settings, running_api
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.postgres import postgres_bin, postgres_cluster
from tests.helpers.problems import problem
from tests.helpers.s3_server import rclone_s3_outages
from tests.helpers.waiting import eventually

pytestmark = pytest.mark.skipif(
    not os.environ.get("KNOWLEDGEOPS_TEST_LONG_OUTAGES"),
    reason="minutes long: CI's PostgreSQL pass runs it (KNOWLEDGEOPS_TEST_LONG_OUTAGES=1)",
)
IMPORTS = 5


def outage_seconds(default: float) -> float:
    return float(os.environ.get("KNOWLEDGEOPS_TEST_OUTAGE_SECONDS") or default)


async def ride_out(
    api: Api,
    fake: FakeOpenAI,
    tmp: Path,
    *,
    service: str,
    seconds: float,
    down: Callable[[], None],
    up: Callable[[], None],
) -> None:
    """Five imports; `service` goes down once they wait to embed, for `seconds`."""
    fake.hold = lambda kind, _n: kind == "embeddings"
    tasks = []
    for i in range(IMPORTS):
        path = tmp / f"notes-{i}.md"
        path.write_text(f"# Notes {i}\n\n" + numbered_paragraphs(60 + 10 * i))
        answer = await api.upload(path)
        tasks.append((answer["task_id"], answer["document_id"]))
    await eventually(lambda: fake.held, lambda n: n >= 1, timeout=120, what="an embed request")
    down()
    fake.release()  # the imports go on into the outage

    late = tmp / "during-the-outage.md"
    late.write_text("# Late\n\nUploaded while a service was down.\n")
    r = await api.http.post("/v1/documents", **upload(late))
    assert r.status_code == 503, r.text
    assert int(r.headers["Retry-After"]) > 0
    body = problem(r, 503, "service_unavailable")
    assert body["service"] == service and service in body["detail"], body

    await asyncio.sleep(seconds)  # the outage's length is the scenario, not a wait for a state
    for task_id, _doc in tasks:
        status = (await api.http.get(f"/v1/tasks/{task_id}")).json()
        assert status["status"] in ("pending", "running"), status  # waiting, not failed
    up()

    for task_id, document_id in tasks:
        done = await api.wait_task(task_id, timeout=300)
        assert done["status"] == "completed", done
        doc = (await api.http.get(f"/v1/documents/{document_id}")).json()
        assert doc["points_in_index"] == doc["indexed_chunks"] == done["result"]["total_chunks"]
    assert fake.duplicates() == 0, "a chunk was embedded twice"
    again = await api.http.post("/v1/documents", **upload(late))
    assert again.status_code == 202, again.text


async def test_five_imports_ride_out_three_minutes_without_the_object_store(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    with rclone_s3_outages(tmp_path / "s3") as (s3, outage):
        cfg = s3.settings(openai_settings(settings, fake_openai))
        async with running_api(cfg) as api:
            await ride_out(
                api,
                fake_openai,
                tmp_path,
                service="object store",
                seconds=outage_seconds(180),
                down=outage.down,
                up=outage.up,
            )


@pytest.mark.skipif(postgres_bin() is None, reason="no PostgreSQL server installed")
async def test_five_imports_ride_out_a_minute_without_postgresql(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    with postgres_cluster() as pg:
        cfg = openai_settings(settings, fake_openai, database_url=pg.url)
        async with running_api(cfg) as api:
            await ride_out(
                api,
                fake_openai,
                tmp_path,
                service="database",
                seconds=outage_seconds(60),
                down=pg.stop,
                up=pg.start,
            )
