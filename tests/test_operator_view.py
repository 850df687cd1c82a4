"""What an operator sees of a task: in the Temporal Web UI a summary saying what it is, its
details, the stage it is in, and search attributes to filter by document and owner; in JSON
logs the task each line was written for."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.api.sdk.v1 import WorkflowMetadata

from knowledgeops.contracts.document_import import DocumentMetadata
from knowledgeops.settings import Settings
from knowledgeops.task_types import (
    DOCUMENT_ID_SEARCH_ATTRIBUTE,
    OWNER_SEARCH_ATTRIBUTE,
    TASK_TYPE_SEARCH_ATTRIBUTE,
    TaskType,
)
from tests.conftest import (
    EXAMPLES,
    openai_settings,
    running_env,
    start_worker_process,
    stop_process,
)
from tests.fake_openai import FakeOpenAI, Fault
from tests.helpers import eventually


async def test_a_task_shows_what_it_is_its_stage_and_filters_by_document_and_owner(
    settings: Settings,
) -> None:
    async with running_env(settings) as env:
        meta = DocumentMetadata(owner="alice", title="Spacing")
        ref = await env.documents.import_file(EXAMPLES / "spaced-repetition.txt", metadata=meta)
        status = await env.service.wait(ref.task_id, timeout=60)
        assert status.status == "completed", status.last_error
        handle = env.client.get_workflow_handle(ref.task_id)
        desc = await handle.describe()
        assert await desc.static_summary() == "Import spaced-repetition.txt (Spacing)"
        details = await desc.static_details() or ""
        assert f"**Document:** `{ref.document_id}`" in details and "**Owner:** `alice`" in details
        attrs = desc.typed_search_attributes
        assert attrs.get(TASK_TYPE_SEARCH_ATTRIBUTE) == "DOCUMENT_IMPORT"
        assert attrs.get(DOCUMENT_ID_SEARCH_ATTRIBUTE) == ref.document_id
        assert attrs.get(OWNER_SEARCH_ATTRIBUTE) == "alice"

        # The run's current details: what the Web UI shows as where the task is.
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        total = status.progress.total if status.progress else None
        assert total and metadata.current_details == f"completed: {total:,} / {total:,} chunks"

        # A task of another type that was given no summary says what its type does.
        other = await env.service.enqueue(
            TaskType.EMBEDDING_GENERATE, {"document_id": ref.document_id}, owner="bob"
        )
        await env.service.wait(other.task_id, timeout=60)
        other_desc = await env.client.get_workflow_handle(other.task_id).describe()
        assert await other_desc.static_summary() == (
            "EMBEDDING_GENERATE: Embed a stored document's chunks (a range, or every "
            "document's) with a named model into the embedding cache"
        )

        async def listed(query: str) -> list[str]:
            return sorted([w.id async for w in env.client.list_workflows(query)])

        # Filterable by document and by owner (the visibility store settles eventually).
        by_document = f'DocumentId = "{ref.document_id}"'
        found = await eventually(
            lambda: listed(by_document), lambda ids: len(ids) == 2, what=by_document
        )
        assert found == sorted([ref.task_id, other.task_id])
        by_owner = f'DocumentId = "{ref.document_id}" AND Owner = "alice"'
        assert await eventually(lambda: listed(by_owner), bool, what=by_owner) == [ref.task_id]


async def test_json_logs_name_the_task_run_and_attempt_a_line_was_written_for(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """A worker with LOG_FORMAT=json: the embedding client's warning about a refused request,
    written inside the import's embed step, carries the import's task id, type, run and attempt."""
    cfg = openai_settings(settings, fake_openai, log_format="json")
    fake_openai.faults.append(Fault(503))
    log = tmp_path / "worker.log"
    worker = start_worker_process(cfg, log)
    try:
        async with running_env(cfg, worker=False) as env:
            ref = await env.documents.import_file(EXAMPLES / "spaced-repetition.txt")
            status = await env.service.wait(ref.task_id, timeout=60)
            assert status.status == "completed", log.read_text()[-3000:]
    finally:
        assert stop_process(worker) == 0
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert lines and all({"time", "level", "logger", "message"} <= set(e) for e in lines)
    [warning] = [e for e in lines if "embedding request failed" in e["message"]]
    assert warning["level"] == "WARNING" and warning["logger"] == "knowledgeops.embedding"
    assert warning["task_id"] == ref.task_id and warning["task_type"] == "DOCUMENT_IMPORT"
    assert warning["run_id"] == ref.run_id and warning["attempt"] == 1
    assert warning["activity"] == "embed_chunks"
