"""Opening the index the settings name: the embedded engine (with its background builder) by
default, a Qdrant server with QDRANT_URL; and moving an earlier version's embedded index in."""

from __future__ import annotations

import logging
from collections.abc import Callable

from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database
from knowledgeops.index import legacy
from knowledgeops.index.fusion import Fusion, FusionConfig
from knowledgeops.index.vector_index import VectorIndex

log = logging.getLogger(__name__)


class IndexMigrationNeededError(RuntimeError):
    pass


def open_index(settings: Settings, *, build: bool = True) -> VectorIndex:
    """`build`: run the embedded engine's background index builder (a process that serves
    searches; a short-lived CLI does not need one)."""
    fusion = FusionConfig(Fusion(settings.search_fusion), settings.search_keyword_weight)
    if settings.qdrant_url:
        from knowledgeops.index.server import ServerEngine

        engine = ServerEngine(settings.qdrant_url, settings.qdrant_api_key)
        return VectorIndex(engine, fusion=fusion, threads=8)
    if legacy.pending(settings.legacy_index_path):
        raise IndexMigrationNeededError(
            f"{settings.legacy_index_path} holds an index made by an earlier version; the "
            "worker (`knowledgeops dev` / `knowledgeops worker`) moves it into the new engine "
            "when it starts, or run `knowledgeops index migrate`"
        )
    from knowledgeops.index.edge import EdgeEngine
    from knowledgeops.index.edge_builder import Builder
    from knowledgeops.index.edge_mapping import BuildSettings

    build_settings = BuildSettings(
        points=settings.index_build_points, idle_seconds=settings.index_idle_seconds
    )
    if settings.index_process:
        from knowledgeops.index.engine_client import EngineClient

        # The child runs the builder beside the engine it builds for.
        client = EngineClient(settings.index_path, build_settings, builder=build)
        return VectorIndex(client, fusion=fusion)
    edge = EdgeEngine(settings.index_path, build_settings)
    index = VectorIndex(edge, fusion=fusion)
    if build:
        builder = Builder(edge)
        builder.start()
        index.on_close(builder.stop)
    return index


async def open_index_migrating(
    settings: Settings, db: Database, say: Callable[[str], None] = log.info
) -> VectorIndex:
    """`open_index`, first moving an earlier version's embedded index in if there is one."""
    if not settings.qdrant_url and legacy.pending(settings.legacy_index_path):
        await migrate_legacy(settings, db, say)
    return open_index(settings)


async def migrate_legacy(
    settings: Settings, db: Database, say: Callable[[str], None] = log.info
) -> legacy.MigrationReport:
    from knowledgeops.index.edge import EdgeEngine

    say(f"moving the index in {settings.legacy_index_path} into {settings.index_path} ...")
    index = VectorIndex(EdgeEngine(settings.index_path))
    try:
        report = await legacy.migrate(index, settings.legacy_index_path, db, say)
    finally:
        index.close()
    say(
        f"index migrated: {report.collections} collections, {report.points} points, "
        f"{report.aliases} aliases; the old folder is now "
        f"{settings.legacy_index_path.name}{legacy.MIGRATED_SUFFIX}"
    )
    return report
