"""Connecting to Temporal the same way everywhere (pydantic converter, search attributes)."""

from __future__ import annotations

import functools
import os
import socket

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RetryConfig, RPCError, RPCStatusCode

from knowledgeops.config.settings import Settings
from knowledgeops.observability.tracing import temporal_plugins
from knowledgeops.registry.task_types import SEARCH_ATTRIBUTES

# For clients that answer people (the HTTP API): give up on an unreachable server after about
# a second, so a request fails fast with a 503, instead of after the default's ~9 s of retries.
FAIL_FAST = RetryConfig(max_elapsed_time_millis=800, max_retries=3, max_interval_millis=400)


# Temporal records the identity of whoever cancels or terminates; ours is recognisable, so the
# reconciler of operators' own actions (operator_actions.py) does not audit ours a second time.
OUR_IDENTITY = f"knowledgeops:{os.getpid()}@{socket.gethostname()}"


async def connect(
    settings: Settings, *, fail_fast: bool = False, sdk_metrics: bool = False
) -> Client:
    """`sdk_metrics`: a worker's client, whose SDK metrics go to TEMPORAL_METRICS_ADDRESS.
    With OTEL_EXPORTER_OTLP_ENDPOINT set the client (and workers built on it) trace."""
    runtime = _metrics_runtime(settings.temporal_metrics_address) if sdk_metrics else None
    try:
        return await Client.connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            data_converter=pydantic_data_converter,
            retry_config=FAIL_FAST if fail_fast else None,
            identity=OUR_IDENTITY,
            runtime=runtime,
            plugins=temporal_plugins(settings, "knowledgeops"),
        )
    except RuntimeError as e:
        raise ConnectionError(
            f"Cannot reach Temporal at {settings.temporal_address} ({e}). Start it with "
            "`knowledgeops dev` or `knowledgeops server`, or set TEMPORAL_ADDRESS."
        ) from None


@functools.cache
def _metrics_runtime(address: str) -> Runtime | None:
    # One runtime per process and address: its exporter binds the port once.
    if not address:
        return None
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Register our custom search attributes on servers not started by `knowledgeops server`."""
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    missing = {
        key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        for key in SEARCH_ATTRIBUTES
        if key.name not in existing.custom_attributes
    }
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )


# What Temporal answers (or what the client concludes) when the server cannot be reached.
_UNREACHABLE = {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED}


def is_unreachable(e: BaseException) -> bool:
    return isinstance(e, RPCError) and e.status in _UNREACHABLE
