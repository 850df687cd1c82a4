"""DOCUMENT_IMPORT: parse -> (OCR of scanned pages / images) -> chunk -> embed -> upsert
(staged) -> publish.

Only ids and counts pass through the workflow; text and vectors stay in storage. The embed and
upsert activities' heartbeats carry the chunk checkpoint a retry resumes from. The import
writes its own version of the document (keyed by the task's first run, so a retry or a reset
of the same task resumes it) and publishes it at the end: until then search answers from the
previous version, and a failed or cancelled import discards only what it wrote.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.document_import import (
        CHUNK_DOCUMENT,
        DISCARD_VERSION,
        EMBED_CHUNKS,
        PARSE_DOCUMENT,
        PUBLISH_VERSION,
        UPSERT_CHUNKS,
        ChunkRequest,
        DocumentImportPayload,
        DocumentImportResult,
        EmbedRequest,
        ParseRequest,
        UpsertRequest,
        VersionRequest,
    )
    from knowledgeops.contracts.ocr import OcrPayload, OcrResult
    from knowledgeops.task_types import TaskType


@workflow.defn(name="DocumentImport")
class DocumentImportWorkflow(TaskWorkflow[DocumentImportPayload, DocumentImportResult]):
    task_type = TaskType.DOCUMENT_IMPORT

    @workflow.run
    async def run(self, payload: DocumentImportPayload) -> DocumentImportResult:
        return await self.run_task(payload)

    def event_data(self, payload: DocumentImportPayload) -> dict[str, Any]:
        return {"document_id": payload.document_id, "filename": payload.filename}

    def first_event_data(self, payload: DocumentImportPayload) -> dict[str, Any]:
        # What the document catalogue lists (its projection of this event).
        return self.event_data(payload) | {
            "file_id": payload.file_id,
            **payload.metadata.model_dump(),
        }

    async def steps(self, payload: DocumentImportPayload) -> DocumentImportResult:
        doc = payload.document_id
        info = workflow.info()
        # The same for every run of this task's chain (a retry, an operator's reset).
        version = (info.first_execution_run_id or info.run_id).replace("-", "")
        mine = VersionRequest(document_id=doc, version=version)
        # From the first write on, a failure or cancel removes what this import wrote (its
        # sections, chunks and staged points); the live version stays searchable.
        self.on_failure("staged_discarded", lambda: self.activity(DISCARD_VERSION, mine))
        self.stage("parsing")
        parsed = await self.activity(
            PARSE_DOCUMENT,
            ParseRequest(
                file_id=payload.file_id, document_id=doc, version=version, filename=payload.filename
            ),
        )
        ocr_pages: list[int] = []
        ocr_task: str | None = None
        if parsed.ocr:
            # Scanned pages or an image: OCR_PROCESS as a child task, visible and cancellable
            # on its own; its text is stored by file id and merged in by the chunk step.
            self.stage("ocr")
            suffix = f"{doc}-{version[:12]}"
            ocr_task = self.child_task_id(TaskType.OCR_PROCESS, suffix)
            ocr = await self.child_task(
                TaskType.OCR_PROCESS,
                OcrPayload(
                    file_id=payload.file_id,
                    filename=payload.filename,
                    pages=parsed.ocr_pages,
                    document_id=doc,
                ),
                OcrResult,
                suffix=suffix,
                owner=payload.metadata.owner,
            )
            ocr_pages = ocr.pages
        self.stage("chunking")
        chunked = await self.activity(
            CHUNK_DOCUMENT,
            ChunkRequest(
                document_id=doc,
                version=version,
                format=parsed.format,
                chunking=payload.chunking,
                ocr_file_id=payload.file_id if ocr_pages else None,
                ocr_pages=ocr_pages,
            ),
        )
        total = chunked.total_chunks
        self.stage("embedding", total=total, done=0)
        embedded = await self.activity(
            EMBED_CHUNKS,
            EmbedRequest(document_id=doc, version=version, batch_size=payload.embed_batch_size),
        )
        self.stage("indexing", total=total, done=0)
        await self.activity(
            UPSERT_CHUNKS, UpsertRequest(document_id=doc, version=version, staged=True)
        )
        self.stage("publishing", total=total, done=total)
        published = await self.activity(PUBLISH_VERSION, mine)
        return DocumentImportResult(
            document_id=doc,
            format=parsed.format,
            total_chunks=total,
            embedded=embedded.embedded,
            reused=embedded.reused,
            stale_removed=published.stale_removed,
            pages=parsed.pages,
            title=payload.metadata.title or parsed.title,
            ocr_pages=len(ocr_pages),
            ocr_task_id=ocr_task,
            version=version,
        )
