"""Many files as one submission (a folder): store them, write the manifest, start one
DOCUMENT_BATCH_IMPORT; and what an operator follows of it (done / failed of the total, the
failures with their reasons). Shared by the HTTP API and the CLI.

Each file is stored as an upload is (content-addressed, size-limited) and becomes a document
(its id derived from its bytes and owner, as a single import's); what its content is, is
decided by the group that parses it, so one bad file fails alone instead of refusing the whole
submission. The same files submitted again are the same documents: while the first batch
runs the submission joins it (the task id is the manifest's), afterwards it imports them
again as new versions (nothing is duplicated, nothing embedded twice).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from knowledgeops.contracts.document_batch import (
    BATCH_PROGRESS_QUERY,
    BatchFailure,
    BatchProgress,
    DocumentBatchPayload,
    DocumentBatchResult,
    ManifestEntry,
)
from knowledgeops.contracts.document_import import ChunkingOptions, DocumentMetadata
from knowledgeops.documents.batch_manifest import write_manifest
from knowledgeops.files import file_store
from knowledgeops.registry.task_types import TaskType
from starter.services.admission import FILE_BYTES_MEMO
from starter.services.document_imports import derive_document_id
from starter.services.documents import DocumentService
from starter.services.task_models import TaskNotFoundError

log = logging.getLogger(__name__)

COPY_BLOCK = 1024 * 1024
# Files stored per hop to a thread (a hop per file cost more than storing a note).
STORE_AT_ONCE = 64
# A file name in the manifest (DocumentImportPayload.filename's limit): the end is kept,
# where a path's distinguishing part is.
FILENAME_CHARS = 500
# How long a running batch's worker may take to answer its progress query.
QUERY_TIMEOUT_SECONDS = 5.0


class BatchAccepted(BaseModel):
    task_id: str
    run_id: str | None
    # Documents in the batch; files whose bytes another file of the submission has too are
    # the same document, counted once (`duplicates`).
    total: int
    duplicates: int
    status_url: str


class BatchView(BaseModel):
    """A batch as an operator follows it."""

    task_id: str
    status: str
    stage: str
    total: int
    done: int
    imported: int
    failed: int
    failures: list[BatchFailure]
    # Failures beyond the listed ones (each document's own row still has its reason).
    failures_not_listed: int = 0
    running_imports: int = 0
    chunks: int | None = None
    embedded: int | None = None
    reused: int | None = None
    last_error: str | None = None
    started_at: datetime | None = None
    closed_at: datetime | None = None


class NotABatchError(LookupError):
    pass


class DocumentBatchService:
    def __init__(self, documents: DocumentService) -> None:
        self.documents = documents
        self.tasks = documents.tasks
        self.settings = documents.settings

    async def submit(
        self,
        files: Sequence[tuple[str, Iterable[bytes]]],
        *,
        size: int,
        metadata: DocumentMetadata | None = None,
        requested_by: str | None = None,
        chunking: ChunkingOptions | None = None,
        group_size: int | None = None,
        groups_at_once: int | None = None,
    ) -> BatchAccepted:
        """Store each (file name, blocks of its bytes) and start the batch. `size`: the
        submission's bytes, for admission (BacklogFullError before anything is stored).
        `group_size`, `groups_at_once`: documents per group activity, and groups at once
        (None: the payload's defaults)."""
        meta = (metadata or DocumentMetadata()).model_copy(update={"title": None})
        await self.documents.admission.admit(size)
        s = self.settings
        limit = min(s.upload_max_bytes, s.max_file_bytes)
        entries: dict[str, ManifestEntry] = {}
        duplicates = stored_bytes = 0
        for at in range(0, len(files), STORE_AT_ONCE):
            part = files[at : at + STORE_AT_ONCE]
            stored = await asyncio.to_thread(self._store_all, part, limit, meta.owner)
            for entry in stored:
                if entry.document_id in entries:
                    duplicates += 1
                    continue
                if not entry.error:
                    await self.documents.files.send(file_store.path_for(s.files_dir, entry.file_id))
                entries[entry.document_id] = entry
                stored_bytes += entry.size
        manifest_id = await write_manifest(self.documents.files, list(entries.values()))
        payload = DocumentBatchPayload(
            manifest_id=manifest_id,
            total=len(entries),
            metadata=meta,
            chunking=chunking,
            embed_batch_size=s.embedding_batch_size,
            small_bytes=s.small_document_bytes,
            **{
                k: v
                for k, v in (("group_size", group_size), ("groups_at_once", groups_at_once))
                if v is not None
            },
        )
        # The same files with the same options are the same batch: a second submission while
        # it runs joins it.
        key = hashlib.sha256(payload.model_dump_json().encode()).hexdigest()[:32]
        ref = await self.tasks.enqueue(
            TaskType.DOCUMENT_BATCH_IMPORT,
            payload,
            task_id=TaskType.DOCUMENT_BATCH_IMPORT.task_name(key),
            requested_by=requested_by,
            owner=meta.owner,
            memo={FILE_BYTES_MEMO: stored_bytes},
            summary=f"Import {len(entries)} documents",
        )
        return BatchAccepted(
            task_id=ref.task_id,
            run_id=ref.run_id,
            total=len(entries),
            duplicates=duplicates,
            status_url=f"/v1/document-batches/{ref.task_id}",
        )

    async def submit_paths(
        self,
        named: Sequence[tuple[str, Path]],
        *,
        metadata: DocumentMetadata | None = None,
        requested_by: str | None = None,
    ) -> BatchAccepted:
        """Local files, each under the name given (a path relative to its folder)."""
        sizes = await asyncio.to_thread(lambda: sum(p.stat().st_size for _, p in named))
        return await self.submit(
            [(name, _blocks(p)) for name, p in named],
            size=sizes,
            metadata=metadata,
            requested_by=requested_by,
        )

    def _store_all(
        self, files: Sequence[tuple[str, Iterable[bytes]]], limit: int, owner: str | None
    ) -> list[ManifestEntry]:
        return [
            self._store(name[-FILENAME_CHARS:] or "upload", blocks, limit, owner)
            for name, blocks in files
        ]

    def _store(
        self, filename: str, blocks: Iterable[bytes], limit: int, owner: str | None
    ) -> ManifestEntry:
        """(In a thread.) Store one file; one too large is refused, as its entry says."""
        s = self.settings
        try:
            file_id = file_store.store_blocks(s.files_dir, blocks, filename, limit)
        except file_store.FileTooLargeError as e:
            # Not stored: the document fails with the reason, under an id of its name (no
            # file to remove later; a valid file id, so deleting the document works).
            name_id = hashlib.sha256(f"refused\x00{filename}".encode()).hexdigest()
            file_id = name_id + file_store.safe_extension(filename)
            return ManifestEntry(
                document_id=derive_document_id(file_id, owner),
                filename=filename,
                size=0,
                file_id=file_id,
                error=f"FileTooLarge: {e}",
            )
        return ManifestEntry(
            document_id=derive_document_id(file_id, owner),
            filename=filename,
            size=file_store.path_for(s.files_dir, file_id).stat().st_size,
            file_id=file_id,
        )

    async def view(self, task_id: str, *, visible_to: str | None = None) -> BatchView:
        """Where a batch is: while it runs, its workflow's own count (a query); once it has
        completed, its result; else (failed, cancelled) the count a query replays, or the
        memo's when no worker answers."""
        status = await self.tasks.get_status(task_id)
        if status.task_type != TaskType.DOCUMENT_BATCH_IMPORT.value:
            raise NotABatchError(f"Task {task_id} is not a document batch")
        if visible_to is not None and await self.tasks.owner_of(task_id) != visible_to:
            raise TaskNotFoundError(f"No task with id {task_id!r}")
        p = status.progress
        view = BatchView(
            task_id=task_id,
            status=status.status,
            stage=p.stage,
            total=p.total or 0,
            done=p.done,
            imported=0,
            failed=0,
            failures=[],
            last_error=status.last_error,
            started_at=status.started_at,
            closed_at=status.closed_at,
        )
        if status.status == "completed" and status.result is not None:
            r = DocumentBatchResult.model_validate(status.result)
            return view.model_copy(
                update={
                    "total": r.total,
                    "done": r.imported + r.failed,
                    "imported": r.imported,
                    "failed": r.failed,
                    "failures": r.failures,
                    "failures_not_listed": r.failed - len(r.failures),
                    "chunks": r.chunks,
                    "embedded": r.embedded,
                    "reused": r.reused,
                }
            )
        progress = await self._query(task_id)
        if progress is None:
            return view
        done = progress.imported + progress.failed
        # The status (describe) was read before the count (query): between a group's end and
        # the workflow task that records `began`, the status still says pending. A batch that
        # has finished documents has begun.
        begun = "running" if view.status == "pending" and done else view.status
        return view.model_copy(
            update={
                "status": begun,
                "total": progress.total,
                "done": done,
                "imported": progress.imported,
                "failed": progress.failed,
                "failures": progress.failures,
                "failures_not_listed": progress.failed - len(progress.failures),
                "running_imports": progress.running_imports,
            }
        )

    async def _query(self, task_id: str) -> BatchProgress | None:
        handle = self.tasks.client.get_workflow_handle(task_id)
        try:
            return await asyncio.wait_for(
                handle.query(BATCH_PROGRESS_QUERY, result_type=BatchProgress), QUERY_TIMEOUT_SECONDS
            )
        except (TimeoutError, WorkflowQueryFailedError, RPCError) as e:
            # No worker answers now (or the run is gone): the memo's count stands.
            log.info("progress query of %s unanswered (%s); showing the memo's count", task_id, e)
            return None


def _blocks(path: Path) -> Iterable[bytes]:
    with path.open("rb") as f:
        while block := f.read(COPY_BLOCK):
            yield block
