"""The child process of a background build (edge_builder.py): it indexes a copy of one
partition's shard, or splits a copy into new shards and indexes those, then exits. Apart from
the worker because Edge's `optimize()` holds the interpreter lock for as long as it runs.

    python -m knowledgeops.index.edge_build_process SPEC COPY [SPLIT_INTO ...]
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Sequence
from uuid import UUID

from qdrant_edge import EdgeShard, Point, Record, ScrollRequest, UpdateOperation

from knowledgeops.index.edge_collection import route, route_key
from knowledgeops.index.edge_mapping import BuildSettings, shard_config
from knowledgeops.index.engine import Kind
from knowledgeops.index.mapped_pages import GATE

# Points read (scrolled, or retrieved to replay) and written at a time.
READ_BATCH = 1_000


def upsert_routed(records: Sequence[Record], shards: Sequence[EdgeShard]) -> None:
    """Write points read back from a shard into `shards` as writes route them (one shard: all
    into it)."""
    batches: dict[int, list[Point]] = {}
    for r in records:
        if r.vector is None:
            continue
        number = route(route_key(r.id, r.payload), len(shards))
        batches.setdefault(number, []).append(Point(r.id, r.vector, r.payload))
    for number, points in batches.items():
        with GATE.sharing():
            shards[number].update(UpdateOperation.upsert_points(points))


def optimize(spec: str, folder: str, split_into: Sequence[str]) -> None:
    """The child: index the copy (or split it into the empty shards `split_into` and index
    those), then leave them closed and flushed for the parent to load. `spec`: the
    collection's dimension and the engine's BuildSettings, as JSON."""
    from knowledgeops.process_guard import die_with_parent

    die_with_parent()
    with contextlib.suppress(OSError):
        os.nice(10)
    if not split_into:
        shard = _with_current_settings(folder, spec)
        shard.optimize()
        shard.flush()
        shard.close()
        return
    shard = EdgeShard.load(folder)
    parts = [EdgeShard.load(f) for f in split_into]
    offset: int | UUID | str | None = None
    while True:
        request = ScrollRequest(
            offset=offset, limit=READ_BATCH, with_payload=True, with_vector=True
        )
        records, offset = shard.scroll(request)
        upsert_routed(records, parts)
        if offset is None:
            break
    shard.close()
    for part in parts:
        part.optimize()
        part.flush()
        part.close()


def _with_current_settings(folder: str, spec: str) -> EdgeShard:
    """A shard keeps the optimizer settings it was made with: loaded with today's, one made by
    an earlier version builds as cheaply as a new one (BuildSettings.segments). One whose
    vectors were laid out otherwise (before quantization) cannot take them: it builds as it
    is, and says so (the parent logs it)."""
    fields = json.loads(spec)
    dimension = int(fields.pop("dimension"))
    config = shard_config(Kind.CHUNKS, dimension, BuildSettings(**fields))
    try:
        return EdgeShard.load(folder, config)
    except Exception as exc:  # Edge raises a plain Exception for a config it cannot take
        print(f"built with the settings it was made with ({exc})", file=sys.stderr)
        return EdgeShard.load(folder)


if __name__ == "__main__":
    optimize(sys.argv[1], sys.argv[2], sys.argv[3:])
