"""Task types that keep the system: backup, cleanup, reports (on Temporal Schedules).

Entries of the one registry (`knowledgeops.registry.task_types.REGISTRY`); see task_types.py.
"""

from __future__ import annotations

from datetime import timedelta

from knowledgeops.contracts.backup import (
    APPLY_RETENTION,
    BACKUP_DATABASE,
    BACKUP_FILES,
    BACKUP_INDEX,
    DISCARD_BACKUP,
    EXPORT_BACKUP,
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
from knowledgeops.contracts.report import (
    COLLECT_REPORT_DATA,
    DISCARD_REPORT_WORK,
    RENDER_REPORT,
    ReportGeneratePayload,
    ReportResult,
)
from knowledgeops.registry.spec import (
    ActivityOptions,
    Scheduled,
    TaskQueue,
    TaskSpec,
    TaskType,
)
from knowledgeops.registry.spec import retry as _retry

SPECS: list[TaskSpec] = [
    TaskSpec(
        TaskType.BACKUP_EXECUTE,
        BackupExecutePayload,
        TaskQueue.MAINTENANCE,
        "Back up the database, the index and the stored files (incremental), keep the "
        "last BACKUP_KEEP archives.",
        # Abandoned unfinished archives are recognised by age (backup/store.py), which
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
            # Writes the archive into one file and uploads it; redone whole on retry (an
            # object store has no append).
            EXPORT_BACKUP.name: ActivityOptions(
                start_to_close=timedelta(hours=4),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=_retry(5, initial=10.0),
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
