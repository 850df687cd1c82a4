"""The vocabulary of the registry: task types, queues, and what a task type declares.

`task_types.py` holds the declarations (one entry per type); this module holds the shapes they
are written in, so the registry stays a list of entries.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from temporalio.common import (
    RetryPolicy,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
)
from temporalio.workflow import ActivityCancellationType

# Keyword search attributes of the workflows we start; operators filter by them in the Web UI
# (`TaskType = "DOCUMENT_IMPORT" AND Owner = "alice"`). TaskType is on every one; DocumentId on
# a task about one document, Owner on a task started for one.
TASK_TYPE_SEARCH_ATTRIBUTE = SearchAttributeKey.for_keyword("TaskType")
DOCUMENT_ID_SEARCH_ATTRIBUTE = SearchAttributeKey.for_keyword("DocumentId")
OWNER_SEARCH_ATTRIBUTE = SearchAttributeKey.for_keyword("Owner")
# Registered by `dev` and `server`, and at every worker's and API's start.
SEARCH_ATTRIBUTES = (
    TASK_TYPE_SEARCH_ATTRIBUTE,
    DOCUMENT_ID_SEARCH_ATTRIBUTE,
    OWNER_SEARCH_ATTRIBUTE,
)
# Longest heartbeat timeout the product allows: nothing runs 30 minutes unobserved.
MAX_HEARTBEAT_TIMEOUT = timedelta(minutes=30)


class TaskType(StrEnum):
    DOCUMENT_IMPORT = "DOCUMENT_IMPORT"
    OCR_PROCESS = "OCR_PROCESS"
    VISION_ANALYZE = "VISION_ANALYZE"
    EMBEDDING_GENERATE = "EMBEDDING_GENERATE"
    INDEXING_UPSERT = "INDEXING_UPSERT"
    GENERATE_ARTIFACT = "GENERATE_ARTIFACT"
    AI_ANALYSIS = "AI_ANALYSIS"
    GENERATE_REVIEW_CARD = "GENERATE_REVIEW_CARD"
    BACKUP_EXECUTE = "BACKUP_EXECUTE"
    CLEANUP_EXECUTE = "CLEANUP_EXECUTE"
    AGENT_TASK = "AGENT_TASK"
    REPORT_GENERATE = "REPORT_GENERATE"
    DOCUMENT_DELETE = "DOCUMENT_DELETE"
    DOCUMENT_BATCH_IMPORT = "DOCUMENT_BATCH_IMPORT"

    def task_name(self, suffix: str) -> str:
        """A task id of this type before the deployment prefix: every id this code makes
        (other than an import's `import-<document>`) starts with its type, which is how the
        service tells this system's tasks from any other workflow in the namespace."""
        return f"{self.value.lower()}-{suffix}"


class TaskQueue(StrEnum):
    # Split by resource profile so pools can scale separately (CPU-bound ingest vs. API-bound AI).
    INGEST = "knowledgeops-ingest"
    AI = "knowledgeops-ai"
    MAINTENANCE = "knowledgeops-maintenance"
    AGENTS = "knowledgeops-agents"
    # Only parse activities; its workers run PARSER_CONCURRENCY at once, so a parse waits for
    # a parser in the queue (schedule-to-start), outside its attempt's start-to-close clock.
    PARSE = "knowledgeops-parse"


class Pool(StrEnum):
    """A kind of work a worker process can be started for (`knowledgeops worker --pool`)."""

    PARSE = "parse"
    INGEST = "ingest"
    AI = "ai"
    MAINTENANCE = "maintenance"


@dataclass(frozen=True)
class PoolSpec:
    queues: tuple[TaskQueue, ...]
    description: str
    # Its activities read or write the index: a worker of it opens the index (the embedded
    # one admits one process), and the embedding model.
    opens_index: bool = True


# Temporal priority key of small documents' imports (1 = first; unset = 3). Their steps run as
# local activities (workflows/document_import.py), so they never queue behind a bulk import.
EXPRESS_PRIORITY = 1


@dataclass(frozen=True)
class ActivityOptions:
    start_to_close: timedelta
    retry_policy: RetryPolicy
    heartbeat_timeout: timedelta | None = None
    # A queue of its own (e.g. a capacity-limited pool); None: the task type's queue.
    task_queue: TaskQueue | None = None

    def as_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `workflow.execute_activity`."""
        return {
            "start_to_close_timeout": self.start_to_close,
            "heartbeat_timeout": self.heartbeat_timeout,
            "retry_policy": self.retry_policy,
            # A heartbeating activity receives cancellation; wait until it has really stopped,
            # so cleanup that follows never races one of its late writes.
            "cancellation_type": ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
            if self.heartbeat_timeout is not None
            else ActivityCancellationType.TRY_CANCEL,
        }

    def as_local_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `workflow.execute_local_activity`: the same clock and retries.
        A local activity sends no heartbeat (its workflow task is its liveness); a cancel waits
        until it has stopped, as for a heartbeating activity."""
        return {
            "start_to_close_timeout": self.start_to_close,
            "retry_policy": self.retry_policy,
            "cancellation_type": ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        }


@dataclass(frozen=True)
class Scheduled:
    """A type that runs on a Temporal Schedule: the setting holding its cron expression (empty
    = no schedule) and the payload each scheduled run gets."""

    setting: str
    payload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSpec:
    task_type: TaskType
    payload_model: type[BaseModel]
    task_queue: TaskQueue
    description: str
    execution_timeout: timedelta = timedelta(hours=6)
    # Workflow type name (what starters start and the Web UI shows) and its class.
    workflow_name: str = field(kw_only=True)
    workflow_class: str = field(kw_only=True)
    result_model: type[BaseModel] | None = None
    # Options of every activity the workflow runs, by activity name.
    activities: Mapping[str, ActivityOptions] = field(default_factory=dict)
    # Classes implementing those activities; each is built once per worker from its resources.
    activity_classes: tuple[str, ...] = ()
    # What `done` / `total` count in this type's progress.
    progress_unit: str = "steps"
    # Class that keeps a read model up to date from this type's domain events.
    projection: str | None = None
    # Runs on a schedule (knowledgeops/runtime/schedules.py) when declared.
    schedule: Scheduled | None = None

    @property
    def summary(self) -> str:
        """What a task of this type does, in one line: the Web UI's summary of a task that was
        given none of its own (its description's first sentence)."""
        first = self.description.split(". ", 1)[0].split("; ", 1)[0].rstrip(".")
        return f"{self.task_type.value}: {first}"


def task_search_attributes(
    task_type: TaskType, *, document_id: str | None = None, owner: str | None = None
) -> TypedSearchAttributes:
    """The search attributes a task of `task_type` starts with."""
    pairs: list[SearchAttributePair[str]] = [
        SearchAttributePair(TASK_TYPE_SEARCH_ATTRIBUTE, task_type.value)
    ]
    if document_id:
        pairs.append(SearchAttributePair(DOCUMENT_ID_SEARCH_ATTRIBUTE, document_id))
    if owner:
        pairs.append(SearchAttributePair(OWNER_SEARCH_ATTRIBUTE, owner))
    return TypedSearchAttributes(pairs)


# Outages: an attempt failed by an unreachable service (object store, database, Qdrant server)
# is retried after a back-off doubling from 1 s up to OUTAGE_MAX_DELAY, for as long as the
# worker's OUTAGE_WAIT_SECONDS allows (at most OUTAGE_WAIT_LIMIT); knowledgeops/runtime/
# outages.py decides. Every policy gets that many attempts on top of its own, so an outage
# never spends the attempts declared for other failures (model errors keep their bounds).
OUTAGE_MAX_DELAY = timedelta(seconds=30)
OUTAGE_WAIT_LIMIT = timedelta(hours=2)
OUTAGE_ATTEMPTS = int(OUTAGE_WAIT_LIMIT / OUTAGE_MAX_DELAY) + 10


def retry(attempts: int, *, initial: float = 1.0, maximum: float = 60.0) -> RetryPolicy:
    """`attempts` for ordinary failures, plus the headroom outages may use (bounded too)."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=initial),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=maximum),
        maximum_attempts=attempts + OUTAGE_ATTEMPTS,
    )


def load(path: str) -> Any:
    """The object an implementation path ("package.module:attribute") names."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)
