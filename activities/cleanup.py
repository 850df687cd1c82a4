"""Activities of CLEANUP_EXECUTE: list what nothing needs any more, remove exactly that list.

"Needed" is what the document catalogue lists plus what any running or queued DOCUMENT_IMPORT
uses. The imports come from Temporal visibility (through the worker's client, which every async
activity has: `activity.client()`), not from the domain events: a queued import that no worker
has picked up yet has recorded no event, and its stored file must survive.

The removal re-checks every item with the same rules just before removing it, so an item that
became needed between listing and removal (a re-upload, a new import) is kept and reported as
skipped; everything else on the list is removed, and nothing that is not on it.

The listing and judging (and how the store's copies count) live in `knowledgeops.cleanup`;
this module adds the heartbeats, the removal's checkpoint and the live imports' client.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from temporalio import activity

from activities.support import Heartbeater, resume_from
from knowledgeops.cleanup.needed import NEEDED_FRESH_SECONDS, Needed, list_needed
from knowledgeops.cleanup.plan import read_plan, write_plan
from knowledgeops.cleanup.removal import pool_batch, remove_item, remove_pool_batch
from knowledgeops.cleanup.scans import find_items
from knowledgeops.contracts.cleanup import (
    FIND_ORPHANS,
    REMOVE_ORPHANS,
    CleanupPlan,
    FindOrphansRequest,
    FindOrphansResult,
    KindTotals,
    OrphanKind,
    RemoveCheckpoint,
    RemoveOrphansRequest,
    RemoveOrphansResult,
    totals,
)
from knowledgeops.contracts.document_import import DocumentImportPayload
from knowledgeops.documents.live_imports import live_import_inputs
from knowledgeops.runtime.resources import Resources


class CleanupActivities:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings

    # -- what is needed -------------------------------------------------------------------

    async def _needed(self, stored: bool = False) -> Needed:
        return await list_needed(self.resources, self._live_imports, stored)

    async def _live_imports(self) -> list[DocumentImportPayload]:
        """Inputs of this deployment's running (or queued) DOCUMENT_IMPORT tasks."""
        return await live_import_inputs(activity.client(), self.settings)

    # -- finding --------------------------------------------------------------------------

    @activity.defn(name=FIND_ORPHANS.name)
    async def find_orphans(self, req: FindOrphansRequest) -> FindOrphansResult:
        grace = timedelta(minutes=req.grace_minutes)
        async with Heartbeater():
            # Needed first: anything that starts after this is caught by the removal's re-check.
            needed = await self._needed(stored=OrphanKind.FILES in req.kinds)
            items = await find_items(self.resources, req.kinds, needed, grace)
            plan = CleanupPlan(
                task_id=req.task_id,
                created_at=datetime.now(UTC),
                dry_run=req.dry_run,
                grace_minutes=req.grace_minutes,
                items=items,
            )
            path = await write_plan(self.settings, plan)
        return FindOrphansResult(plan_path=str(path), items=len(items), found=totals(items))

    # -- removing -------------------------------------------------------------------------

    @activity.defn(name=REMOVE_ORPHANS.name)
    async def remove_orphans(self, req: RemoveOrphansRequest) -> RemoveOrphansResult:
        plan = await read_plan(self.settings, req.plan_path, req.items)
        cp = resume_from(
            RemoveCheckpoint(total=req.items),
            lambda c: c.total == req.items and c.done <= req.items,
        )
        hb = Heartbeater(cp.model_dump())
        grace = timedelta(minutes=plan.grace_minutes)
        # A stored file's age in the store comes from a listing, taken with each fresh view.
        listed = self.resources.files.shared and any(
            i.kind == OrphanKind.FILES for i in plan.items[cp.done :]
        )
        async with hb:
            needed, seen_at = await self._needed(listed), time.monotonic()
            while cp.done < len(plan.items):
                batch = pool_batch(self.settings, plan.items, cp.done)
                if batch:  # judged together, under the pool lock
                    outcomes = await remove_pool_batch(self.settings, batch)
                else:
                    batch = [plan.items[cp.done]]
                    if time.monotonic() - seen_at > NEEDED_FRESH_SECONDS:
                        # An import may have started since: judge each item on a fresh view.
                        needed, seen_at = await self._needed(listed), time.monotonic()
                    outcomes = [await remove_item(self.resources, batch[0], needed, grace)]
                for item, removed in zip(batch, outcomes, strict=True):
                    tally = cp.removed if removed else cp.skipped
                    tally.setdefault(item.kind.value, KindTotals()).add(item)
                cp.done += len(batch)
                hb.update(cp.model_dump())
        return RemoveOrphansResult(removed=cp.removed, skipped=cp.skipped)
