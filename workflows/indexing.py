"""EMBEDDING_GENERATE and INDEXING_UPSERT: one document, or every document page by page.

Each document is one run of the import's embed (or upsert) activity, which heartbeats its
chunk checkpoint; progress counts documents. Over every document, the run lists a page of ids
at a time and continues as new when Temporal suggests it, carrying only the cursor and the
totals, so a corpus of any size keeps a small history.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.base import TaskWorkflow
from workflows.reindex import rebuild_document, reindex

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.document_import import (
        EMBED_CHUNKS,
        UPSERT_CHUNKS,
        EmbedRequest,
        UpsertRequest,
    )
    from knowledgeops.contracts.indexing import (
        LIST_INDEXED_DOCUMENTS,
        PAGE,
        EmbeddingGeneratePayload,
        EmbeddingGenerateResult,
        IndexingUpsertPayload,
        IndexingUpsertResult,
        ListDocumentsRequest,
    )
    from knowledgeops.registry.task_types import TaskType


async def _pages(wf: TaskWorkflow[Any, Any], after: str) -> tuple[list[str], int]:
    page = await wf.activity(LIST_INDEXED_DOCUMENTS, ListDocumentsRequest(after=after, limit=PAGE))
    return page.document_ids, page.total


@workflow.defn(name="EmbeddingGenerate")
class EmbeddingGenerateWorkflow(TaskWorkflow[EmbeddingGeneratePayload, EmbeddingGenerateResult]):
    task_type = TaskType.EMBEDDING_GENERATE

    @workflow.run
    async def run(self, payload: EmbeddingGeneratePayload) -> EmbeddingGenerateResult:
        return await self.run_task(payload)

    def event_data(self, payload: EmbeddingGeneratePayload) -> dict[str, Any]:
        return {"document_id": payload.document_id, "model": payload.model}

    async def steps(self, payload: EmbeddingGeneratePayload) -> EmbeddingGenerateResult:
        totals = EmbeddingGenerateResult(model=payload.model or "", documents=payload.done_before)
        if payload.document_id is not None:
            self.stage("embedding", total=1, done=0)
            out = await self.activity(EMBED_CHUNKS, self._request(payload, payload.document_id))
            return EmbeddingGenerateResult(
                documents=1, chunks=out.total, embedded=out.embedded, reused=out.reused,
                model=out.model,
            )  # fmt: skip
        after = payload.after
        while True:
            ids, total = await _pages(self, after)
            self.stage("embedding", total=total, done=totals.documents)
            for doc in ids:
                out = await self.activity(EMBED_CHUNKS, self._request(payload, doc))
                totals.documents += 1
                totals.chunks += out.total
                totals.embedded += out.embedded
                totals.reused += out.reused
                totals.model = out.model
                self.stage("embedding", done=totals.documents)
            if len(ids) < PAGE:
                return totals
            after = ids[-1]
            if workflow.info().is_continue_as_new_suggested():
                # Totals of documents embedded so far travel in the payload; counts of chunks
                # restart (the final result reports this run's chunks).
                workflow.continue_as_new(
                    payload.model_copy(update={"after": after, "done_before": totals.documents})
                )

    @staticmethod
    def _request(payload: EmbeddingGeneratePayload, doc: str) -> EmbedRequest:
        return EmbedRequest(
            document_id=doc,
            batch_size=payload.batch_size,
            start=payload.start_index,
            end=payload.end_index,
            model=payload.model,
        )


@workflow.defn(name="IndexingUpsert")
class IndexingUpsertWorkflow(TaskWorkflow[IndexingUpsertPayload, IndexingUpsertResult]):
    task_type = TaskType.INDEXING_UPSERT

    @workflow.run
    async def run(self, payload: IndexingUpsertPayload) -> IndexingUpsertResult:
        return await self.run_task(payload)

    def event_data(self, payload: IndexingUpsertPayload) -> dict[str, Any]:
        data: dict[str, Any] = {
            "document_id": payload.document_id,
            "collection": payload.collection,
        }
        if payload.reindex is not None:
            data |= {"reindex": True, "model": payload.model}
        elif payload.rebuild is not None:
            data["collection"] = payload.rebuild.collection
        return data

    async def steps(self, payload: IndexingUpsertPayload) -> IndexingUpsertResult:
        if payload.reindex is not None:
            return await reindex(self, payload)
        if payload.rebuild is not None:
            return await rebuild_document(self, payload)
        result = IndexingUpsertResult(
            documents=payload.done_before, points=0, collection=payload.collection or ""
        )

        async def upsert(doc: str) -> None:
            out = await self.activity(
                UPSERT_CHUNKS,
                UpsertRequest(
                    document_id=doc,
                    batch_size=payload.batch_size,
                    model=payload.model,
                    collection=payload.collection,
                ),
            )
            result.documents += 1
            result.points += out.total
            result.collection = out.collection

        if payload.document_id is not None:
            self.stage("indexing", total=1, done=0)
            await upsert(payload.document_id)
            return result
        after = payload.after
        while True:
            ids, total = await _pages(self, after)
            self.stage("indexing", total=total, done=result.documents)
            for doc in ids:
                await upsert(doc)
                self.stage("indexing", done=result.documents)
            if len(ids) < PAGE:
                return result
            after = ids[-1]
            if workflow.info().is_continue_as_new_suggested():
                workflow.continue_as_new(
                    payload.model_copy(update={"after": after, "done_before": result.documents})
                )
