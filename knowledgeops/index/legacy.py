"""Moving an index of an earlier version (qdrant-client's local mode, `data/qdrant`) into the
embedded engine, once.

Local mode kept each collection as SQLite rows of pickled points and a `meta.json` naming the
collections (with their metadata) and aliases. This reads those files directly, with no local
mode involved, writes every point into the new index as a backup restore would (dense vector
and payload as they were, the BM25 vector made from the text), copies metadata and aliases,
sets each document's owner and tags on its points from the catalogue, and then renames the old
folder to `qdrant.migrated`, which is what marks the migration done. Interrupted, it runs again
from the start on the next attempt: point ids are kept, so a second pass overwrites.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.db.database import Database
from knowledgeops.index.points import INDEX_PREFIX, StoredPoint
from knowledgeops.index.vector_index import VectorIndex

BATCH = 512
MIGRATED_SUFFIX = ".migrated"


class IndexMigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class MigrationReport:
    collections: int
    points: int
    aliases: int


def pending(legacy: Path) -> bool:
    """Whether `legacy` holds a local-mode index not migrated yet."""
    return (legacy / "meta.json").is_file()


def _meta(legacy: Path) -> dict[str, Any]:
    return dict(json.loads((legacy / "meta.json").read_text()))


def _points(legacy: Path, name: str) -> Iterator[StoredPoint]:
    db = legacy / "collection" / name / "storage.sqlite"
    if not db.exists():
        return
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        seen: set[str] = set()
        # The highest rowid is a point's latest write (older versions kept stale copies).
        for (value,) in conn.execute("SELECT point FROM points ORDER BY rowid DESC"):
            # Our own data folder's files, written by our own process: trusted input.
            point = pickle.loads(value)
            pid = str(point.id)
            if pid in seen:
                continue
            seen.add(pid)
            vector = point.vector
            if isinstance(vector, dict):
                vector = vector.get("")
            if not isinstance(vector, list):
                raise IndexMigrationError(f"point {pid} of {name} has no single dense vector")
            yield StoredPoint(pid, [float(x) for x in vector], dict(point.payload or {}))
    finally:
        conn.close()


def _all_points(legacy: Path, name: str) -> list[StoredPoint]:
    return list(_points(legacy, name))


async def migrate(
    index: VectorIndex,
    legacy: Path,
    db: Database,
    say: Callable[[str], None] = lambda _: None,
) -> MigrationReport:
    meta = await asyncio.to_thread(_meta, legacy)
    collections: dict[str, Any] = meta.get("collections") or {}
    total = 0
    for name, config in sorted(collections.items()):
        vectors = config.get("vectors") or {}
        if "size" not in vectors:
            raise IndexMigrationError(f"collection {name} in {legacy} has no single dense vector")
        dimension = int(vectors["size"])
        await index.ensure(name, dimension)
        batch: list[StoredPoint] = []
        n = 0
        # Local mode held every point in memory anyway: an index it could serve fits here.
        for point in await asyncio.to_thread(_all_points, legacy, name):
            batch.append(point)
            if len(batch) >= BATCH:
                await index.import_points(name, dimension, batch)
                n, batch = n + len(batch), []
        if batch:
            await index.import_points(name, dimension, batch)
            n += len(batch)
        if config.get("metadata"):
            await index.set_metadata(name, dict(config["metadata"]))
        if name.startswith(INDEX_PREFIX):
            await sync_document_fields(index, name, db)
        say(f"migrated {n} points of {name}")
        total += n
    aliases: dict[str, str] = meta.get("aliases") or {}
    for alias, target in aliases.items():
        await index.set_alias(alias, target)
    await asyncio.to_thread(legacy.rename, legacy.with_name(legacy.name + MIGRATED_SUFFIX))
    return MigrationReport(collections=len(collections), points=total, aliases=len(aliases))


async def sync_document_fields(index: VectorIndex, collection: str, db: Database) -> int:
    """Owner and tags from the catalogue onto every listed document's points (points written
    before they carried them: a migrated index, an older backup's). Documents updated."""
    catalogue = DocumentCatalogue(db)
    after, n = "", 0
    while True:
        rows = await catalogue.fields_after(after)
        if not rows:
            return n
        for document_id, owner, tags in rows:
            await index.set_document_fields(collection, document_id, owner, tags)
        after, n = rows[-1][0], n + len(rows)
