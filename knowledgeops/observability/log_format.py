"""Log lines as JSON, on request (LOG_FORMAT=json), each carrying the task it was written for.

A line written inside an activity (by any logger, ours or a library's) or by a workflow's
logger names its task id, task type, run, attempt and activity, so a log store can show one
task's lines across processes and retries. A line written inside an OpenTelemetry span (with
OTEL_EXPORTER_OTLP_ENDPOINT) also carries its trace_id and span_id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace
from temporalio import activity

from knowledgeops.registry.task_types import REGISTRY

_TASK_TYPES = {spec.workflow_name: spec.task_type.value for spec in REGISTRY.values()}


class JsonLogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry |= task_fields(record) | trace_fields()
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def trace_fields() -> dict[str, str]:
    """The OpenTelemetry trace and span the line was written in, hex as OTLP shows them, so a
    log store can link a line to its trace; nothing outside a span (or with tracing off)."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {
        "trace_id": trace.format_trace_id(context.trace_id),
        "span_id": trace.format_span_id(context.span_id),
    }


def task_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The task a line belongs to: from the SDK's workflow or activity logger's details, or
    from the activity this line was written in (a library's or our own module's logger)."""
    details: Mapping[str, Any] | None = getattr(record, "temporal_activity", None)
    details = details or getattr(record, "temporal_workflow", None)
    if details is None and activity.in_activity():
        info = activity.info()
        details = {
            "workflow_id": info.workflow_id,
            "workflow_run_id": info.workflow_run_id,
            "workflow_type": info.workflow_type,
            "activity_type": info.activity_type,
            "attempt": info.attempt,
        }
    if not details:
        return {}
    fields = {
        "task_id": details.get("workflow_id"),
        "task_type": _TASK_TYPES.get(str(details.get("workflow_type"))),
        "run_id": details.get("workflow_run_id") or details.get("run_id"),
        "activity": details.get("activity_type"),
        "attempt": details.get("attempt"),
    }
    return {k: v for k, v in fields.items() if v is not None}
