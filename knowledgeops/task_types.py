"""The one registry of task types.

Each entry declares everything about a type: its workflow, payload and result models, task
queue, execution timeout, the options of every activity it runs, the activity classes that
implement them, its progress unit and its event projection. The worker registers what this
says, the service starts what this says, status and the admin views read progress units from
here, and the event store runs the projections named here; `tests/test_registry.py` enforces
the rules (bounded retries, heartbeats on long activities, every implementation registered
exactly once).

The shapes (TaskType, TaskQueue, TaskSpec, ActivityOptions) live in `task_spec.py`.
Implementations are named by import path ("module:attribute"), not imported: this module is a
contract that workflows (sandboxed), starters (which never import activities) and the worker
all read, so it must not pull in any of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from pydantic import BaseModel

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
from knowledgeops.task_spec import (
    MAX_HEARTBEAT_TIMEOUT,
    TASK_TYPE_SEARCH_ATTRIBUTE,
    ActivityOptions,
    Scheduled,
    TaskQueue,
    TaskSpec,
    TaskType,
    load,
)
from knowledgeops.task_spec import retry as _retry

__all__ = [
    "MAX_HEARTBEAT_TIMEOUT",
    "TASK_TYPE_SEARCH_ATTRIBUTE",
    "TaskQueue",
    "TaskSpec",
    "TaskType",
    "load",
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
