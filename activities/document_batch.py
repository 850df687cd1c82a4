"""Activities of DOCUMENT_BATCH_IMPORT: import a group of documents, settle a batch that
failed or was cancelled. The work itself is in knowledgeops/documents/batch_import.py."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

from temporalio import activity

from activities.support import Heartbeater
from knowledgeops.contracts.document_batch import (
    IMPORT_GROUP,
    SETTLE_BATCH,
    GroupCheckpoint,
    ImportGroupRequest,
    ImportGroupResult,
    SettleBatchRequest,
    SettleBatchResult,
)
from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.db.batch_catalogue import BatchCatalogue
from knowledgeops.documents.batch_import import GroupContext, discard_versions, import_group
from knowledgeops.documents.batch_manifest import ManifestMissingError, read_manifest
from knowledgeops.errors import bad_input
from knowledgeops.index.live import index_collections
from knowledgeops.runtime.resources import Resources

log = logging.getLogger("knowledgeops.batch")


def _durations(began: dict[str, float]) -> str:
    """`stage 0.12 s, ...`: how long each stage of a group took."""
    marks = sorted(began.items(), key=lambda kv: kv[1])
    return ", ".join(
        f"{stage} {end - start:.2f} s" for (stage, start), (_, end) in itertools.pairwise(marks)
    )


class BatchImportActivities:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings
        self.catalogue = BatchCatalogue(resources.db)
        # The batch's parser: one group parses at a time in this worker (see GroupContext).
        self._parser = asyncio.Semaphore(1)

    @activity.defn(name=IMPORT_GROUP.name)
    async def import_document_group(self, req: ImportGroupRequest) -> ImportGroupResult:
        r = self.resources
        # The live index's model and collection, chosen once for the group's embed, upsert
        # and publish (vectors and collection always match), and its chunking.
        live = await r.live_index()
        try:
            embedder = r.embedder_for(live.model)
        except ValueError as e:
            raise bad_input("UnknownModel", str(e)) from None
        chunking = (
            req.chunking
            or live.chunking
            or ChunkingOptions(
                chunk_tokens=self.settings.chunk_tokens,
                overlap_tokens=self.settings.chunk_overlap,
            )
        )
        hb = Heartbeater(self._checkpoint(req, "starting", 0).model_dump())
        # When each stage began: the log line an operator (or a benchmark) reads per group.
        began: dict[str, float] = {"starting": time.perf_counter()}

        def report(stage: str, done: int) -> None:
            began.setdefault(stage, time.perf_counter())
            hb.update(self._checkpoint(req, stage, done).model_dump())

        ctx = GroupContext(
            self.settings,
            r.store,
            r.files,
            self.catalogue,
            embedder,
            live.collection,
            chunking,
            self._parser,
            report,
        )
        async with hb:
            try:
                entries = await read_manifest(r.files, req.manifest_id, req.start, req.end)
            except ManifestMissingError as e:
                raise bad_input("ManifestMissing", str(e)) from None
            result = await import_group(ctx, req, entries)
            if (await r.live_index()).collection != live.collection:
                # A re-index switched the live index during the group: again, into the new
                # one (what it already has costs nothing: cache, chunk files, same point ids).
                raise RuntimeError(
                    "the live index changed while the group was imported; the group is retried"
                )
        began["done"] = time.perf_counter()
        log.info(
            "group %s-%s of %s: %d imported, %d failed, %d deferred; %s",
            req.start,
            req.end,
            req.task_id,
            result.imported,
            len(result.failures),
            len(result.deferred),
            _durations(began),
        )
        return result

    @staticmethod
    def _checkpoint(req: ImportGroupRequest, stage: str, done: int) -> GroupCheckpoint:
        return GroupCheckpoint(done=req.counted_before + done, total=req.batch_total, stage=stage)

    @activity.defn(name=SETTLE_BATCH.name)
    async def settle_document_batch(self, req: SettleBatchRequest) -> SettleBatchResult:
        """The batch's documents still importing (a group stopped midway, a bigger file's
        import that never started): their unpublished versions go, their rows say how the
        batch ended. Idempotent."""
        r = self.resources
        async with Heartbeater():
            documents = await self.catalogue.importing(req.task_id)
            await discard_versions(
                r.store,
                r.files,
                await index_collections(r.store),
                req.version,
                documents,
                self.catalogue.live_versions,
            )
            await self.catalogue.settle(req.task_id, documents, req.status, req.error)
        return SettleBatchResult(documents=len(documents))
