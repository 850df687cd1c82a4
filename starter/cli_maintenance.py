"""`knowledgeops backup` (starts BACKUP_EXECUTE like `run` does) and `knowledgeops restore
ARCHIVE` (runs here, in this process: no worker may run meanwhile; see knowledgeops/restore.py).
"""

from __future__ import annotations

import argparse
import sys

from knowledgeops.settings import Settings
from knowledgeops.task_types import TaskType
from starter.cli import actor, follow_and_report, task_service


async def command(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "backup":
        return await _backup(args, settings)
    return await _restore(args, settings)


async def _backup(args: argparse.Namespace, settings: Settings) -> int:
    async with task_service(settings) as service:
        ref = await service.enqueue(
            TaskType.BACKUP_EXECUTE, {"label": args.label}, requested_by=actor()
        )
        if not args.follow:
            print(ref.model_dump_json(indent=2) if args.json else ref.task_id)
            return 0
        code = await follow_and_report(service, [("backup", ref.task_id)], quiet=args.json)
        if code == 0 and not args.json:
            r = (await service.get_status(ref.task_id)).result or {}
            print(
                f"archive {r.get('archive')} ({r.get('path')}): database {r.get('database_kind')}, "
                f"{r.get('index_points')} index points, {r.get('stored_files')} stored files and "
                f"{r.get('chunk_files')} chunk files ({r.get('files_copied')} copied, "
                f"{r.get('files_present')} already in the pool), "
                f"{len(r.get('archives_removed') or [])} old archives removed"
            )
        return code


async def _restore(args: argparse.Namespace, settings: Settings) -> int:
    from knowledgeops.restore import restore_archive

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
