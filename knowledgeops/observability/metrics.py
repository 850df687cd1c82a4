"""The platform's Prometheus metrics, in one registry per process: what the worker did (tasks
ended by type and outcome, documents and chunks imported, embedding requests, their inputs,
tokens and latency, model calls, the parser processes) and what the API answered. Served at
the API's `/metrics`, or on METRICS_ADDRESS by a worker without the API; the Temporal SDK's
own metrics are on TEMPORAL_METRICS_ADDRESS (knowledgeops/runtime/temporal.py)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import start_http_server as _serve

from knowledgeops.contracts.events import EventType, TaskEvent

REGISTRY = CollectorRegistry()

TASKS_ENDED = Counter(
    "knowledgeops_tasks_ended",
    "Tasks that ended, by task type and outcome (completed, failed, cancelled).",
    ["task_type", "outcome"],
    registry=REGISTRY,
)
TASK_FAILURES = Counter(
    "knowledgeops_task_failures",
    "Failed tasks by task type and error kind (the failure's type, e.g. EmbeddingRejected).",
    ["task_type", "error"],
    registry=REGISTRY,
)
DOCUMENTS_IMPORTED = Counter(
    "knowledgeops_documents_imported", "Document imports completed.", registry=REGISTRY
)
CHUNKS_IMPORTED = Counter(
    "knowledgeops_chunks_imported", "Chunks of the completed imports.", registry=REGISTRY
)
EMBEDDING_REQUESTS = Counter(
    "knowledgeops_embedding_requests",
    "Requests to the embedding model (one per batch sent), by model and outcome.",
    ["model", "outcome"],
    registry=REGISTRY,
)
EMBEDDING_INPUTS = Counter(
    "knowledgeops_embedding_inputs", "Texts sent to the embedding model.", ["model"],
    registry=REGISTRY,
)  # fmt: skip
EMBEDDING_TOKENS = Counter(
    "knowledgeops_embedding_tokens",
    "Tokens the embedding provider reported using (OpenAI-compatible providers).",
    ["model"],
    registry=REGISTRY,
)
EMBEDDING_SECONDS = Histogram(
    "knowledgeops_embedding_request_seconds",
    "Time of one embedding request.",
    ["model"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
MODEL_CALLS = Counter(
    "knowledgeops_model_calls",
    "Calls to chat and vision models, by model and outcome.",
    ["model", "outcome"],
    registry=REGISTRY,
)
PARSER_PROCESSES = Gauge(
    "knowledgeops_parser_processes",
    "Warm parser processes of this worker, by state (busy, idle).",
    ["state"],
    registry=REGISTRY,
)
INGEST_BACKLOG_BYTES = Gauge(
    "knowledgeops_ingest_backlog_bytes",
    "Bytes of files waiting for or in an import, as last measured at an upload.",
    registry=REGISTRY,
)
API_REQUESTS = Counter(
    "knowledgeops_api_requests",
    "HTTP API requests by method, route and status code.",
    ["method", "route", "status"],
    registry=REGISTRY,
)
API_SECONDS = Histogram(
    "knowledgeops_api_request_seconds",
    "HTTP API request time (to the end of the response) by method and route.",
    ["method", "route"],
    registry=REGISTRY,
)

_ENDED = {
    EventType.TASK_COMPLETED: "completed",
    EventType.TASK_FAILED: "failed",
    EventType.TASK_CANCELLED: "cancelled",
}


def task_event(event: TaskEvent) -> None:
    """Count a newly recorded domain event (each event once: a retried recording is not)."""
    outcome = _ENDED.get(event.event_type)
    if outcome is None:
        return
    TASKS_ENDED.labels(event.task_type, outcome).inc()
    if outcome == "failed":
        kind = (event.error or "").partition(":")[0].strip() or "unknown"
        TASK_FAILURES.labels(event.task_type, kind[:60]).inc()
    if outcome == "completed" and event.task_type == "DOCUMENT_IMPORT":
        DOCUMENTS_IMPORTED.inc()
        CHUNKS_IMPORTED.inc(int(event.data.get("total_chunks") or 0))


def watch_parser_pool(busy: Callable[[], int], idle: Callable[[], int]) -> None:
    PARSER_PROCESSES.labels("busy").set_function(busy)
    PARSER_PROCESSES.labels("idle").set_function(idle)


def render() -> bytes:
    """The registry in Prometheus' text format."""
    return generate_latest(REGISTRY)


def serve(address: str) -> None:
    """Serve the registry on `host:port` (a worker that serves no API)."""
    host, _, port = address.rpartition(":")
    _serve(int(port), addr=host or "127.0.0.1", registry=REGISTRY)
