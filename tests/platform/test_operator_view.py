"""What an operator sees of a task: in the Temporal Web UI a summary saying what it is, its
details, the stage it is in, and search attributes to filter by document and owner; in JSON
logs the task each line was written for."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.api.sdk.v1 import WorkflowMetadata

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentMetadata
from knowledgeops.registry.task_types import (
    DOCUMENT_ID_SEARCH_ATTRIBUTE,
    OWNER_SEARCH_ATTRIBUTE,
    TASK_TYPE_SEARCH_ATTRIBUTE,
    TaskType,
)
from starter.dev_server import free_port
from tests.helpers.environment import (
    EXAMPLES,
    openai_settings,
    running_env,
    start_worker_process,
    stop_process,
    worker_serving_api,
)
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import Fault
from tests.helpers.trace_collector import TraceCollector
from tests.helpers.waiting import eventually


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

        # Filterable by document and by owner (the visibility store settles eventually). Other
        # tests import the same file into the same namespace: this test's tasks by their prefix.
        ours = f'WorkflowId STARTS_WITH "{settings.prefix}"'
        by_document = f'{ours} AND DocumentId = "{ref.document_id}"'
        found = await eventually(
            lambda: listed(by_document), lambda ids: len(ids) == 2, what=by_document
        )
        assert found == sorted([ref.task_id, other.task_id])
        by_owner = f'{by_document} AND Owner = "alice"'
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
    assert warning["level"] == "WARNING" and warning["logger"] == "knowledgeops.models.embedding"
    assert warning["task_id"] == ref.task_id and warning["task_type"] == "DOCUMENT_IMPORT"
    assert warning["run_id"] == ref.run_id and warning["attempt"] == 1
    assert warning["activity"] == "embed_chunks"


async def test_metrics_count_an_import_its_embeddings_and_the_api_requests(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """A worker serving the API: its /metrics after one import say what happened, and the
    Temporal SDK's own metrics are on TEMPORAL_METRICS_ADDRESS."""
    sdk_address = f"127.0.0.1:{free_port()}"
    cfg = openai_settings(settings, fake_openai, temporal_metrics_address=sdk_address)
    log = tmp_path / "worker.log"
    async with worker_serving_api(cfg, log) as (http, api):
        async with running_env(cfg, worker=False) as env:
            ref = await env.documents.import_file(EXAMPLES / "temporal-retries.md")
            status = await env.service.wait(ref.task_id, timeout=60)
        assert status.status == "completed", log.read_text()[-3000:]
        assert (await http.get(f"{api}/v1/search", params={"q": "retry"})).status_code == 200
        scraped = await http.get(f"{api}/metrics")
        sdk = await http.get(f"http://{sdk_address}/metrics")
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    values = _samples(scraped.text)
    model = 'model="openai:fake-embed"'
    total = status.result["total_chunks"]  # type: ignore[index]
    assert values["knowledgeops_documents_imported_total"] == 1
    assert values["knowledgeops_chunks_imported_total"] == total > 0
    ended = 'knowledgeops_tasks_ended_total{outcome="completed",task_type="DOCUMENT_IMPORT"}'
    assert values[ended] == 1
    # Every text the fake server embedded, in as many requests as it answered (the import's
    # and the search query's), each with its tokens.
    assert values[f"knowledgeops_embedding_inputs_total{{{model}}}"] == fake_openai.embedded_count()
    ok = f'knowledgeops_embedding_requests_total{{{model},outcome="ok"}}'
    assert values[ok] == fake_openai.requests
    assert values[f"knowledgeops_embedding_tokens_total{{{model}}}"] > 0
    assert values[f"knowledgeops_embedding_request_seconds_count{{{model}}}"] == values[ok]
    search = 'knowledgeops_api_requests_total{method="GET",route="/v1/search",status="200"}'
    assert values[search] == 1
    assert 'knowledgeops_parser_processes{state="idle"}' in values
    assert sdk.status_code == 200 and "temporal_workflow_completed" in sdk.text


def _samples(text: str) -> dict[str, float]:
    """Prometheus text format: sample name with its labels (as written) -> value."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def test_a_trace_runs_from_the_upload_through_the_workflow_to_its_activities(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT set: the worker (serving the API) sends one trace per
    upload over OTLP/HTTP, from the request through the workflow to each activity."""
    with TraceCollector() as collector:
        cfg = openai_settings(settings, fake_openai, otel_exporter_otlp_endpoint=collector.url)
        # The worker's clean stop at the end of the block flushes the spans still buffered.
        async with worker_serving_api(cfg, tmp_path / "worker.log") as (http, api):
            note = EXAMPLES / "spaced-repetition.txt"
            answer = await http.post(
                f"{api}/v1/documents",
                files={"file": (note.name, note.read_bytes())},
                headers={"X-Requested-With": "test"},
            )
            assert answer.status_code == 202, answer.text
            task_id = answer.json()["task_id"]

            async def status() -> str:
                return str((await http.get(f"{api}/v1/tasks/{task_id}")).json()["status"])

            await eventually(status, lambda s: s == "completed", timeout=60, what=task_id)
    [upload] = [s for s in collector.spans if s.name == "POST /v1/documents"]
    # One trace: the upload's request, the workflow it started, every step of the import.
    names = {s.name for s in collector.spans if s.trace_id == upload.trace_id}
    steps = ("parse_document", "chunk_document", "embed_chunks", "upsert_chunks")
    assert {"StartWorkflow:DocumentImport", "RunWorkflow:DocumentImport"} <= names, names
    assert {f"RunActivity:{step}" for step in steps} <= names, names
