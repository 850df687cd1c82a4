"""Re-index without downtime (INDEXING_UPSERT with `reindex`), and the rebuild of one
document it runs as a child task per document.

The re-index builds every document into a new collection while search answers from the live
one, rebuilds again what imports changed meanwhile (rounds until nothing changed), then moves
the live-index alias in one call. Imports that chose the previous index just before the switch
go again into the new one (their publish step notices); what changed around the switch is
rebuilt once more after a short settle and again at the end of the grace period, and then the
previous collection is dropped. A failure or cancel before the switch drops the new collection
and leaves the live index as it was.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError

from workflows.base import TaskWorkflow
from workflows.document_import import parse_and_chunk

with workflow.unsafe.imports_passed_through():
    from knowledgeops.contracts.document_import import (
        DISCARD_VERSION,
        EMBED_CHUNKS,
        PUBLISH_VERSION,
        UPSERT_CHUNKS,
        ChunkingOptions,
        EmbedRequest,
        ParseRequest,
        UpsertRequest,
        VersionRequest,
    )
    from knowledgeops.contracts.indexing import (
        ADOPT_REBUILT,
        DROP_INDEX,
        LIST_CHANGED_DOCUMENTS,
        LIST_INDEXED_DOCUMENTS,
        PAGE,
        PREPARE_REBUILD,
        PREPARE_REINDEX,
        SWITCH_LIVE_INDEX,
        AdoptRequest,
        ChangedDocumentsRequest,
        DropRequest,
        IndexingUpsertPayload,
        IndexingUpsertResult,
        ListDocumentsRequest,
        PrepareRebuildRequest,
        PrepareReindexRequest,
        RebuildTarget,
        ReindexState,
        SwitchRequest,
    )
    from knowledgeops.registry.task_types import TaskType

# Catch-up rounds before the switch; more than this means imports never pause: switch anyway,
# the rounds after the switch rebuild what is left.
MAX_ROUNDS = 5
# Catalogue times come from the clocks of several processes: look back this much further.
CLOCK_MARGIN = timedelta(seconds=60)
# After the switch, imports that had chosen the previous index finish their publish within
# this (they then go again into the new index); what they changed is rebuilt after it.
SETTLE = timedelta(seconds=15)


async def rebuild_document(
    wf: TaskWorkflow[Any, Any], payload: IndexingUpsertPayload
) -> IndexingUpsertResult:
    """One document into the re-index's collection: its live chunks (or the stored file split
    again), embedded with the re-index's model, written staged, then published there."""
    target = payload.rebuild
    doc = payload.document_id
    assert target is not None and doc is not None  # checked by the payload's validator
    prep = await wf.activity(PREPARE_REBUILD, PrepareRebuildRequest(document_id=doc, target=target))
    mine = VersionRequest(
        document_id=doc,
        version=prep.version,
        collection=target.collection,
        purpose="rebuild",
        source=prep.source,
        first_round=target.first,
    )
    wf.on_failure("staged_discarded", lambda: wf.activity(DISCARD_VERSION, mine))
    if prep.rechunk:
        await parse_and_chunk(
            wf,
            ParseRequest(
                file_id=prep.file_id, document_id=doc, version=prep.version, filename=prep.filename
            ),
            target.chunking,
            owner=prep.owner,
        )
    wf.stage("embedding", total=1, done=0)
    await wf.activity(
        EMBED_CHUNKS, EmbedRequest(document_id=doc, version=prep.version, model=payload.model)
    )
    wf.stage("indexing")
    written = await wf.activity(
        UPSERT_CHUNKS,
        UpsertRequest(
            document_id=doc,
            version=prep.version,
            batch_size=payload.batch_size,
            model=payload.model,
            collection=target.collection,
            staged=True,
        ),
    )
    await wf.activity(PUBLISH_VERSION, mine.model_copy(update={"staged": written.staged}))
    return IndexingUpsertResult(documents=1, points=written.total, collection=target.collection)


