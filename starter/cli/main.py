"""`knowledgeops` command line: run the system; start, follow and cancel tasks; documents and
search (starter/cli/documents.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowledgeops.config.loading import load_settings
from knowledgeops.config.settings import Settings
from knowledgeops.config.values import SettingsError
from knowledgeops.registry.task_types import TaskType, spec_for
from starter.cli.common import actor, follow_and_report, print_status, task_service

if TYPE_CHECKING:
    from starter.services.document_models import ImportRef
    from starter.services.tasks import TaskQueueService


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="knowledgeops", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("dev", help="Temporal dev server + worker + API, all in one (Ctrl-C stops)")
    sub.add_parser("server", help="only the Temporal dev server, configured as `dev` does")
    sub.add_parser("api", help="only the HTTP API (needs QDRANT_URL or a free local index)")
    w = sub.add_parser("worker", help="a worker against TEMPORAL_ADDRESS")
    w.add_argument("--no-api", action="store_true", help="do not serve the HTTP API")
    w.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="NAME",
        help="run this pool of work (repeatable; default WORKER_POOLS, else all): parse, "
        "ingest, ai, maintenance",
    )

    i = sub.add_parser("import", help="store files and start one import per file")
    i.add_argument("paths", nargs="+", type=Path)
    i.add_argument("--follow", action="store_true", help="show progress until all finish")
    i.add_argument("--json", action="store_true")
    i.add_argument("--document-id", help="document id (default: derived from the content)")
    i.add_argument("--title")
    i.add_argument("--tags", default="", help="comma-separated")
    i.add_argument("--owner")

    from starter.cli import index as cli_index
    from starter.cli import ocr as cli_ocr
    from starter.cli import storage as cli_storage

    cli_ocr.add_parser(sub)
    cli_index.add_parser(sub)
    cli_storage.add_parser(sub)

    r = sub.add_parser("run", help="start a task of any type")
    r.add_argument("task_type", choices=[t.value for t in TaskType], metavar="TYPE")
    r.add_argument("--payload", default="{}", help="JSON, or @file with JSON")
    r.add_argument("--idempotency-key")
    r.add_argument("--follow", action="store_true", help="show progress until it finishes")
    r.add_argument("--json", action="store_true")

    s = sub.add_parser("status", help="status and progress of a task")
    s.add_argument("task_id")
    s.add_argument("--json", action="store_true")

    c = sub.add_parser("cancel", help="cancel a task (an import's partial index entries go)")
    c.add_argument("task_id")
    c.add_argument("--reason", default="", help="recorded in the audit log")

    m = sub.add_parser("message", help="send a follow-up message to an agent task, print the reply")
    m.add_argument("task_id")
    m.add_argument("text")
    m.add_argument("--json", action="store_true")

    d = sub.add_parser("documents", help="list, show or delete documents")
    dsub = d.add_subparsers(dest="action", required=True)
    dl = dsub.add_parser("list", help="the catalogue, newest first")
    dl.add_argument("--owner")
    dl.add_argument("--limit", type=int, default=50)
    dl.add_argument("--json", action="store_true")
    ds = dsub.add_parser("show", help="one document with its last import")
    ds.add_argument("document_id")
    ds.add_argument("--chunks", action="store_true", help="also its indexed chunks, in order")
    ds.add_argument("--offset", type=int, default=0, help="first chunk shown (with --chunks)")
    ds.add_argument("--limit", type=int, default=50, help="chunks shown, 1-500 (with --chunks)")
    ds.add_argument("--json", action="store_true")
    dd = dsub.add_parser("delete", help="out of search now; a task removes points, chunks, file")
    dd.add_argument("document_id")
    dd.add_argument("--reason", default="", help="recorded in the audit log")
    dd.add_argument("--follow", action="store_true", help="show progress until it finishes")

    sc = sub.add_parser("schedules", help="the maintenance schedules (backup, cleanup, report)")
    scsub = sc.add_subparsers(dest="action", required=True)
    scl = scsub.add_parser("list", help="each schedule: cron, paused, next and recent runs")
    scl.add_argument("--json", action="store_true")
    for action, text in (
        ("pause", "stop starting runs until unpaused"),
        ("unpause", "start runs again"),
        ("trigger", "start a run now"),
    ):
        a = scsub.add_parser(action, help=text)
        a.add_argument("task_type", metavar="TYPE", help="e.g. BACKUP_EXECUTE")
        a.add_argument("--reason", default="", help="recorded in the audit log")

    b = sub.add_parser("backup", help="start a backup (BACKUP_EXECUTE) of database, index, files")
    b.add_argument("--label", help="recorded in the archive's manifest")
    b.add_argument("--follow", action="store_true", help="show progress until it finishes")
    b.add_argument("--json", action="store_true")
    b.add_argument(
        "--export",
        metavar="ARCHIVE",
        help="start no backup: write this archive (name or folder) as one self-contained "
        "file, restorable alone (see --to)",
    )
    b.add_argument("--to", metavar="FILE", help="with --export: the file (default ARCHIVE.tar)")
    rs = sub.add_parser("restore", help="restore a backup archive (stop the worker first)")
    rs.add_argument(
        "archive",
        help="archive name under the backups folder (or at BACKUP_URL), its folder, or an "
        "export: a .tar file or its s3:// / file:// URL",
    )
    rs.add_argument("--force", action="store_true", help="replace existing data")
    rs.add_argument("--json", action="store_true")

    ri = sub.add_parser(
        "reindex",
        help="rebuild every document into a new index (a new model / chunk size) and switch "
        "search to it with no downtime (INDEXING_UPSERT with reindex)",
    )
    ri.add_argument("--model", help="embedding model id, e.g. openai:text-embedding-3-small")
    ri.add_argument("--chunk-tokens", type=int, help="split every document again")
    ri.add_argument("--concurrency", type=int, default=4, help="documents rebuilt at once")
    ri.add_argument(
        "--grace-seconds", type=int, default=3600, help="keep the previous index this long"
    )
    ri.add_argument("--reason", default="", help="recorded in the audit log")
    ri.add_argument("--follow", action="store_true", help="show progress until it finishes")
    ri.add_argument("--json", action="store_true")

    cd = sub.add_parser("cards", help="a document's review cards and their FSRS state")
    cd.add_argument("document_id")
    cd.add_argument("--limit", type=int, default=100)
    cd.add_argument("--offset", type=int, default=0)
    cd.add_argument("--json", action="store_true")

    q = sub.add_parser("search", help="search imported documents (hybrid, dense or keyword)")
    q.add_argument("query")
    q.add_argument("-k", type=int, default=5)
    q.add_argument("--document-id")
    q.add_argument(
        "--mode",
        choices=["hybrid", "dense", "keyword"],
        default="hybrid",
        help="hybrid (default): meaning and exact words; dense: meaning; keyword: BM25",
    )
    q.add_argument("--json", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    code = run(argv)
    # Exit without interpreter finalisation: the Temporal client's native runtime can crash
    # during teardown (temporalio/sdk-python#300), turning a success into exit 134/139.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        if args.command in ("dev", "server", "worker", "api"):
            from starter import processes  # heavy (models, index): only for long-running ones

        if args.command == "dev":
            return processes.run_dev(settings)
        if args.command == "server":
            return processes.run_server(settings)
        if args.command == "api":
            return processes.run_api(settings)
        if args.command == "worker":
            extra = ["--no-api"] if args.no_api else []
            return processes.run_worker(settings, *extra, *(f"--pool={p}" for p in args.pool))
        return asyncio.run(_client_command(args, settings))
    except KeyboardInterrupt:
        return 130
    except (ConnectionError, LookupError, ValueError, RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


async def _client_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.command in ("backup", "restore", "reindex"):
        from starter.cli import maintenance as cli_maintenance

        return await cli_maintenance.command(args, settings)
    if args.command == "index":
        from starter.cli import index as cli_index

        return await cli_index.command(args, settings)
    if args.command == "storage":
        from starter.cli import storage as cli_storage

        return await cli_storage.command(args, settings)
    if args.command == "cards":
        from starter.cli import cards as cli_cards

        return await cli_cards.command(args, settings)
    if args.command in ("import", "documents", "search"):
        from starter.cli import documents as cli_documents

        return await cli_documents.command(args, settings)
    async with task_service(settings) as service:
        if args.command == "run":
            return await _run_task(service, args)
        if args.command == "ocr":
            from starter.cli import ocr as cli_ocr

            return await cli_ocr.command(service, args, settings)
        if args.command == "schedules":
            return await _schedules(service, args)
        if args.command == "status":
            st = await service.get_status(args.task_id)
            if args.json:
                print(st.model_dump_json(indent=2))
            else:
                print_status(st)
            return 0
        if args.command == "cancel":
            await service.cancel(args.task_id, reason=args.reason, actor=actor())
            print(f"cancel requested for {args.task_id}")
            return 0
        if args.command == "message":
            from starter.services.agent import cli_message

            return await cli_message(service, args.task_id, args.text, args.json)
    raise AssertionError(args.command)


async def _run_task(service: TaskQueueService, args: argparse.Namespace) -> int:
    text = args.payload
    if text.startswith("@"):
        text = await asyncio.to_thread(Path(text[1:]).read_text)
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--payload is not valid JSON: {e}") from None
    if args.task_type == TaskType.DOCUMENT_IMPORT.value:
        ref: Any = await _import_by_payload(service, payload, args.idempotency_key)
    else:
        ref = await service.enqueue(
            args.task_type, payload, idempotency_key=args.idempotency_key, requested_by=actor()
        )
    if not args.follow:
        print(ref.model_dump_json(indent=2) if args.json else ref.task_id)
        return 0
    return await follow_and_report(service, [(args.task_type, ref.task_id)], quiet=args.json)


async def _schedules(service: TaskQueueService, args: argparse.Namespace) -> int:
    from knowledgeops.runtime import schedules

    client, settings = service.client, service.settings
    if args.action == "list":
        found = await schedules.list_schedules(client, settings)
        if args.json:
            print(json.dumps([s.model_dump() for s in found], indent=2))
            return 0
        for s in found:
            state = "paused" if s.paused else "active"
            print(f"{s.schedule_id}  {s.task_type:<16} {' '.join(s.cron):<14} {state}")
            print(f"    next: {', '.join(s.next_runs) or '-'}")
        if not found:
            print("no schedules (they are created when a worker starts)")
        return 0
    action = {"pause": schedules.pause, "unpause": schedules.unpause}.get(args.action)
    sid = schedules.schedule_id(settings, spec_for(args.task_type.upper()).task_type)
    try:
        if action is not None:
            await action(client, settings, args.task_type, args.reason or f"{args.action} by CLI")
        else:
            await schedules.trigger(client, settings, args.task_type)
    except Exception as e:
        await service.audit(
            actor(), f"schedule_{args.action}", [sid], args.reason, "refused", {"error": str(e)}
        )
        raise
    await service.audit(actor(), f"schedule_{args.action}", [sid], args.reason, "done")
    print(f"{args.action}: {args.task_type}")
    return 0


async def _import_by_payload(service: TaskQueueService, raw: Any, key: str | None) -> ImportRef:
    """A DOCUMENT_IMPORT goes through the document path (its one task id, admission), as
    `POST /v1/tasks` does: two imports of one document must never race."""
    from pydantic import ValidationError

    from knowledgeops.contracts.document_import import DocumentImportPayload
    from knowledgeops.errors import validation_text
    from starter.services.documents import DocumentService

    try:
        payload = DocumentImportPayload.model_validate(raw)
    except ValidationError as e:
        problems = validation_text(e.errors())
        raise ValueError(f"Invalid DOCUMENT_IMPORT payload: {problems}") from None
    assert service.db is not None  # task_service opens it
    documents = DocumentService(service, service.db, service.settings)
    await documents.admit_stored(payload.file_id)
    return await documents.import_stored(
        payload.file_id,
        filename=payload.filename,
        document_id=payload.document_id,
        metadata=payload.metadata,
        idempotency_key=key,
        requested_by=actor(),
        chunking=payload.chunking,
        embed_batch_size=payload.embed_batch_size,
    )


if __name__ == "__main__":
    main()
