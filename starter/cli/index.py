"""`knowledgeops index migrate`: move an index made by an earlier version (qdrant-client's
local mode under `data/qdrant`) into the embedded engine. The worker does this by itself when
it starts; this command does it with no worker running (and says what it moved)."""

from __future__ import annotations

import argparse
from typing import Any

from knowledgeops.config.settings import Settings
from starter.cli.common import add_command


def add_parser(sub: Any) -> None:
    ix = add_command(sub, "index", "the embedded index: move an earlier version's in")
    ix_sub = ix.add_subparsers(
        dest="index_command", required=True, metavar="ACTION", help="one of:"
    )
    add_command(ix_sub, "migrate", "move data/qdrant (an earlier version's index) in")


async def command(args: argparse.Namespace, settings: Settings) -> int:
    from knowledgeops.db.database import open_prepared
    from knowledgeops.index import legacy
    from knowledgeops.index.opening import migrate_legacy

    if settings.qdrant_url:
        print("QDRANT_URL is set: the index is that server's; nothing to migrate here")
        return 0
    if not legacy.pending(settings.legacy_index_path):
        print(f"nothing to migrate: {settings.legacy_index_path} holds no earlier index")
        return 0
    db = await open_prepared(settings)
    try:
        await migrate_legacy(settings, db, print)
    finally:
        await db.close()
    return 0