class _Reindex:
    """The parent's steps, with the state it carries when it continues as new."""

    def __init__(self, wf: TaskWorkflow[Any, Any], payload: IndexingUpsertPayload) -> None:
        assert payload.reindex is not None
        self.wf, self.payload, self.options = wf, payload, payload.reindex
        self.state: ReindexState | None = payload.state
        self.round = 0
        tokens = self.options.chunk_tokens
        self.chunking = (
            ChunkingOptions(chunk_tokens=tokens, overlap_tokens=min(64, tokens // 8))
            if tokens
            else None
        )

    async def run(self) -> IndexingUpsertResult:
        wf = self.wf
        if self.state is None:
            tag = workflow.info().run_id.replace("-", "")[:10]
            prep = await wf.activity(
                PREPARE_REINDEX, PrepareReindexRequest(model=self.payload.model, tag=tag)
            )
            self.state = ReindexState(
                collection=prep.collection, model=prep.model, previous=prep.previous, tag=tag
            )
        state = self.state
        # Until the switch, a failure or cancel drops the new collection (never the live one:
        # the drop refuses it), so the live index stays exactly as it was.
        wf.on_failure(
            "index_dropped",
            lambda: wf.activity(DROP_INDEX, DropRequest(collection=state.collection)),
        )
        if state.phase == "build":
            await self._build(state)
        for _ in range(MAX_ROUNDS):
            if not await self._catch_up(state) and not state.failed:
                break
        if state.failed:
            raise ApplicationError(
                f"{len(state.failed)} documents could not be rebuilt (first: "
                f"{', '.join(state.failed[:5])}); their child tasks say why. The live index is "
                "unchanged; fix or delete them and re-index again",
                type="DocumentsNotRebuilt",
                non_retryable=True,
            )
        wf.stage("switching")
        await wf.activity(
            SWITCH_LIVE_INDEX,
            SwitchRequest(collection=state.collection, model=state.model, chunking=self.chunking),
        )
        grace = timedelta(seconds=self.options.grace_seconds)
        settle = min(grace, SETTLE)
        for wait in (settle, grace - settle):
            wf.stage("grace period")
            if wait:
                await workflow.sleep(wait)
            await self._catch_up(state, switched=True)
            if self.chunking is not None:
                await self._adopt(state)
        wf.stage("dropping the previous index")
        await wf.activity(DROP_INDEX, DropRequest(collection=state.previous))
        return IndexingUpsertResult(
            documents=state.done,
            points=state.points,
            collection=state.collection,
            previous=state.previous,
            rebuilt_again=state.rebuilt_again,
            failed=state.failed,
        )

    async def _build(self, state: ReindexState) -> None:
        after = self.payload.after
        while True:
            page = await self.wf.activity(
                LIST_INDEXED_DOCUMENTS, ListDocumentsRequest(after=after, limit=PAGE)
            )
            if state.since is None:
                state.since = page.as_of
            self.wf.stage("rebuilding", total=page.total, done=state.done)
            await self._rebuild(state, page.document_ids, again=False)
            if len(page.document_ids) < PAGE:
                state.phase = "catch_up"
                return
            after = page.document_ids[-1]
            if workflow.info().is_continue_as_new_suggested():
                workflow.continue_as_new(
                    self.payload.model_copy(update={"after": after, "state": state})
                )

    async def _catch_up(self, state: ReindexState, *, switched: bool = False) -> int:
        """Rebuild what changed since the last listing (and what failed); how many."""
        assert state.since is not None
        since, failed, after, n = state.since - CLOCK_MARGIN, state.failed, "", 0
        state.failed = []
        target = RebuildTarget(collection=state.collection, tag=state.tag, chunking=self.chunking)
        while True:
            self.wf.stage("catching up")
            page = await self.wf.activity(
                LIST_CHANGED_DOCUMENTS,
                ChangedDocumentsRequest(
                    since=since,
                    target=target,
                    after=after,
                    failed=failed if not after else [],
                    skip_importing=switched,
                ),
            )
            if not after and page.as_of is not None:
                state.since = page.as_of
            await self._rebuild(state, page.document_ids, again=True)
            n += len(page.document_ids)
            if page.next_after is None:
                return n
            after = page.next_after

    async def _rebuild(self, state: ReindexState, ids: list[str], *, again: bool) -> None:
        """Rebuild `ids` as child tasks, `concurrency` at a time; failures are collected."""
        self.round += 1
        slots = asyncio.Semaphore(self.options.concurrency)
        target = RebuildTarget(
            collection=state.collection, tag=state.tag, chunking=self.chunking, first=not again
        )

        async def one(doc: str) -> None:
            async with slots:
                try:
                    out = await self.wf.child_task(
                        TaskType.INDEXING_UPSERT,
                        IndexingUpsertPayload(document_id=doc, model=state.model, rebuild=target),
                        IndexingUpsertResult,
                        suffix=f"{state.tag}-{workflow.info().run_id[:4]}{self.round}-{doc}",
                    )
                except ChildWorkflowError:
                    state.failed.append(doc)
                    return
                if again:
                    state.rebuilt_again += 1
                    return
                state.done += 1
                state.points += out.points
                self.wf.stage("rebuilding", done=state.done)

        await asyncio.gather(*(one(doc) for doc in ids))

    async def _adopt(self, state: ReindexState) -> None:
        after: str | None = ""
        while after is not None:
            out = await self.wf.activity(ADOPT_REBUILT, AdoptRequest(tag=state.tag, after=after))
            after = out.next_after


async def reindex(
    wf: TaskWorkflow[Any, Any], payload: IndexingUpsertPayload
) -> IndexingUpsertResult:
    return await _Reindex(wf, payload).run()
