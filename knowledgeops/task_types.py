"""The one registry of task types.

Each entry declares everything about a type: its workflow, payload and result models, task
queue, execution timeout, the options of every activity it runs, the activity classes that
implement them, its progress unit and its event projection. The worker registers what this
says, the service starts what this says, status and the admin views read progress units from
here, and the event store runs the projections named here; `tests/test_registry.py` enforces
the rules (bounded retries, heartbeats on long activities, every implementation registered
exactly once).

Implementations are named by import path ("module:attribute"), not imported: this module is a
contract that workflows (sandboxed), starters (which never import activities) and the worker
all read, so it must not pull in any of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.workflow import ActivityCancellationType

from knowledgeops.contracts import planned
from knowledgeops.contracts.backup import (
    APPLY_RETENTION,
    BACKUP_DATABASE,
    BACKUP_FILES,
    BACKUP_INDEX,
    DISCARD_BACKUP,
    WRITE_MANIFEST,
    BackupExecutePayload,
    BackupResult,
)
from knowledgeops.contracts.cleanup import (
    FIND_ORPHANS,
    REMOVE_ORPHANS,
    CleanupExecutePayload,
    CleanupResult,
)
from knowledgeops.contracts.document_import import (
    DELETE_DOCUMENT_POINTS,
    EMBED_AND_UPSERT,
    PARSE_DOCUMENT,
    DocumentImportPayload,
    DocumentImportResult,
)
from knowledgeops.contracts.events import RECORD_TASK_EVENTS
from knowledgeops.contracts.report import (
    COLLECT_REPORT_DATA,
    DISCARD_REPORT_WORK,
    RENDER_REPORT,
    ReportGeneratePayload,
    ReportResult,
)

# Keyword search attribute set on every workflow we start; operators filter by it in the Web UI.
TASK_TYPE_SEARCH_ATTRIBUTE = SearchAttributeKey.for_keyword("TaskType")
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


class TaskQueue(StrEnum):
    # Split by resource profile so pools can scale separately (CPU-bound ingest vs. API-bound AI).
    INGEST = "knowledgeops-ingest"
    AI = "knowledgeops-ai"
    MAINTENANCE = "knowledgeops-maintenance"
    AGENTS = "knowledgeops-agents"
    # Only parse activities; its workers run PARSER_CONCURRENCY at once, so a parse waits for
    # a parser in the queue (schedule-to-start), outside its attempt's start-to-close clock.
    PARSE = "knowledgeops-parse"


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
    workflow_name: str | None = None
    workflow_class: str | None = None
    result_model: type[BaseModel] | None = None
    # Options of every activity the workflow runs, by activity name.
    activities: Mapping[str, ActivityOptions] = field(default_factory=dict)
    # Classes implementing those activities; each is built once per worker from its resources.
    activity_classes: tuple[str, ...] = ()
    # What `done` / `total` count in this type's progress.
    progress_unit: str = "steps"
    # Class that keeps a read model up to date from this type's domain events.
    projection: str | None = None
    # Runs on a schedule (knowledgeops/schedules.py) when declared.
    schedule: Scheduled | None = None

    @property
    def implemented(self) -> bool:
        return self.workflow_class is not None


def _retry(attempts: int, *, initial: float = 1.0, maximum: float = 60.0) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=initial),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=maximum),
        maximum_attempts=attempts,
    )


# Activities every workflow uses, registered on every task queue.
COMMON_ACTIVITIES: Mapping[str, ActivityOptions] = {
    # Domain events go to the app database (a local activity: see workflows/base.py); the
    # database may be briefly unavailable, so retry long.
    RECORD_TASK_EVENTS.name: ActivityOptions(
        start_to_close=timedelta(seconds=30), retry_policy=_retry(30, initial=1.0, maximum=60.0)
    ),
}
COMMON_ACTIVITY_CLASSES = ("activities.events:EventActivities",)


def _planned(
    task_type: TaskType, model: type[BaseModel], queue: TaskQueue, description: str
) -> TaskSpec:
    return TaskSpec(task_type, model, queue, description)


REGISTRY: dict[TaskType, TaskSpec] = {
    spec.task_type: spec
    for spec in [
        TaskSpec(
            TaskType.DOCUMENT_IMPORT,
            DocumentImportPayload,
            TaskQueue.INGEST,
            "Parse, chunk, embed and index a stored file so it becomes searchable.",
            execution_timeout=timedelta(hours=12),
            workflow_name="DocumentImport",
            workflow_class="workflows.document_import:DocumentImportWorkflow",
            result_model=DocumentImportResult,
            activities={
                # Parsing runs in a subprocess and heartbeats while it waits for it.
                PARSE_DOCUMENT.name: ActivityOptions(
                    start_to_close=timedelta(minutes=30),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=_retry(3),
                    task_queue=TaskQueue.PARSE,
                ),
                # Embeds a whole document batch by batch; the heartbeat carries the checkpoint.
                EMBED_AND_UPSERT.name: ActivityOptions(
                    start_to_close=timedelta(hours=4),
                    heartbeat_timeout=timedelta(seconds=20),
                    retry_policy=_retry(8, initial=2.0),
                ),
                DELETE_DOCUMENT_POINTS.name: ActivityOptions(
                    start_to_close=timedelta(minutes=5),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=_retry(10),
                ),
            },
            activity_classes=("activities.document_import:ImportActivities",),
            progress_unit="chunks",
            projection="knowledgeops.stores.catalogue:DocumentCatalogue",
        ),
        _planned(
            TaskType.OCR_PROCESS, planned.OcrPayload, TaskQueue.INGEST, "OCR a scan or an image."
        ),
        _planned(
            TaskType.VISION_ANALYZE,
            planned.VisionAnalyzePayload,
            TaskQueue.AI,
            "Describe images and figures with a vision model.",
        ),
        _planned(
            TaskType.EMBEDDING_GENERATE,
            planned.EmbeddingGeneratePayload,
            TaskQueue.INGEST,
            "Embed a chunk range of a stored document.",
        ),
        _planned(
            TaskType.INDEXING_UPSERT,
            planned.IndexingUpsertPayload,
            TaskQueue.INGEST,
            "Upsert embedded chunks into the vector index.",
        ),
        _planned(
            TaskType.GENERATE_ARTIFACT,
            planned.GenerateArtifactPayload,
            TaskQueue.AI,
            "Summaries, outlines, mind maps, quizzes.",
        ),
        _planned(
            TaskType.AI_ANALYSIS, planned.AiAnalysisPayload, TaskQueue.AI, "Answer about a doc."
        ),
        _planned(
            TaskType.GENERATE_REVIEW_CARD,
            planned.GenerateReviewCardPayload,
            TaskQueue.AI,
            "Spaced-repetition review cards.",
        ),
        TaskSpec(
            TaskType.BACKUP_EXECUTE,
            BackupExecutePayload,
            TaskQueue.MAINTENANCE,
            "Back up the database, the index and the stored files (incremental), keep the "
            "last BACKUP_KEEP archives.",
            # Abandoned unfinished archives are recognised by age (stores/backups.py), which
            # relies on this being shorter than ABANDONED_AFTER.
            execution_timeout=timedelta(hours=12),
            workflow_name="BackupExecute",
            workflow_class="workflows.backup:BackupExecuteWorkflow",
            result_model=BackupResult,
            activities={
                # One consistent snapshot (SQLite backup API / pg_dump); redone on retry.
                BACKUP_DATABASE.name: ActivityOptions(
                    start_to_close=timedelta(hours=2),
                    heartbeat_timeout=timedelta(seconds=60),
                    retry_policy=_retry(3, initial=5.0),
                ),
                # Export page by page; the checkpoint carries collection, offset and part.
                BACKUP_INDEX.name: ActivityOptions(
                    start_to_close=timedelta(hours=4),
                    heartbeat_timeout=timedelta(seconds=60),
                    retry_policy=_retry(5, initial=5.0),
                ),
                # Copy into the pool; the checkpoint carries the last file listed.
                BACKUP_FILES.name: ActivityOptions(
                    start_to_close=timedelta(hours=6),
                    heartbeat_timeout=timedelta(seconds=60),
                    retry_policy=_retry(5, initial=5.0),
                ),
                # Reads every part once for its checksum.
                WRITE_MANIFEST.name: ActivityOptions(
                    start_to_close=timedelta(hours=1),
                    heartbeat_timeout=timedelta(seconds=60),
                    retry_policy=_retry(5),
                ),
                APPLY_RETENTION.name: ActivityOptions(
                    start_to_close=timedelta(minutes=30),
                    heartbeat_timeout=timedelta(seconds=60),
                    retry_policy=_retry(5),
                ),
                DISCARD_BACKUP.name: ActivityOptions(
                    start_to_close=timedelta(minutes=30),
                    heartbeat_timeout=timedelta(seconds=60),
                    retry_policy=_retry(5),
                ),
            },
            activity_classes=("activities.backup:BackupActivities",),
            # Index points, then stored files and chunk files: the stage names which.
            progress_unit="items",
            schedule=Scheduled("backup_schedule"),
        ),
        TaskSpec(
            TaskType.CLEANUP_EXECUTE,
            CleanupExecutePayload,
            TaskQueue.MAINTENANCE,
            "Remove what nothing needs any more: orphaned files, chunks and index points, "
            "backups past retention, dead temp files, old events and audit records.",
            execution_timeout=timedelta(hours=6),
            workflow_name="CleanupExecute",
            workflow_class="workflows.cleanup:CleanupWorkflow",
            result_model=CleanupResult,
            activities={
                # Scans storage, the catalogue, running imports and the index; redone on retry.
                FIND_ORPHANS.name: ActivityOptions(
                    start_to_close=timedelta(minutes=30),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=_retry(3),
                ),
                # Removes the listed items; the heartbeat carries the position in the list.
                REMOVE_ORPHANS.name: ActivityOptions(
                    start_to_close=timedelta(hours=2),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=_retry(5, initial=2.0),
                ),
            },
            activity_classes=("activities.cleanup:CleanupActivities",),
            progress_unit="items",
            # Scheduled runs remove (a manual run without a payload only lists).
            schedule=Scheduled("cleanup_schedule", {"dry_run": False}),
        ),
        _planned(TaskType.AGENT_TASK, planned.AgentTaskPayload, TaskQueue.AGENTS, "Run an agent."),
        TaskSpec(
            TaskType.REPORT_GENERATE,
            ReportGeneratePayload,
            TaskQueue.MAINTENANCE,
            "Platform report for a time range (tasks, failures, durations, throughput, "
            "retries, knowledge base, embeddings) as HTML with charts and JSON.",
            execution_timeout=timedelta(hours=1),
            workflow_name="ReportGenerate",
            workflow_class="workflows.report:ReportGenerateWorkflow",
            result_model=ReportResult,
            activities={
                # Reads the period's events page by page; a retry reads again.
                COLLECT_REPORT_DATA.name: ActivityOptions(
                    start_to_close=timedelta(minutes=20),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=_retry(4, initial=2.0),
                ),
                # Draws chart by chart; the heartbeat says which charts a retry can reuse.
                RENDER_REPORT.name: ActivityOptions(
                    start_to_close=timedelta(minutes=10),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=_retry(4, initial=2.0),
                ),
                DISCARD_REPORT_WORK.name: ActivityOptions(
                    start_to_close=timedelta(seconds=30), retry_policy=_retry(5)
                ),
            },
            activity_classes=("activities.report:ReportActivities",),
            progress_unit="steps",
            # Scheduled runs report on the week before them (the payload's defaults).
            schedule=Scheduled("report_schedule"),
        ),
    ]
}


class TaskNotImplementedError(LookupError):
    """The task type is registered but its workflow does not exist yet."""


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


def load(path: str) -> Any:
    """The object an implementation path ("package.module:attribute") names."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)
