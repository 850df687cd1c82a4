"""BACKUP_EXECUTE's contract: payload, stage requests / results / checkpoints, result.

Only the archive's name and counts cross Temporal; the database copy, the index export and
the file listing are written into the archive folder by the activities themselves.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from knowledgeops.contracts.base import ActivityRef, Checkpoint

ARCHIVE_NAME_PATTERN = r"^[0-9]{8}T[0-9]{6}Z-[A-Za-z0-9]{1,32}$"


def archive_name(at: datetime, suffix: str) -> str:
    """A UTC timestamp first, so archive names sort chronologically; the suffix (part of the
    run id) keeps two backups started in the same second apart."""
    return f"{at:%Y%m%dT%H%M%SZ}-{''.join(c for c in suffix if c.isalnum())[:12]}"


class BackupExecutePayload(BaseModel):
    """Input of BACKUP_EXECUTE: an optional label recorded in the manifest."""

    label: str | None = Field(default=None, max_length=200)


class BackupStageRequest(BaseModel):
    archive: str = Field(pattern=ARCHIVE_NAME_PATTERN)


class DatabaseBackupResult(BaseModel):
    kind: Literal["sqlite", "postgresql"]
    path: str  # inside the archive
    bytes: int


class IndexCheckpoint(Checkpoint):
    """Export of the index: `done` points written. Collections go in name order; a retry
    resumes in `collection` at scroll `offset`, rewriting from part number `part`."""

    collection: str | None = None
    offset: int | str | None = None
    part: int = Field(default=0, ge=0)
    collection_points: int = Field(default=0, ge=0)
    bytes: int = Field(default=0, ge=0)


class IndexBackupResult(BaseModel):
    collections: int
    points: int
    bytes: int


class FilesCheckpoint(Checkpoint):
    """Copy of stored files and chunk files (in path order): `done` files listed; a retry
    resumes after path `after`, with the archive's listing cut back to `listing_bytes`."""

    after: str = ""
    listing_bytes: int = Field(default=0, ge=0)
    stored_files: int = Field(default=0, ge=0)
    chunk_files: int = Field(default=0, ge=0)
    copied: int = Field(default=0, ge=0)
    present: int = Field(default=0, ge=0)
    bytes_copied: int = Field(default=0, ge=0)
    bytes: int = Field(default=0, ge=0)


class FilesBackupResult(BaseModel):
    stored_files: int
    chunk_files: int
    # Copied into the shared pool by this backup vs. already there from an earlier one.
    copied: int
    present: int
    bytes_copied: int
    bytes: int


class ManifestRequest(BaseModel):
    archive: str = Field(pattern=ARCHIVE_NAME_PATTERN)
    task_id: str
    label: str | None = None
    started_at: datetime
    database: DatabaseBackupResult
    index: IndexBackupResult
    files: FilesBackupResult


class ManifestResult(BaseModel):
    path: str  # the archive folder on the worker's disk
    parts: int  # checksummed parts (database, index parts, listing)


class ExportResult(BaseModel):
    """The archive as one file at BACKUP_URL (knowledgeops/backup/export.py)."""

    url: str | None  # where it went; None: BACKUP_URL is not set
    bytes: int
    removed: list[str]  # exports there past BACKUP_KEEP, removed


class RetentionResult(BaseModel):
    archives_removed: list[str]
    abandoned_removed: list[str]
    blobs_removed: int
    bytes_freed: int


class BackupResult(BaseModel):
    archive: str
    path: str
    label: str | None
    database_kind: str
    database_bytes: int
    index_collections: int
    index_points: int
    index_bytes: int
    stored_files: int
    chunk_files: int
    files_copied: int
    files_present: int
    bytes_copied: int
    files_bytes: int
    archives_removed: list[str]
    blobs_removed: int
    duration_seconds: float
    # The self-contained copy at BACKUP_URL (none when unset, or for a run of a version
    # before exports).
    exported_to: str | None = None
    export_bytes: int = 0


BACKUP_DATABASE: ActivityRef[BackupStageRequest, DatabaseBackupResult] = ActivityRef(
    "backup_database", BackupStageRequest, DatabaseBackupResult
)
BACKUP_INDEX: ActivityRef[BackupStageRequest, IndexBackupResult] = ActivityRef(
    "backup_index", BackupStageRequest, IndexBackupResult
)
BACKUP_FILES: ActivityRef[BackupStageRequest, FilesBackupResult] = ActivityRef(
    "backup_files", BackupStageRequest, FilesBackupResult
)
WRITE_MANIFEST: ActivityRef[ManifestRequest, ManifestResult] = ActivityRef(
    "write_backup_manifest", ManifestRequest, ManifestResult
)
EXPORT_BACKUP: ActivityRef[BackupStageRequest, ExportResult] = ActivityRef(
    "export_backup", BackupStageRequest, ExportResult
)
APPLY_RETENTION: ActivityRef[BackupStageRequest, RetentionResult] = ActivityRef(
    "apply_backup_retention", BackupStageRequest, RetentionResult
)
DISCARD_BACKUP: ActivityRef[BackupStageRequest, bool] = ActivityRef(
    "discard_backup", BackupStageRequest, bool
)
