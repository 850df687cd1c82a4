"""BACKUP_EXECUTE: database -> index export -> files into the pool -> manifest -> export to
BACKUP_URL -> retention.

Every stage is an activity writing into the archive folder `backups/<UTC time>-<run>`; only
the archive's name and counts pass through here. The manifest is written last, so until it
exists the archive is unfinished; a failed or cancelled backup removes its unfinished folder.

Progress counts "items": index points while the index is exported, stored files and chunk
files while they are copied (the stage says which), from the running activity's checkpoint.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
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
        BackupStageRequest,
        ManifestRequest,
        archive_name,
    )
    from knowledgeops.registry.task_types import TaskType


@workflow.defn(name="BackupExecute")
class BackupExecuteWorkflow(TaskWorkflow[BackupExecutePayload, BackupResult]):
    task_type = TaskType.BACKUP_EXECUTE

    @workflow.run
    async def run(self, payload: BackupExecutePayload) -> BackupResult:
        return await self.run_task(payload)

    @property
    def archive(self) -> str:
        # The run's start time and id: the same on every replay, new for a manual retry.
        info = workflow.info()
        # The chain's first run id: stable across an operator's reset, whose replayed stage
        # results point into this folder; a manual retry starts a new chain (a new archive).
        return archive_name(info.start_time, info.first_execution_run_id or info.run_id)

    def event_data(self, payload: BackupExecutePayload) -> dict[str, Any]:
        return {"archive": self.archive, "label": payload.label}

    async def steps(self, payload: BackupExecutePayload) -> BackupResult:
        req = BackupStageRequest(archive=self.archive)
        self.on_failure("archive_discarded", lambda: self.activity(DISCARD_BACKUP, req))
        # total=0: the running stage's checkpoint supplies done / total.
        self.stage("database", total=0, done=0)
        database = await self.activity(BACKUP_DATABASE, req)
        self.stage("index points", total=0, done=0)
        index = await self.activity(BACKUP_INDEX, req)
        self.stage("files", total=0, done=0)
        files = await self.activity(BACKUP_FILES, req)
        self.stage("manifest")
        info = workflow.info()
        manifest = await self.activity(
            WRITE_MANIFEST,
            ManifestRequest(
                archive=req.archive,
                task_id=info.workflow_id,
                label=payload.label,
                started_at=info.start_time,
                database=database,
                index=index,
                files=files,
            ),
        )
        # The archive is complete now (the discard never removes an archive with a manifest).
        exported = None
        # Runs started before exports existed replay without the step.
        if workflow.patched("backup-export"):
            self.stage("export")
            exported = await self.activity(EXPORT_BACKUP, req)
        self.stage("retention")
        retention = await self.activity(APPLY_RETENTION, req)
        items = index.points + files.stored_files + files.chunk_files
        self.stage("retention", total=items, done=items)
        return BackupResult(
            archive=req.archive,
            path=manifest.path,
            label=payload.label,
            database_kind=database.kind,
            database_bytes=database.bytes,
            index_collections=index.collections,
            index_points=index.points,
            index_bytes=index.bytes,
            stored_files=files.stored_files,
            chunk_files=files.chunk_files,
            files_copied=files.copied,
            files_present=files.present,
            bytes_copied=files.bytes_copied,
            files_bytes=files.bytes,
            archives_removed=retention.archives_removed,
            blobs_removed=retention.blobs_removed,
            duration_seconds=round((workflow.now() - info.start_time).total_seconds(), 3),
            exported_to=exported.url if exported else None,
            export_bytes=exported.bytes if exported else 0,
        )
