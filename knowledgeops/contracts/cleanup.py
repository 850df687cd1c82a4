"""CLEANUP_EXECUTE's contract: payload, the removal plan, activity requests / results /
checkpoint, result.

The list of what a run removes can be long (every orphaned file, every old backup), so it never
crosses Temporal: the find activity writes it as a `CleanupPlan` JSON file under
`data/cleanup/`, and only its path and per-kind totals travel through the workflow.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from knowledgeops.contracts.base import ActivityRef, Checkpoint


class OrphanKind(StrEnum):
    # Stored files (data/files) no catalogued document and no running or queued import uses.
    FILES = "files"
    # Chunk files (data/chunks/<document>.jsonl / .idx) of documents not in the catalogue.
    CHUNKS = "chunks"
    # Index points of documents not in the catalogue (one item per document).
    POINTS = "points"
    # Backup archives beyond the newest BACKUP_KEEP.
    BACKUPS = "backups"
    # Parser temp files whose process is dead, upload temp files older than an hour.
    TEMP_FILES = "temp_files"
    # Domain events older than EVENT_RETENTION_DAYS (one item: the rows before the cutoff).
    EVENTS = "events"
    # Audit records older than AUDIT_RETENTION_DAYS (likewise).
    AUDIT = "audit"


class CleanupExecutePayload(BaseModel):
    """Input of CLEANUP_EXECUTE. Retention periods come from the settings (BACKUP_KEEP,
    EVENT_RETENTION_DAYS, AUDIT_RETENTION_DAYS), so a schedule and a manual run agree."""

    # List what would be removed (with sizes) and remove nothing.
    dry_run: bool = True
    # Stored files younger than this are kept even if nothing references them yet: an upload
    # stores its file a moment before its import starts.
    grace_minutes: int = Field(default=60, ge=0, le=7 * 24 * 60)
    # Which kinds to look for (default: all).
    kinds: list[OrphanKind] = Field(default_factory=lambda: list(OrphanKind), min_length=1)


class CleanupItem(BaseModel):
    """One thing to remove. `name` is a path relative to the data directory for files and
    archives, a document id for points, the table name for rows."""

    kind: OrphanKind
    name: str
    # Size on disk (files, archives); 0 for points and rows, which are counted instead.
    bytes: int = Field(default=0, ge=0)
    # Files / archives: 1; points: the document's points; rows: rows before the cutoff.
    count: int = Field(default=1, ge=0)
    # Rows only: those dated before `before` with an id up to `up_to_id` (later rows are
    # never touched, even if an old-dated one is written after the plan was made).
    before: datetime | None = None
    up_to_id: int | None = None


class KindTotals(BaseModel):
    items: int = 0
    count: int = 0
    bytes: int = 0

    def add(self, item: CleanupItem) -> None:
        self.items += 1
        self.count += item.count
        self.bytes += item.bytes


def totals(items: list[CleanupItem]) -> dict[str, KindTotals]:
    out: dict[str, KindTotals] = {}
    for item in items:
        out.setdefault(item.kind.value, KindTotals()).add(item)
    return out


class CleanupPlan(BaseModel):
    """The file a run lists its items in (data/cleanup/<task id>.json)."""

    task_id: str
    created_at: datetime
    dry_run: bool
    # The removal re-checks each item with the same rules (and grace) before removing it.
    grace_minutes: int
    items: list[CleanupItem]


class FindOrphansRequest(BaseModel):
    task_id: str
    dry_run: bool
    grace_minutes: int
    kinds: list[OrphanKind]


class FindOrphansResult(BaseModel):
    plan_path: str
    items: int
    found: dict[str, KindTotals]


class RemoveOrphansRequest(BaseModel):
    plan_path: str
    items: int


class RemoveCheckpoint(Checkpoint):
    """Heartbeat details of the removal: a retry resumes at plan item `done`."""

    removed: dict[str, KindTotals] = Field(default_factory=dict)
    # Items that became needed again between listing and removal (kept).
    skipped: dict[str, KindTotals] = Field(default_factory=dict)


class RemoveOrphansResult(BaseModel):
    removed: dict[str, KindTotals]
    skipped: dict[str, KindTotals]


class CleanupResult(BaseModel):
    dry_run: bool
    # Every item, with its size: a CleanupPlan JSON file.
    plan_path: str
    found: dict[str, KindTotals]
    removed: dict[str, KindTotals]
    skipped: dict[str, KindTotals]
    found_items: int
    found_bytes: int
    removed_items: int
    removed_bytes: int


FIND_ORPHANS: ActivityRef[FindOrphansRequest, FindOrphansResult] = ActivityRef(
    "find_orphans", FindOrphansRequest, FindOrphansResult
)
REMOVE_ORPHANS: ActivityRef[RemoveOrphansRequest, RemoveOrphansResult] = ActivityRef(
    "remove_orphans", RemoveOrphansRequest, RemoveOrphansResult
)
