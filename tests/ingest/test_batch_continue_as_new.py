"""A long batch continues as new between groups (its history stays short), carrying its counts:
on a dev server of its own that suggests continuing as new after a few dozen history events,
a batch of ten groups runs as several runs of one task and ends with every document counted
once and one set of task events."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.events import EventType
from knowledgeops.db.events import EventStore
from starter import dev_server
from starter.dev_server import TemporalDevServer, local_dev_server
from starter.services.document_batches import DocumentBatchService
from starter.services.task_queries import runs_of
from tests.helpers.environment import openai_settings, running_env
from tests.helpers.fake_openai import FakeOpenAI

NOTES, GROUP = 100, 10


@pytest.fixture
def eager_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TemporalDevServer]:
    """A dev server that suggests continuing as new after 60 history events."""
    config = dict(dev_server.DYNAMIC_CONFIG) | {"limit.historyCount.suggestContinueAsNew": "60"}
    monkeypatch.setattr(dev_server, "DYNAMIC_CONFIG", config)
    with local_dev_server(tmp_path / "temporal") as server:
        yield server


async def test_a_long_batch_continues_as_new_with_its_counts(
    settings: Settings, fake_openai: FakeOpenAI, eager_server: TemporalDevServer
) -> None:
    cfg = openai_settings(settings, fake_openai).model_copy(
        update={"temporal_address": eager_server.address}
    )
    async with running_env(cfg) as env:
        batches = DocumentBatchService(env.documents)
        accepted = await batches.submit(
            [(f"n{i}.txt", [f"Note {i}: the ibis{i} wades.\n".encode()]) for i in range(NOTES)],
            size=NOTES * 30,
            group_size=GROUP,
            groups_at_once=1,
        )
        done = await env.service.wait(accepted.task_id, timeout=120)
        assert done.status == "completed", done.last_error
        assert done.result is not None and done.result["imported"] == NOTES
        assert (await batches.view(accepted.task_id)).done == NOTES
        runs = await runs_of(env.client, accepted.task_id)
        events = await EventStore(env.db).after(task_id=accepted.task_id)
        page = await env.documents.list(limit=500)
    assert len(runs) > 1, runs  # it did continue as new
    assert page.total == NOTES and {d.status for d in page.items} == {"ready"}
    assert [e.event_type for e in events] == [
        EventType.TASK_ENQUEUED,
        EventType.TASK_STARTED,
        EventType.TASK_COMPLETED,
    ]
