"""The reference of bench.import_at_scale: the points the system imported, written again into a
fresh index alone, in the upsert step's batches, so the ratio says what the pipeline costs
beside the engine's own writes."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import UpsertRequest
from knowledgeops.index.live import live_index
from knowledgeops.index.opening import open_index
from knowledgeops.index.points import StoredPoint, point_id
from knowledgeops.models.embedding import model_id_for

# The upsert step's batch (UPSERT_CHUNKS is started with the request's default).
UPSERT_BATCH: int = UpsertRequest.model_fields["batch_size"].default


@dataclass
class Reference:
    collection: str
    in_collection: int  # the live collection's points, as the worker left it
    written: int
    seconds: float  # in the fresh index's upsert calls only
    fresh_count: int


async def engine_reference(
    settings: Settings, fresh_dir: Path, documents: list[tuple[str, str | None, int]]
) -> Reference:
    """Every point of the live collection, read back one upsert batch at a time (a document's
    consecutive chunks, by their ids) and written into a fresh index: only the writes timed."""
    # No builder on the source: it would index what the worker left unindexed, on the cores
    # the timed writes need. The fresh index has one, as the worker's has.
    # The engine in this process, whatever the worker ran (INDEX_PROCESS).
    settings = settings.model_copy(update={"index_process": False})
    source = open_index(settings, build=False)
    fresh = open_index(settings.model_copy(update={"data_dir": fresh_dir}))
    try:
        collection = (await live_index(source, model_id_for(settings))).collection
        dimension = (await source.vector_params(collection))[0]
        in_collection = await source.count(collection)
        written, seconds = 0, 0.0
        for doc, version, total in documents:
            for start in range(0, total, UPSERT_BATCH):
                ids = [
                    point_id(doc, i, version)
                    for i in range(start, min(total, start + UPSERT_BATCH))
                ]
                records = source.engine.retrieve(collection, ids, payload=True, dense=True)
                if len(records) != len(ids):
                    raise RuntimeError(f"{doc}: {len(records)} of {len(ids)} points found")
                points = []
                for r in records:
                    if r.dense is None:
                        raise RuntimeError(f"point {r.id} of {collection} has no vector")
                    points.append(StoredPoint(r.id, r.dense, r.payload))
                points.sort(key=lambda p: int(p.payload["chunk_index"]))
                t = time.perf_counter()
                await fresh.import_points(collection, dimension, points)
                seconds += time.perf_counter() - t
                written += len(points)
        return Reference(collection, in_collection, written, seconds, await fresh.count(collection))
    finally:
        source.close()
        fresh.close()
