"""`knowledgeops db upgrade` / `db current`: the application database's schema. With a database
server (DATABASE_URL) the API and the workers do not migrate it when they start, they check it
(knowledgeops/db/migrations.py): `db upgrade` is the one job that migrates it, run once per
deployment before the new version's processes start (the compose stack's `migrate` service)."""

from __future__ import annotations

import argparse
from typing import Any

from knowledgeops.config.settings import Settings
from starter.cli.common import add_command, exit_codes


def add_parser(sub: Any) -> None:
    d = add_command(sub, "db", "the application database's schema: migrate it, show its revision")
    d_sub = d.add_subparsers(dest="db_command", required=True, metavar="ACTION", help="one of:")
    add_command(
        d_sub,
        "upgrade",
        "apply this version's migrations up to its head; prints the revision before and after",
        epilog=exit_codes(
            (
                1,
                "the database cannot be reached, its revision is not one of this version's (a "
                "newer version migrated it; nothing is applied), or a migration failed",
            )
        ),
    )
    add_command(
        d_sub,
        "current",
        "print the schema's revision and whether it is this version's head",
        epilog=exit_codes(
            (0, "the schema is at this version's head"),
            (
                1,
                "not at the head: behind it, an empty database, or a revision this version "
                "does not know; or the database cannot be reached. With a database server "
                "(DATABASE_URL), `api` and `worker` refuse to start then (exit 1, one line on "
                "stderr) until `knowledgeops db upgrade` has run",
            ),
        ),
    )


async def command(args: argparse.Namespace, settings: Settings) -> int:
    from sqlalchemy.engine import make_url

    from knowledgeops.db.migrations import (
        UPGRADE_COMMAND,
        migrate_to_head,
        migrates_itself,
        read_revision,
    )

    url = settings.resolved_database_url
    print(f"database: {make_url(url).render_as_string(hide_password=True)}")
    before = await read_revision(url)
    if args.db_command == "current":
        print(f"current:  {before.describe()}")
        if before.known and not before.at_head:
            print(f"run `{UPGRADE_COMMAND}` to migrate it")
        return 0 if before.at_head else 1
    if not before.known:
        # Alembic would fail on it anyway, with a message that does not say why.
        raise RuntimeError(f"the schema is at {before.describe()}; nothing was applied")
    print(f"before:   {before.describe()}", flush=True)
    if migrates_itself(url):
        settings.data_dir.mkdir(parents=True, exist_ok=True)  # the default SQLite file's folder
    await migrate_to_head(url)
    print(f"after:    {(await read_revision(url)).describe()}")
    return 0
