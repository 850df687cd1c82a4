"""Where a one-page upload's time went during bench.import_at_scale (`--trace-notes`): the
worker and the benchmark's client send their spans (OpenTelemetry, as a deployment would) to a
collector in the benchmark, and each slow note's trace is laid out step by step: the time in
each activity and the waits between them (a workflow task waiting for the worker, the worker's
event loop held up)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from knowledgeops.observability import tracing

# Notes shown step by step: the slowest ones, and every one over the fairness target.
SHOWN = 5
TARGET_S = 10.0


def _attribute(span: Any, key: str) -> str:
    for kv in span.attributes:
        if kv.key == key:
            return str(kv.value.string_value)
    return ""


def _steps(spans: list[Any]) -> list[Any]:
    """The activities' own spans (a local activity's too), not the workflow's scheduling."""
    return [s for s in spans if s.name.startswith("RunActivity:")]


def timeline(spans: list[Any], submitted_ns: int, total_s: float) -> str:
    """One line: the trace's activities in order, each with the wait before it."""
    steps = sorted(_steps(spans), key=lambda s: s.start_time_unix_nano)
    parts, at = [], submitted_ns
    for s in steps:
        wait = (s.start_time_unix_nano - at) / 1e9
        took = (s.end_time_unix_nano - s.start_time_unix_nano) / 1e9
        parts.append(f"wait {wait:.1f}, {s.name.removeprefix('RunActivity:')} {took:.2f}")
        at = s.end_time_unix_nano
    end = submitted_ns + int(total_s * 1e9)
    return f"{total_s:.1f} s: " + "; ".join(parts) + f"; then {(end - at) / 1e9:.1f} to completed"


def report(spans: list[Any], notes: list[tuple[str, int, float]]) -> None:
    """Print the slow notes' timelines and, over all notes, the waits against the steps."""
    tracing.flush()  # this process's own spans (each note's start)
    by_trace: dict[bytes, list[Any]] = defaultdict(list)
    for s in spans:
        by_trace[s.trace_id].append(s)
    trace_of = {
        _attribute(s, "temporalWorkflowID"): s.trace_id
        for s in spans
        if s.name.startswith("StartWorkflow:")
    }
    if not notes:
        return
    waited = sum(total for _, _, total in notes)
    stepped = sum(
        (s.end_time_unix_nano - s.start_time_unix_nano) / 1e9
        for task_id, _, _ in notes
        for s in _steps(by_trace.get(trace_of.get(task_id, b""), []))
    )
    print(
        f"one-page uploads traced: {len(notes)}; of their {waited:.0f} s, "
        f"{stepped:.0f} s in their activities, the rest waiting (submission, workflow tasks, "
        "the event loop)"
    )
    slow = sorted(notes, key=lambda n: -n[2])
    for task_id, at, total in [n for n in slow if n[2] > TARGET_S] or slow[:SHOWN]:
        trace = by_trace.get(trace_of.get(task_id, b""), [])
        print(f"  {task_id}: " + (timeline(trace, at, total) if trace else "no trace received"))
