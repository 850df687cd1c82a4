"""Activities of a re-index (INDEXING_UPSERT with `reindex`): choose the new collection,
prepare each document's rebuild, list what changed meanwhile, switch the live index, make
re-chunked files the live ones, and drop the previous collection after the grace period."""

from __future__ import annotations

import hashlib

from temporalio import activity

from activities.support import Heartbeater
from knowledgeops.contracts.indexing import (
    ADOPT_REBUILT,
    DROP_INDEX,
    LIST_CHANGED_DOCUMENTS,
    PREPARE_REBUILD,
    PREPARE_REINDEX,
    SWITCH_LIVE_INDEX,
    AdoptRequest,
    AdoptResult,
    ChangedDocumentsRequest,
    DocumentPage,
    DropRequest,
    DropResult,
    PrepareRebuildRequest,
    PrepareRebuildResult,
    PrepareReindexRequest,
    PrepareReindexResult,
    RebuildTarget,
    SwitchRequest,
    SwitchResult,
)
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.db.sql import now
from knowledgeops.errors import bad_input
from knowledgeops.files import chunk_store
from knowledgeops.index.live import LiveIndex, switch_live
from knowledgeops.index.points import INDEX_PREFIX
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.runtime.resources import Resources


def rebuilt_version(tag: str, source: str | None) -> str:
    """The version a re-index writes when it splits a document again: one per (re-index,
    source version), so a rebuild that runs twice writes the same files and points."""
    digest = hashlib.sha256((source or "").encode()).hexdigest()[:16]
    return f"r{tag}{digest}"


class ReindexActivities:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings
        self.catalogue = DocumentCatalogue(resources.db)

    @activity.defn(name=PREPARE_REINDEX.name)
    async def prepare_reindex(self, req: PrepareReindexRequest) -> PrepareReindexResult:
        live = await self.resources.live_index()
        model = req.model or live.model
        try:
            self.resources.embedder_for(model)
        except ValueError as e:
            raise bad_input("UnknownModel", str(e)) from None
        return PrepareReindexResult(
            model=model,
            collection=VectorIndex.collection_name(model, req.tag),
            previous=live.collection,
        )

    @activity.defn(name=PREPARE_REBUILD.name)
    async def prepare_rebuild(self, req: PrepareRebuildRequest) -> PrepareRebuildResult:
        doc, files = req.document_id, self.resources.files
        source = await self.resources.live_versions.get(doc)
        row = await self.catalogue.get(doc)
        if row is None or (source and not await files.has_version(doc, source)):
            raise bad_input(
                "DocumentGone",
                f"document {doc} has no stored chunks any more (deleted meanwhile); "
                "nothing to rebuild",
            )
        # Split again when asked, and a document stored before versions existed (from its
        # stored file).
        if req.target.chunking is None and source is not None:
            return PrepareRebuildResult(source=source, version=source, rechunk=False)
        version = rebuilt_version(req.target.tag, source)
        return PrepareRebuildResult(
            source=source or "",
            version=version,
            # Split by an earlier run of this rebuild already: the chunk step is skipped.
            rechunk=not await files.has_version(doc, version),
            file_id=row.file_id,
            filename=row.filename,
            owner=row.owner,
        )

    @activity.defn(name=LIST_CHANGED_DOCUMENTS.name)
    async def list_changed_documents(self, req: ChangedDocumentsRequest) -> DocumentPage:
        as_of = now()
        ids = listed = await self.catalogue.changed_since(req.since, req.after, req.limit)
        if not req.after and req.failed:
            # Failed rebuilds again, unless the document is gone (deleted meanwhile).
            still = await self.catalogue.by_id(set(req.failed))
            ids = sorted(set(ids) | set(still))
        if req.skip_importing and ids:
            rows = await self.catalogue.by_id(set(ids))
            ids = [d for d in ids if d in rows and rows[d].status != "importing"]
        async with Heartbeater():
            stale = [doc for doc in ids if not await self._up_to_date(doc, req.target)]
        # The next page starts after the last id looked at (not the last one listed).
        next_after = listed[-1] if len(listed) == req.limit else None
        return DocumentPage(
            document_ids=stale, total=len(stale), as_of=as_of, next_after=next_after
        )

    async def _up_to_date(self, doc: str, target: RebuildTarget) -> bool:
        """The document's live version is in the target collection: rebuilt there, or
        published there by an import (after the switch)."""
        source = await self.resources.live_versions.get(doc)
        if source is None:
            return False
        versions = {source, rebuilt_version(target.tag, source)}
        return await self.resources.store.has_version(target.collection, doc, versions)

    @activity.defn(name=SWITCH_LIVE_INDEX.name)
    async def switch_live_index(self, req: SwitchRequest) -> SwitchResult:
        store = self.resources.store
        before = (await self.resources.live_index()).collection
        dimension = 0
        if req.collection not in await store.collections():
            # Nothing was rebuilt (an empty corpus): the new collection needs its vector size.
            embedder = self.resources.embedder_for(req.model)
            dimension = len((await embedder.embed(["dimension"]))[0])
        async with Heartbeater():
            await switch_live(store, LiveIndex(req.collection, req.model, req.chunking), dimension)
            await self.resources.share_live_index()
        activity.logger.info("live index switched from %s to %s", before, req.collection)
        return SwitchResult(before=before)

    @activity.defn(name=ADOPT_REBUILT.name)
    async def adopt_rebuilt(self, req: AdoptRequest) -> AdoptResult:
        """Make each document's re-chunked files its live ones (now that search answers from
        the re-index's collection), and record its new chunk count."""
        files = self.resources.files
        versions = self.resources.live_versions
        ids, _ = await self.catalogue.indexed_ids(req.after, req.limit)
        adopted = 0
        async with Heartbeater():
            for doc in ids:
                source = await versions.get(doc)
                version = rebuilt_version(req.tag, source)
                if source == version:
                    continue
                # The count, from the size of its offset index (nothing to download); None:
                # not rebuilt (or removed meanwhile), nothing to adopt.
                index_size = await files.size(files.version_paths(doc, version)[1])
                if index_size is None:
                    continue
                await versions.put(doc, version)
                await files.remove_other_versions(doc, version, source, previous_only=True)
                await self.catalogue.set_indexed_chunks(doc, chunk_store.chunk_count(index_size))
                adopted += 1
        return AdoptResult(adopted=adopted, next_after=ids[-1] if len(ids) == req.limit else None)

    @activity.defn(name=DROP_INDEX.name)
    async def drop_index(self, req: DropRequest) -> DropResult:
        live = await self.resources.live_index()
        if req.collection == live.collection or not req.collection.startswith(INDEX_PREFIX):
            # Never the live index (a later re-index may have switched back to it).
            return DropResult(dropped=False)
        return DropResult(dropped=await self.resources.store.drop_collection(req.collection))
