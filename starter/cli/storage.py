"""`knowledgeops storage upload`: copy an installation's data folder into STORAGE_URL's store,
once, when it starts sharing its files between machines (knowledgeops/backup/storage_upload.py).
Run it with STORAGE_URL set, from the machine whose data folder holds the files."""

from __future__ import annotations

import argparse
from typing import Any

from knowledgeops.config.settings import Settings
from starter.cli.common import add_command, exit_codes


def add_parser(sub: Any) -> None:
    st = add_command(sub, "storage", "STORAGE_URL: copy this data folder's files into it")
    st_sub = st.add_subparsers(
        dest="storage_command", required=True, metavar="ACTION", help="one of:"
    )
    up = add_command(
        st_sub,
        "upload",
        "copy stored files, chunks, OCR pages, outputs and reports into STORAGE_URL "
        "(what it holds at the same size is skipped)",
        epilog=exit_codes((1, "STORAGE_URL is not set or cannot be reached")),
    )
    up.add_argument("--dry-run", action="store_true", help="say what would be copied")


async def command(args: argparse.Namespace, settings: Settings) -> int:
    from knowledgeops.backup.storage_upload import upload_data_folder
    from knowledgeops.db.database import open_prepared
    from knowledgeops.db.live_versions import LiveVersions
    from knowledgeops.files.data_files import check_storage, open_storage

    await check_storage(settings)
    files = open_storage(settings)[1]
    db = await open_prepared(settings)
    try:
        print(f"copying {settings.data_dir} into {files.describe()}", flush=True)
        report = await upload_data_folder(
            files, LiveVersions(db, settings.chunks_dir), dry_run=args.dry_run
        )
    finally:
        await db.close()
    verb = "would copy" if args.dry_run else "copied"
    print(
        f"{verb} {report.copied} files ({report.copied_bytes} bytes); {report.present} were "
        f"there already; {report.pointers} live-version pointer files "
        f"{'would move' if args.dry_run else 'moved'} into the database"
    )
    for line in report.skipped:
        print(f"skipped {line}")
    return 0
