"""The document lifecycle, one owner for the HTTP API and the CLI: store and import (or
re-import) a file, list and show documents, delete one (hide it, start its delete task)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_delete import DELETING, DocumentDeletePayload
from knowledgeops.contracts.document_import import (
    ChunkingOptions,
    DocumentImportPayload,
    DocumentMetadata,
)
from knowledgeops.db.catalogue import DocumentCatalogue, DocumentRow
from knowledgeops.db.database import Database
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.documents.removal import hide_document
from knowledgeops.errors import DocumentError
from knowledgeops.files import file_store
from knowledgeops.files.data_files import DataFiles, open_storage
from knowledgeops.formats import detect_format
from knowledgeops.index.live import live_index
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.models.embedding import model_id_for
from knowledgeops.registry.task_types import TaskType
from starter.services import document_chunks
from starter.services.admission import FILE_BYTES_MEMO, Admission
from starter.services.document_chunks import ChunkPage
from starter.services.document_imports import derive_document_id, import_priority, import_task_name
from starter.services.document_models import (
    DeleteAccepted,
    Document,
    DocumentBeingDeletedError,
    DocumentDetail,
    DocumentNotFoundError,
    DocumentOwnedElsewhereError,
    DocumentPage,
    ImportRef,
)
from starter.services.task_models import TaskFinishedError, TaskNotFoundError, TaskStatus
from starter.services.tasks import TaskQueueService


class DocumentService:
    def __init__(
        self,
        tasks: TaskQueueService,
        db: Database,
        settings: Settings,
        store: VectorIndex | None = None,
        files: DataFiles | None = None,
    ) -> None:
        self.tasks = tasks
        # Where uploads are kept (STORAGE_URL's store, else the data folder).
        self.files = files or open_storage(settings)[1]
        self.catalogue = DocumentCatalogue(db)
        self.live_versions = LiveVersions(db, settings.chunks_dir)
        self.settings = settings
        # The index is needed to count and delete points; listing works without it.
        self.store = store
        self.admission = Admission(tasks.client, settings)
        self.model_id = model_id_for(settings)

    def import_task_id(self, document_id: str) -> str:
        return self.settings.task_id(import_task_name(document_id))

    # -- import ---------------------------------------------------------------------------

    async def store_upload(
        self, blocks: Iterable[bytes], filename: str, limit: int, size: int = 0
    ) -> str:
        """Stream an upload into storage and sniff it; a file that is no document is removed
        again (unless another document has the same bytes) and raises DocumentError. While the
        import backlog is full, BacklogFullError and nothing is stored."""
        await self.admission.admit(size)
        s = self.settings
        file_id = await asyncio.to_thread(
            file_store.store_blocks, s.files_dir, blocks, filename, limit
        )
        path = file_store.path_for(s.files_dir, file_id)
        try:
            await asyncio.to_thread(detect_format, path, filename)
        except DocumentError:
            if not await self.catalogue.file_in_use(file_id):
                path.unlink(missing_ok=True)
            raise
        await self.files.send(path)
        return file_id

    async def import_file(
        self,
        path: Path,
        *,
        document_id: str | None = None,
        metadata: DocumentMetadata | None = None,
    ) -> ImportRef:
        """Store a local file (streamed, hashed) and start its DOCUMENT_IMPORT."""
        await self.admission.admit((await asyncio.to_thread(path.stat)).st_size)
        file_id = await asyncio.to_thread(
            file_store.store_path, self.settings.files_dir, path, self.settings.max_file_bytes
        )
        await self.files.send(file_store.path_for(self.settings.files_dir, file_id))
        return await self.import_stored(
            file_id, filename=path.name, document_id=document_id, metadata=metadata
        )

    async def import_stored(
        self,
        file_id: str,
        *,
        filename: str,
        document_id: str | None = None,
        metadata: DocumentMetadata | None = None,
        idempotency_key: str | None = None,
        requested_by: str | None = None,
        visible_to: str | None = None,
        chunking: ChunkingOptions | None = None,
        embed_batch_size: int | None = None,
    ) -> ImportRef:
        """Start the document's import under its one task id (a second import of the same
        document joins or follows it, never races it). `visible_to`: the one owner the caller
        may change; a document id of another owner's document is refused."""
        meta = metadata or DocumentMetadata()
        doc_id = document_id or derive_document_id(file_id, meta.owner)
        await self.check_document_id(doc_id, visible_to)
        row = await self.catalogue.get(doc_id)
        if row is not None and row.status == DELETING:
            # Its delete task would remove what this import writes.
            raise DocumentBeingDeletedError(
                f"Document {doc_id!r} is being deleted (task "
                f"{self.settings.task_id(TaskType.DOCUMENT_DELETE.task_name(doc_id))}); "
                "import it again once that task has completed"
            )
        size = await self._stored_size(file_id)
        payload = DocumentImportPayload(
            file_id=file_id,
            document_id=doc_id,
            filename=filename,
            metadata=meta,
            # None: the live index's chunking (CHUNK_TOKENS until a re-index sets another).
            chunking=chunking,
            embed_batch_size=embed_batch_size or self.settings.embedding_batch_size,
            local_steps=size <= self.settings.small_document_bytes,
        )
        ref = await self.tasks.enqueue(
            TaskType.DOCUMENT_IMPORT,
            payload,
            task_id=import_task_name(doc_id),
            idempotency_key=idempotency_key,
            requested_by=requested_by,
            owner=meta.owner,
            # The backlog admission measures: bytes waiting for or in an import.
            memo={FILE_BYTES_MEMO: size},
            # Fair scheduling: a small document's parse, embed and upsert go ahead of a bulk
            # import's backlog, so a one-page upload is not stuck behind big files.
            priority=import_priority(size, self.settings.small_document_bytes),
            summary=f"Import {filename}" + (f" ({meta.title})" if meta.title else ""),
        )
        return ImportRef(task_id=ref.task_id, run_id=ref.run_id, document_id=doc_id)

    async def admit_stored(self, file_id: str) -> None:
        """Refuse (BacklogFullError) an import of an already stored file while the backlog is
        full; uploads and local files are admitted before they are stored."""
        await self.admission.admit(await self._stored_size(file_id))

    async def _stored_size(self, file_id: str) -> int:
        path = file_store.path_for(self.settings.files_dir, file_id)
        return await self.files.size(path) or 0

    # -- read -----------------------------------------------------------------------------

    async def check_document_id(self, document_id: str, visible_to: str | None) -> None:
        """Refuse an owner-bound caller a document id another owner's document has."""
        if visible_to is None:
            return
        exists, owner = await self._current_owner(document_id)
        if exists and owner != visible_to:
            raise DocumentOwnedElsewhereError(
                f"Document id {document_id!r} is taken; choose another document_id"
            )

    async def _current_owner(self, document_id: str) -> tuple[bool, str | None]:
        """(whether the document exists, listed or with its import queued; its owner)."""
        row = await self.catalogue.get(document_id)
        if row is not None:
            return True, row.owner
        try:
            task_id = self.import_task_id(document_id)
            finished = (await self.tasks.get_status(task_id)).finished
            owner = (await self._queued_input(task_id)).metadata.owner
        except TaskNotFoundError:
            return False, None
        # A deleted (or failed) document's id stays its owner's while its task history exists:
        # another owner reusing it would see that history (the task id is the document's).
        return (not finished) or owner is not None, owner

    async def list(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        owner: str | None = None,
        tags: Sequence[str] = (),
        document_ids: Sequence[str] = (),
        visible_to: str | None = None,
    ) -> DocumentPage:
        """Documents of `owner` with every tag in `tags` (among `document_ids` when given);
        `visible_to` limits the page to that owner's documents whatever else is asked."""
        if visible_to is not None:
            if owner is not None and owner != visible_to:
                return DocumentPage(items=[], total=0)
            owner = visible_to
        rows, total = await self.catalogue.list(
            limit=limit, offset=offset, owner=owner, tags=tags, document_ids=document_ids
        )
        return DocumentPage(items=[_document(r) for r in rows], total=total)

    async def get(self, document_id: str, *, visible_to: str | None = None) -> DocumentDetail:
        """`visible_to`: the one owner the caller may see; others' documents are not found."""
        row = await self.catalogue.get(document_id)
        if row is not None and visible_to is not None and row.owner != visible_to:
            raise DocumentNotFoundError(f"No document with id {document_id!r}")
        if row is None:
            detail = await self._awaiting_import(document_id)
            if visible_to is not None and detail.owner != visible_to:
                raise DocumentNotFoundError(f"No document with id {document_id!r}")
            return detail
        try:
            task: TaskStatus | None = await self.tasks.get_status(row.last_task_id)
        except TaskNotFoundError:
            task = None  # Temporal's retention removed the task; the catalogue still knows
        return DocumentDetail(
            **_document(row).model_dump(), task=task, points_in_index=await self._points(row)
        )

    async def chunks(
        self, document_id: str, *, offset: int, limit: int, visible_to: str | None = None
    ) -> ChunkPage:
        """A page of the live version's chunks; who may read them is decided as in `get`."""
        document_chunks.check_page(offset, limit)
        row = await self.catalogue.get(document_id)
        if row is None or (visible_to is not None and row.owner != visible_to):
            # Not found, or known only from its queued import: `get` tells which.
            queued = await self.get(document_id, visible_to=visible_to)
            raise document_chunks.not_published(document_id, queued.status, queued.last_task_id)
        try:
            return await document_chunks.live_page(
                self.live_versions, self.files, document_id, offset, limit
            )
        except FileNotFoundError:
            # Listed, but no version was ever published (the only import running or ended).
            raise document_chunks.not_published(
                document_id, row.status, row.last_task_id, row.error
            ) from None

    async def _points(self, row: DocumentRow) -> int:
        if self.store is None:
            return row.indexed_chunks  # the catalogue's figure when the index is not open here
        live = await live_index(self.store, self.model_id)
        return await self.store.count(live.collection, row.document_id)

    async def _queued_input(self, task_id: str) -> DocumentImportPayload:
        raw, _ = await self.tasks.task_input(task_id)
        return DocumentImportPayload.model_validate(raw)

    async def _awaiting_import(self, document_id: str) -> DocumentDetail:
        """A document is listed when its import starts running; until a worker picks the
        import up, the task's own input describes it (status `queued`)."""
        task_id = self.import_task_id(document_id)
        missing = DocumentNotFoundError(f"No document with id {document_id!r}")
        try:
            task = await self.tasks.get_status(task_id)
            if task.finished:
                raise missing  # deleted, or ended before it was ever listed
            payload = await self._queued_input(task_id)
        except TaskNotFoundError:
            raise missing from None
        since = task.started_at or datetime.now(UTC)
        return DocumentDetail(
            document_id=document_id,
            title=payload.metadata.title,
            filename=payload.filename,
            tags=payload.metadata.tags,
            owner=payload.metadata.owner,
            status="queued",
            indexed_chunks=0,
            last_task_id=task_id,
            error=None,
            created_at=since,
            updated_at=since,
            task=task,
            points_in_index=0,
        )

    # -- delete ---------------------------------------------------------------------------

    async def delete(
        self, document_id: str, *, reason: str = "", actor: str, visible_to: str | None = None
    ) -> DeleteAccepted:
        """Hide the document from search at once and start its DOCUMENT_DELETE task, which
        stops its import and removes its points, chunks, catalogue row and stored file
        (knowledgeops/documents/removal.py). Asking again while it runs joins the same task.
        `visible_to`: the one owner the caller may change; others' documents are not found."""
        if self.store is None:
            raise RuntimeError("deleting a document needs the vector index open")
        missing = DocumentNotFoundError(f"No document with id {document_id!r}")
        row = await self.catalogue.get(document_id)
        if row is not None and visible_to is not None and row.owner != visible_to:
            raise missing
        task: TaskStatus | None = None
        if row is not None:
            import_task_id, file_id, owner = row.last_task_id, row.file_id, row.owner
            filename = row.filename
            with contextlib.suppress(TaskNotFoundError):  # its history may be gone
                task = await self.tasks.get_status(import_task_id)
        else:
            # Not listed yet: its import may still be waiting for a worker (_awaiting_import).
            import_task_id = self.import_task_id(document_id)
            try:
                task = await self.tasks.get_status(import_task_id)
            except TaskNotFoundError:
                raise missing from None
            if task.finished:
                raise missing  # deleted already (or never listed): as `get` answers
            queued = await self._queued_input(import_task_id)
            file_id, owner, filename = queued.file_id, queued.metadata.owner, queued.filename
            if visible_to is not None and owner != visible_to:
                raise missing
        await hide_document(
            self.store,
            self.catalogue,
            document_id,
            file_id=file_id,
            import_task_id=import_task_id,
            owner=owner,
            filename=filename,
        )
        # A batch import (a folder's) goes on with its other documents; the delete task waits
        # until it is past this one (its row says `deleting`, so the batch leaves it alone).
        running = (
            task is not None
            and not task.finished
            and task.task_type != TaskType.DOCUMENT_BATCH_IMPORT.value
        )
        if running:
            # Now, not when the delete task runs: a queued import then never starts, and a
            # running one stops at its next heartbeat. (The task waits for it to close.)
            with contextlib.suppress(TaskFinishedError):
                await self.tasks.cancel(
                    import_task_id, reason=f"document delete: {reason}", actor=actor
                )
        ref = await self.tasks.enqueue(
            TaskType.DOCUMENT_DELETE,
            DocumentDeletePayload(
                document_id=document_id,
                import_task_id=import_task_id,
                import_running=running,
                file_id=file_id,
                owner=owner,
                actor=actor,
                reason=reason,
            ),
            # One delete task per document: asking twice joins the running one.
            task_id=TaskType.DOCUMENT_DELETE.task_name(document_id),
            requested_by=actor,
            owner=owner,
            summary=f"Delete {filename or document_id}",
        )
        await self.tasks.audit(
            actor,
            "document_delete",
            [ref.task_id, import_task_id],
            reason,
            "requested",
            {"document_id": document_id},
        )
        return DeleteAccepted(document_id=document_id, task_id=ref.task_id, run_id=ref.run_id)


def _document(row: DocumentRow) -> Document:
    return Document.model_validate(row, from_attributes=True)
