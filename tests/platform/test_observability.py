"""Traces and logs per service: the service name a process reports, and the trace a JSON log
line links to."""

from __future__ import annotations

import json
import logging
import re

import pytest
from opentelemetry.sdk.trace import TracerProvider

from knowledgeops.observability.log_format import JsonLogFormatter
from knowledgeops.observability.tracing import build_resource


def _logged() -> dict[str, object]:
    record = logging.LogRecord("knowledgeops.test", logging.INFO, __file__, 1, "hello", None, None)
    line: dict[str, object] = json.loads(JsonLogFormatter().format(record))
    return line


def test_a_json_line_carries_the_trace_and_span_it_was_written_in() -> None:
    # A provider of its own, not the global one: the span is current all the same.
    tracer = TracerProvider().get_tracer(__name__)
    with tracer.start_as_current_span("request") as span:
        line = _logged()
    context = span.get_span_context()
    assert line["trace_id"] == f"{context.trace_id:032x}"
    assert line["span_id"] == f"{context.span_id:016x}"
    assert re.fullmatch(r"[0-9a-f]{32}", str(line["trace_id"]))
    assert re.fullmatch(r"[0-9a-f]{16}", str(line["span_id"]))
    outside = _logged()
    assert outside["message"] == "hello"
    assert "trace_id" not in outside and "span_id" not in outside


def test_otel_service_name_wins_over_the_process_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert build_resource("knowledgeops").attributes["service.name"] == "knowledgeops"

    monkeypatch.setenv("OTEL_SERVICE_NAME", "knowledgeops-worker-ingest")
    assert build_resource("knowledgeops").attributes["service.name"] == (
        "knowledgeops-worker-ingest"
    )


def test_otel_resource_attributes_name_the_service_and_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv(
        "OTEL_RESOURCE_ATTRIBUTES", "service.name=knowledgeops-api,deployment.environment=test"
    )
    attributes = build_resource("knowledgeops").attributes
    assert attributes["service.name"] == "knowledgeops-api"
    assert attributes["deployment.environment"] == "test"
    # As the OpenTelemetry specification says, OTEL_SERVICE_NAME wins over both.
    monkeypatch.setenv("OTEL_SERVICE_NAME", "knowledgeops-worker-ai")
    assert build_resource("knowledgeops").attributes["service.name"] == "knowledgeops-worker-ai"
