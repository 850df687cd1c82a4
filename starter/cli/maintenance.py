"""`knowledgeops backup` (starts BACKUP_EXECUTE like `run` does; `--export` writes an archive as
one file, here), `knowledgeops restore ARCHIVE` (runs here, in this process: no worker may run
meanwhile; see knowledgeops/backup/restore.py) and `knowledgeops reindex` (starts a re-index:
starter/services/reindex.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowledgeops.config.settings import Settings
from knowledgeops.registry.task_types import TaskType
from starter.cli.common import (
    FOLLOW_CODE,
    actor,
    add_command,
    exit_codes,
    follow_and_report,
    task_service,
)

if TYPE_CHECKING:
    from starter.services.tasks import TaskQueueService


def add_parser(sub: Any) -> None:
    b = add_command(
        sub,
        "backup",
        "start a backup (BACKUP_EXECUTE) of database, index, files",
        epilog=exit_codes((1, "--export: no such archive, or it cannot be written"), FOLLOW_CODE),
    )
    b.add_argument("--label", help="recorded in the archive's manifest (default: none)")
    b.add_argument("--follow", action="store_true", help="show progress until it finishes")
    b.add_argument(
        "--json",
        action="store_true",
        help="print JSON: the task started (with --follow: its final status)",
    )
    b.add_argument(
        "--export",
        metavar="ARCHIVE",
        help="start no backup: write this archive (name or folder) as one self-contained "
        "file, restorable alone (see --to)",
    )
    b.add_argument("--to", metavar="FILE", help="with --export: the file (default ARCHIVE.tar)")
    rs = add_command(
        sub,
        "restore",
        "restore a backup archive (stop the worker first)",
        epilog=exit_codes(
            (1, "no such archive, an invalid one, or data already there without --force")
        ),
    )
    rs.add_argument(
        "archive",
        help="archive name under the backups folder (or at BACKUP_URL), its folder, or an "
        "export: a .tar file or its s3:// / file:// URL",
    )
    rs.add_argument("--force", action="store_true", help="replace existing data")
    rs.add_argument("--json", action="store_true", help="print what was restored as JSON")

    ri = add_command(
        sub,
        "reindex",
        "rebuild every document into a new index (a new model / chunk size) and switch "
        "search to it with no downtime (INDEXING_UPSERT with reindex)",
        epilog=exit_codes(
            (2, "an invalid option value (the message names it); nothing is started"),
            FOLLOW_CODE,
        ),
    )
    ri.add_argument(
        "--model",
        help="embedding model id, e.g. openai:text-embedding-3-small (default: the live index's)",
    )
    ri.add_argument(
        "--chunk-tokens",
        type=int,
        metavar="N",
        help="split every document again into chunks of N tokens (default: keep the chunks)",
    )
    ri.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="documents rebuilt at once (default: %(default)s)",
    )
    ri.add_argument(
        "--grace-seconds",
        type=int,
        default=3600,
        help="keep the previous index this long (default: %(default)s)",
    )
    ri.add_argument("--reason", default="", help="recorded in the audit log (default: none)")
    ri.add_argument("--follow", action="store_true", help="show progress until it finishes")
    ri.add_argument(
        "--json",
        action="store_true",
        help="print JSON: the task started (with --follow: its final status)",
    )


async def command(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "backup":
        return await _backup(args, settings)
    if args.command == "reindex":
        return await _reindex(args, settings)
    return await _restore(args, settings)


async def _reindex(args: argparse.Namespace, settings: Settings) -> int:
    from pydantic import ValidationError

    from knowledgeops.contracts.indexing import IndexingUpsertPayload, ReindexOptions
    from starter.services.reindex import start_reindex

    try:
        options = ReindexOptions(
            chunk_tokens=args.chunk_tokens,
            concurrency=args.concurrency,
            grace_seconds=args.grace_seconds,
        )
        IndexingUpsertPayload(model=args.model, reindex=options)
    except ValidationError as e:
        print(f"error: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}", file=sys.stderr)
        return 2
    async with task_service(settings) as service:
        ref = await start_reindex(
            service, options, model=args.model, actor=actor(), reason=args.reason
        )
        return await _report(
            service,
            args,
            "reindex",
            ref,
            lambda r: (
                f"search now answers from {r.get('collection')}: {r.get('documents')} documents, "
                f"{r.get('points')} points ({r.get('rebuilt_again')} rebuilt again after "
                f"imports meanwhile); {r.get('previous')} was dropped"
            ),
        )


async def _report(
    service: TaskQueueService,
    args: argparse.Namespace,
    label: str,
    ref: Any,
    summary: Callable[[dict[str, Any]], str],
) -> int:
    """Print the task id, or (--follow) progress until it ends and then `summary(result)`."""
    if not args.follow:
        print(ref.model_dump_json(indent=2) if args.json else ref.task_id)
        return 0
    code = await follow_and_report(service, [(label, ref.task_id)], quiet=args.json)
    if code == 0 and not args.json:
        print(summary((await service.get_status(ref.task_id)).result or {}))
    return code


async def _backup(args: argparse.Namespace, settings: Settings) -> int:
    if args.export:
        return await _export(args.export, args.to, settings)
    async with task_service(settings) as service:
        ref = await service.enqueue(
            TaskType.BACKUP_EXECUTE, {"label": args.label}, requested_by=actor()
        )
        return await _report(
            service,
            args,
            "backup",
            ref,
            lambda r: (
                f"archive {r.get('archive')} ({r.get('path')}): database {r.get('database_kind')}, "
                f"{r.get('index_points')} index points, {r.get('stored_files')} stored files and "
                f"{r.get('chunk_files')} chunk files ({r.get('files_copied')} copied, "
                f"{r.get('files_present')} already in the pool), "
                f"{len(r.get('archives_removed') or [])} old archives removed"
            ),
        )


async def _export(name: str, to: str | None, settings: Settings) -> int:
    from knowledgeops.backup.archive import resolve_archive
    from knowledgeops.backup.export import export_key, write_export

    archive = resolve_archive(settings, name)
    out = Path(to or export_key(archive.name))
    size = await asyncio.to_thread(write_export, archive, out, lambda _: None)
    print(f"{out}: {archive.name} with its stored and chunk files, {size} bytes")
    return 0


async def _restore(args: argparse.Namespace, settings: Settings) -> int:
    from knowledgeops.backup.restore import restore_archive

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    report = await restore_archive(settings, args.archive, force=args.force, say=say)
    if args.json:
        print(report.model_dump_json(indent=2))
        return 0
    print(
        f"restored {report.archive}: {report.database} database with {report.documents} "
        f"documents, {report.points} index points in {report.collections} collections, "
        f"{report.stored_files} stored files, {report.chunk_files} chunk files "
        f"({report.files_bytes} bytes); no embeddings were computed"
    )
    return 0
