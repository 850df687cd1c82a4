"""DOCUMENT_IMPORT: parse -> (OCR of scanned pages / images) -> chunk -> embed -> upsert
(staged) -> publish.

Only ids and counts pass through the workflow; text and vectors stay in storage. The embed and
upsert activities' heartbeats carry the chunk checkpoint a retry resumes from. The import
writes its own version of the document (keyed by the task's first run, so a retry or a reset
of the same task resumes it) and publishes it at the end: until then search answers from the
previous version, and a failed or cancelled import discards only what it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
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
        ChunkingOptions,
        ChunkRequest,
        DocumentImportPayload,
        DocumentImportResult,
        EmbedRequest,
        ParseRequest,
        ParseResult,
        UpsertRequest,
        VersionRequest,
    )
    from knowledgeops.contracts.ocr import OcrPayload, OcrResult
    from knowledgeops.registry.task_types import TaskType


@dataclass
class Chunked:
    total_chunks: int
    # Pages OCR read (merged into the chunks), and the OCR task that read them.
    ocr_pages: list[int]
    ocr_task_id: str | None


async def parse_and_chunk(
    wf: TaskWorkflow[Any, Any],
    req: ParseRequest,
    chunking: ChunkingOptions | None,
    *,
    owner: str | None,
    local: bool = False,
) -> tuple[ParseResult, Chunked]:
    """Parse a stored file into a version's sections, OCR what has no text layer (a child
    task), and split it into the version's chunks. Shared by imports and re-index rebuilds.
    `local`: run the steps as local activities (a small document)."""
    doc, version = req.document_id, req.version
    wf.stage("parsing", memo=not local)
    parsed = await wf.activity(PARSE_DOCUMENT, req, local=local)
    ocr_pages: list[int] = []
    ocr_task: str | None = None
    if parsed.ocr:
        # Scanned pages or an image: OCR_PROCESS as a child task, visible and cancellable
        # on its own; its text is stored by file id and merged in by the chunk step.
        wf.stage("ocr")
        suffix = f"{doc}-{version[:12]}"
        ocr_task = wf.child_task_id(TaskType.OCR_PROCESS, suffix)
        ocr = await wf.child_task(
            TaskType.OCR_PROCESS,
            OcrPayload(
                file_id=req.file_id,
                filename=req.filename,
                pages=parsed.ocr_pages,
                document_id=doc,
            ),
            OcrResult,
            suffix=suffix,
            owner=owner,
        )
        ocr_pages = ocr.pages
    wf.stage("chunking", memo=not local)
    chunked = await wf.activity(
        CHUNK_DOCUMENT,
        ChunkRequest(
            document_id=doc,
            version=version,
            format=parsed.format,
            chunking=chunking,
            ocr_file_id=req.file_id if ocr_pages else None,
            ocr_pages=ocr_pages,
        ),
        local=local,
    )
    return parsed, Chunked(chunked.total_chunks, ocr_pages, ocr_task)


# Outside the sandbox: for a small document the sandbox (a fresh import of this module per run,
# a context switch into it per payload) was half the worker's CPU (docs/benchmarks.md, "Many
# small documents"). The code stays sandbox-clean: tests/platform/test_replay.py replays import
# histories in the sandbox, which fails on any non-deterministic call.
@workflow.defn(name="DocumentImport", sandboxed=False)
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
        mine = VersionRequest(document_id=doc, version=version, purpose="import")
        # A small document runs its steps as local activities: each takes milliseconds, and
        # the whole import is then one workflow task instead of six plus five activity tasks
        # (docs/benchmarks.md, "Many small documents"). Bigger files keep queued activities,
        # which heartbeat their checkpoints. An import started before `local_steps` existed
        # says it by its priority; one started before local steps, by not being patched.
        small = payload.local_steps if payload.local_steps is not None else self.express()
        local = small and workflow.patched("small-document-local-steps")
        # From the first write on, a failure or cancel removes what this import wrote (its
        # sections, chunks and staged points); the live version stays searchable.
        self.on_failure("staged_discarded", lambda: self.activity(DISCARD_VERSION, mine))
        parsed, chunked = await parse_and_chunk(
            self,
            ParseRequest(
                file_id=payload.file_id, document_id=doc, version=version, filename=payload.filename
            ),
            payload.chunking,
            owner=payload.metadata.owner,
            local=local,
        )
        total = chunked.total_chunks
        embedded_n = reused_n = 0
        while True:
            self.stage("embedding", total=total, done=0, memo=not local)
            # The model and collection of the live index, chosen once for embed, upsert and
            # publish (so vectors and collection always match).
            embedded = await self.activity(
                EMBED_CHUNKS,
                EmbedRequest(document_id=doc, version=version, batch_size=payload.embed_batch_size),
                local=local,
            )
            embedded_n += embedded.embedded
            reused_n += embedded.reused
            mine = mine.model_copy(update={"collection": embedded.collection})
            self.stage("indexing", total=total, done=0, memo=not local)
            written = await self.activity(
                UPSERT_CHUNKS,
                UpsertRequest(
                    document_id=doc,
                    version=version,
                    staged=True,
                    model=embedded.model,
                    collection=embedded.collection,
                ),
                local=local,
            )
            self.stage("publishing", total=total, done=total, memo=not local)
            published = await self.activity(
                PUBLISH_VERSION, mine.model_copy(update={"staged": written.staged}), local=local
            )
            if published.live:
                break
            mine = mine.model_copy(update={"purpose": "import_again"})
            # A re-index switched the live index meanwhile: go again into the new one (its
            # model may differ; what it already has costs nothing).
        return DocumentImportResult(
            document_id=doc,
            format=parsed.format,
            total_chunks=total,
            embedded=embedded_n,
            reused=reused_n,
            stale_removed=published.stale_removed,
            pages=parsed.pages,
            title=payload.metadata.title or parsed.title,
            ocr_pages=len(chunked.ocr_pages),
            ocr_task_id=chunked.ocr_task_id,
            version=version,
        )
