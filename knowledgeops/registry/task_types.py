"""The one registry of task types.

Each entry declares everything about a type: its workflow, payload and result models, task
queue, execution timeout, the options of every activity it runs, the activity classes that
implement them, its progress unit and its event projection. The worker registers what this
says, the service starts what this says, status and the admin views read progress units from
here, and the event store runs the projections named here; `tests/platform/test_registry.py`
enforces the rules (bounded retries, heartbeats on long activities, every implementation registered
exactly once).

The entries are written in `families/` by family (ingest.py, ai.py, maintenance.py) and
assembled here into the one REGISTRY; the shapes they are written in (TaskType, TaskQueue,
TaskSpec, ActivityOptions) live in `spec.py`.
Implementations are named by import path ("module:attribute"), not imported: this module is a
contract that workflows (sandboxed), starters (which never import activities) and the worker
all read, so it must not pull in any of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

from knowledgeops.contracts.events import RECORD_TASK_EVENTS
from knowledgeops.registry.families import ai, ingest, maintenance
from knowledgeops.registry.spec import (
    DOCUMENT_ID_SEARCH_ATTRIBUTE,
    EXPRESS_PRIORITY,
    MAX_HEARTBEAT_TIMEOUT,
    OWNER_SEARCH_ATTRIBUTE,
    SEARCH_ATTRIBUTES,
    TASK_TYPE_SEARCH_ATTRIBUTE,
    ActivityOptions,
    Pool,
    PoolSpec,
    TaskQueue,
    TaskSpec,
    TaskType,
    load,
    task_search_attributes,
)
from knowledgeops.registry.spec import retry as _retry

__all__ = [
    "DOCUMENT_ID_SEARCH_ATTRIBUTE",
    "EXPRESS_PRIORITY",
    "MAX_HEARTBEAT_TIMEOUT",
    "OWNER_SEARCH_ATTRIBUTE",
    "SEARCH_ATTRIBUTES",
    "TASK_TYPE_SEARCH_ATTRIBUTE",
    "Pool",
    "TaskQueue",
    "TaskSpec",
    "TaskType",
    "load",
    "task_search_attributes",
]

# Activities every workflow uses, registered on every task queue.
COMMON_ACTIVITIES: Mapping[str, ActivityOptions] = {
    # Domain events go to the app database (a local activity: see workflows/base.py); the
    # database may be briefly unavailable, so retry long.
    RECORD_TASK_EVENTS.name: ActivityOptions(
        start_to_close=timedelta(seconds=30), retry_policy=_retry(30, initial=1.0, maximum=60.0)
    ),
}
COMMON_ACTIVITY_CLASSES = ("activities.events:EventActivities",)


REGISTRY: dict[TaskType, TaskSpec] = {
    spec.task_type: spec for spec in [*ingest.SPECS, *ai.SPECS, *maintenance.SPECS]
}

# The kinds of work a worker process runs (`knowledgeops worker --pool NAME`, WORKER_POOLS;
# every pool by default). A pool is the task queues of one resource profile, so each scales
# on its own: parsers on CPU, the index's owner on memory, model callers on connections.
POOLS: dict[Pool, PoolSpec] = {
    Pool.PARSE: PoolSpec(
        (TaskQueue.PARSE,),
        "parse and chunk bigger files in parser subprocesses (CPU-bound, untrusted input); "
        "opens neither the index nor the embedding model",
        opens_index=False,
    ),
    Pool.INGEST: PoolSpec(
        (TaskQueue.INGEST,),
        "import, delete, OCR, embedding and indexing workflows; embed, upsert, publish (and a "
        "small document's parse, as local activities); owns the embedded index",
    ),
    Pool.AI: PoolSpec(
        (TaskQueue.AI, TaskQueue.AGENTS),
        "artifacts, analysis, review cards, vision and agents: model calls, index searches",
    ),
    Pool.MAINTENANCE: PoolSpec(
        (TaskQueue.MAINTENANCE,),
        "backup, cleanup and reports; also records what operators do in Temporal",
    ),
}


def pool_queues(pools: Sequence[Pool]) -> set[TaskQueue]:
    return {q for pool in pools for q in POOLS[pool].queues}


def spec_for(task_type: TaskType | str) -> TaskSpec:
    try:
        tt = TaskType(task_type)
    except ValueError:
        known = ", ".join(t.value for t in TaskType)
        raise LookupError(f"Unknown task type {task_type!r}; known types: {known}") from None
    return REGISTRY[tt]


def activity_options(task_type: TaskType, activity_name: str) -> ActivityOptions:
    spec = REGISTRY[task_type]
    options = spec.activities.get(activity_name) or COMMON_ACTIVITIES.get(activity_name)
    if options is None:
        raise LookupError(f"{task_type} declares no activity {activity_name!r} in the registry")
    return options
