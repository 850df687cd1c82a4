"""The catalogue rows of a batch import's documents (DOCUMENT_BATCH_IMPORT), written by its
group activities directly, a group per transaction.

A document imported alone is listed by its import's events (catalogue.py, a projection);
a batch's documents have no task of their own, so the group that imports them lists them
(status `importing`, `last_task_id` = the batch's task id) and, when it publishes, moves their
live-version pointers and sets their status in one transaction. A row is the batch's while it
names the batch and is `importing`: a delete (`deleting`) or a later import of the document
(which relists it under its own task) takes it over, and the batch then leaves it alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from sqlalchemy import Table, bindparam, func, select, update

from knowledgeops.contracts.document_delete import DELETING
from knowledgeops.db.catalogue import DocumentRow
from knowledgeops.db.live_versions import LiveVersionRow
from knowledgeops.db.sql import now

if TYPE_CHECKING:
    from knowledgeops.db.database import Database

IMPORTING, READY, FAILED = "importing", "ready", "failed"
_TABLE = cast(Table, DocumentRow.__table__)


@dataclass(frozen=True)
class Listed:
    document_id: str
    filename: str
    file_id: str


@dataclass(frozen=True)
class Published:
    chunks: int
    title: str | None


class BatchCatalogue:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def list_documents(
        self,
        task_id: str,
        documents: Sequence[Listed],
        owner: str | None,
        tags: Sequence[str],
    ) -> set[str]:
        """List (or relist) the documents as `importing` by this batch, except those being
        deleted; returns the ids whose rows are this batch's now."""
        if not documents:
            return set()
        at = now()
        rows = [
            {
                "document_id": d.document_id,
                "filename": d.filename,
                "file_id": d.file_id,
                "tags": list(tags),
                "owner": owner,
                "status": IMPORTING,
                "last_task_id": task_id,
                "error": None,
                "indexed_chunks": 0,
                "created_at": at,
                "updated_at": at,
            }
            for d in documents
        ]
        stmt = self.db.insert(_TABLE).values(rows)
        relist = {
            c: getattr(stmt.excluded, c)
            for c in ("filename", "file_id", "tags", "owner", "status", "last_task_id", "error")
        } | {"updated_at": stmt.excluded.updated_at}
        async with self.db.write() as s:
            await s.execute(
                stmt.on_conflict_do_update(
                    index_elements=["document_id"], set_=relist, where=_TABLE.c.status != DELETING
                )
            )
        return await self.owned(task_id, [d.document_id for d in documents])

    async def owned(self, task_id: str, document_ids: Sequence[str]) -> set[str]:
        """Which of the documents' rows are still this batch's (`importing` under it)."""
        q = select(_TABLE.c.document_id).where(
            _TABLE.c.document_id.in_(sorted(set(document_ids))),
            _TABLE.c.last_task_id == task_id,
            _TABLE.c.status == IMPORTING,
        )
        async with self.db.sessions() as s:
            return set((await s.execute(q)).scalars())

    async def importing(self, task_id: str) -> list[str]:
        """Every document still `importing` under this batch."""
        q = select(_TABLE.c.document_id).where(
            _TABLE.c.last_task_id == task_id, _TABLE.c.status == IMPORTING
        )
        async with self.db.sessions() as s:
            return sorted((await s.execute(q)).scalars())

    async def live_versions(self, document_ids: Sequence[str]) -> dict[str, str]:
        """The published version of each document that has one (the pointer rows)."""
        q = select(LiveVersionRow.document_id, LiveVersionRow.version).where(
            LiveVersionRow.document_id.in_(sorted(set(document_ids)))
        )
        async with self.db.sessions() as s:
            return {d: v for d, v in (await s.execute(q)).all()}

    async def finish(
        self,
        task_id: str,
        version: str,
        published: Mapping[str, Published],
        failed: Mapping[str, str],
    ) -> set[str]:
        """In one transaction, for the documents still this batch's: the published ones'
        live-version pointers move to `version` and their rows say `ready` (with their chunk
        count; a title only where none is known); the failed ones' rows say `failed` with
        their reason. Returns the ids published (the others were taken over meanwhile)."""
        at = now()
        ids = sorted({*published, *failed})
        if not ids:
            return set()
        mine = select(_TABLE.c.document_id).where(
            _TABLE.c.document_id.in_(ids),
            _TABLE.c.last_task_id == task_id,
            _TABLE.c.status == IMPORTING,
        )
        row = _TABLE.c.document_id == bindparam("doc")
        async with self.db.write() as s:
            owned = set((await s.execute(mine.with_for_update())).scalars())
            ready = [d for d in published if d in owned]
            if ready:
                pointers = self.db.insert(LiveVersionRow).values(
                    [{"document_id": d, "version": version, "updated_at": at} for d in ready]
                )
                await s.execute(
                    pointers.on_conflict_do_update(
                        index_elements=["document_id"],
                        set_={"version": version, "updated_at": at},
                    )
                )
                await s.execute(
                    update(_TABLE)
                    .where(row)
                    .values(
                        status=READY,
                        error=None,
                        updated_at=at,
                        indexed_chunks=bindparam("chunks"),
                        title=func.coalesce(_TABLE.c.title, bindparam("new_title")),
                    )
                    .execution_options(synchronize_session=False),
                    [
                        {"doc": d, "chunks": published[d].chunks, "new_title": published[d].title}
                        for d in ready
                    ],
                )
            bad = [d for d in failed if d in owned]
            if bad:
                await s.execute(
                    update(_TABLE)
                    .where(row)
                    .values(status=FAILED, error=bindparam("reason"), updated_at=at)
                    .execution_options(synchronize_session=False),
                    [{"doc": d, "reason": failed[d]} for d in bad],
                )
        return set(ready)

    async def settle(
        self, task_id: str, document_ids: Sequence[str], status: str, error: str | None
    ) -> None:
        """A failed or cancelled batch's documents still `importing`: their rows say so."""
        if not document_ids:
            return
        async with self.db.write() as s:
            await s.execute(
                update(_TABLE)
                .where(
                    _TABLE.c.document_id.in_(sorted(set(document_ids))),
                    _TABLE.c.last_task_id == task_id,
                    _TABLE.c.status == IMPORTING,
                )
                .values(status=status, error=error, updated_at=now())
            )
