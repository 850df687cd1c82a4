"""OpenTelemetry tracing from the API through a task's workflow to its activities, exported
over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set, off otherwise. The standard
OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (read from the environment by the OpenTelemetry
SDK, not Settings) name the service.

The Temporal SDK's OpenTelemetry plugin (on the client, so every worker built from it has it
too) carries the trace in the workflow's and the activities' headers; the API opens a span per
request, which a task started in it continues.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from knowledgeops.config.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource


def temporal_plugins(settings: Settings, service: str) -> list[Any]:
    """The client plugins that trace Temporal calls, or none when tracing is off."""
    if not settings.otel_exporter_otlp_endpoint:
        return []
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin

    _install(settings.otel_exporter_otlp_endpoint, service)
    return [OpenTelemetryPlugin(add_temporal_spans=True)]


@functools.cache
def _install(endpoint: str, service: str) -> None:
    """One tracer provider per process, replay-safe (a workflow's spans are not sent again
    when a worker replays its history), shut down (its last spans sent) at exit."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from temporalio.contrib.opentelemetry import create_tracer_provider

    provider = create_tracer_provider(resource=build_resource(service))
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


def build_resource(service: str) -> Resource:
    """The process's resource: `service` names it unless OTEL_SERVICE_NAME (or service.name
    in OTEL_RESOURCE_ATTRIBUTES) does, so a deployment can tell the API and each worker pool
    apart; the other OTEL_RESOURCE_ATTRIBUTES are kept."""
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource

    # Resource.create reads both variables but lets the attributes passed to it win.
    named = OTELResourceDetector().detect().attributes.get(SERVICE_NAME)
    return Resource.create({SERVICE_NAME: str(named) if named else service})


def flush() -> None:
    """Send the spans still buffered (a worker stopping)."""
    from opentelemetry import trace

    provider: Any = trace.get_tracer_provider()
    if hasattr(provider, "force_flush"):
        provider.force_flush()
