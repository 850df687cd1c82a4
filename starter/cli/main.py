"""`knowledgeops` command line: the parser and the dispatch. The system's processes (dev, server,
api, worker) and import / documents / search (run by starter/cli/documents.py) are parsed here;
the other command families build their parsers in their modules (add_parser): tasks.py,
maintenance.py, ocr.py, index.py, storage.py, cards.py, db.py. `--help` documents the exit codes."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from knowledgeops.config.loading import load_settings
from knowledgeops.config.settings import Settings
from knowledgeops.config.values import SettingsError
from knowledgeops.registry.task_types import Pool
from starter.cli.common import (
    EPILOG_WIDTH,
    FOLLOW_CODE,
    add_command,
    epilog_section,
    exit_codes,
    task_service,
)

DESCRIPTION = textwrap.fill(
    "Run knowledgeops (the Temporal dev server, workers, the HTTP API); start, follow and "
    "cancel tasks; import, show, delete and search documents; backups, schedules, re-index.",
    EPILOG_WIDTH,
)
# What run() and the commands return (`--follow`: follow_and_report); argparse exits 2 itself.
EXIT_CODES = epilog_section(
    "exit codes",
    [
        (0, "success; dev, server and api once running: stopped by Ctrl-C or SIGTERM"),
        (
            1,
            'an error, printed as "error: ..." on stderr: Temporal, the database or the API '
            "cannot be reached; not found (an unknown task, document or archive); an invalid "
            "or refused request (e.g. --payload that is not JSON, a task that has finished); "
            "or a task followed with --follow that did not complete (failed, cancelled, "
            "terminated, timed out). An unexpected error prints a traceback and exits 1 too",
        ),
        (
            2,
            "invalid command line (a usage error), or an invalid setting (environment or "
            ".env; the message names each)",
        ),
        (130, "interrupted by Ctrl-C (a command other than dev, server and api)"),
    ],
) + ("\n\n`knowledgeops COMMAND --help`: the arguments of COMMAND and the exit codes it adds.")


# starter/http/access.py check_exposure: refused before anything starts.
OPEN_API = "API_HOST is not a loopback address while API_TOKENS is empty"


def _version() -> str:
    try:
        return importlib.metadata.version("knowledgeops")
    except importlib.metadata.PackageNotFoundError:
        # The installed distribution is the one source of the version; no pyproject guessing.
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from starter.cli import cards as cli_cards
    from starter.cli import db as cli_db
    from starter.cli import index as cli_index
    from starter.cli import maintenance as cli_maintenance
    from starter.cli import ocr as cli_ocr
    from starter.cli import storage as cli_storage
    from starter.cli import tasks as cli_tasks

    p = argparse.ArgumentParser(
        prog="knowledgeops",
        description=DESCRIPTION,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {_version()}",
        help="print `knowledgeops VERSION` (the installed version) and exit",
    )
    sub = p.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do, one of:"
    )
    _add_processes(sub)
    _add_import(sub)
    cli_ocr.add_parser(sub)
    cli_index.add_parser(sub)
    cli_storage.add_parser(sub)
    cli_tasks.add_parser(sub)
    _add_documents(sub)
    cli_tasks.add_schedules(sub)
    cli_maintenance.add_parser(sub)
    cli_db.add_parser(sub)
    cli_cards.add_parser(sub)
    _add_search(sub)
    return p


def _add_processes(sub: Any) -> None:
    stopped = (0, "stopped by Ctrl-C or SIGTERM")
    add_command(
        sub,
        "dev",
        "Temporal dev server + worker + API, all in one (Ctrl-C stops)",
        epilog=exit_codes(
            stopped,
            (
                1,
                "a port it needs is taken, the worker process exited or did not serve the "
                "API in time, or the Temporal dev server kept dying (it is restarted a few "
                f"times first); {OPEN_API}",
            ),
        ),
    )
    add_command(
        sub,
        "server",
        "only the Temporal dev server, configured as `dev` does",
        epilog=exit_codes(stopped, (1, "the Temporal dev server kept dying")),
    )
    add_command(
        sub,
        "api",
        "only the HTTP API (needs QDRANT_URL or a free local index)",
        epilog=exit_codes(
            stopped,
            (
                1,
                "it could not start (e.g. Temporal unreachable), or a part of it stopped; "
                + OPEN_API,
            ),
        ),
    )
    w = add_command(
        sub,
        "worker",
        "a worker against TEMPORAL_ADDRESS",
        epilog=exit_codes(
            (0, "stopped by SIGTERM, which is passed on to the worker process to drain"),
            (1, f"it stopped on an error (e.g. Temporal unreachable); {OPEN_API}"),
            (2, "an invalid setting or --pool"),
            (130, "Ctrl-C"),
            (
                137,
                "after SIGTERM or Ctrl-C the worker process outlasted its grace period "
                "(WORKER_SHUTDOWN_GRACE_SECONDS and a margin) and was killed",
            ),
        ),
    )
    w.add_argument("--no-api", action="store_true", help="do not serve the HTTP API")
    w.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="NAME",
        help="run this pool of work (repeatable; default WORKER_POOLS, else all): "
        + ", ".join(pool.value for pool in Pool),
    )


def _add_import(sub: Any) -> None:
    i = add_command(
        sub,
        "import",
        "store files and start one import per file (a folder: one batch task)",
        epilog=exit_codes(
            (
                1,
                "a PATH is neither a file nor a folder, or --document-id with several PATHs "
                "or a folder, or --title with a folder (nothing is imported); the API refused "
                "a file (the others are imported); with --follow: an import did not complete "
                "(a folder's: a document failed, or the batch did not complete)",
            )
        ),
    )
    i.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="a file to import (one document each), or a folder: every file in it and its "
        "subfolders (hidden ones skipped), one document each, imported as ONE batch task "
        "(with the files named too)",
    )
    i.add_argument(
        "--follow",
        action="store_true",
        help="show progress until all finish (a folder: one line, N of M documents)",
    )
    i.add_argument(
        "--json",
        action="store_true",
        help="print JSON: the imports started (with --follow: their final statuses)",
    )
    i.add_argument(
        "--document-id", help="document id, with one PATH only (default: derived from the content)"
    )
    i.add_argument("--title", help="the document's title (default: none; its file name shows)")
    i.add_argument("--tags", default="", help="comma-separated tags, e.g. a,b (default: none)")
    i.add_argument("--owner", help="the document's owner (default: none)")


def _add_documents(sub: Any) -> None:
    d = add_command(sub, "documents", "list, show or delete documents")
    dsub = d.add_subparsers(dest="action", required=True, metavar="ACTION", help="one of:")
    dl = add_command(dsub, "list", "the catalogue, newest first")
    dl.add_argument("--owner", help="only this owner's documents (default: everyone's)")
    dl.add_argument(
        "--limit", type=int, default=50, help="documents listed at most (default: %(default)s)"
    )
    dl.add_argument("--json", action="store_true", help="print the page as JSON")
    ds = add_command(
        dsub,
        "show",
        "one document with its last import",
        epilog=exit_codes((1, "no such document; --chunks: the chunks cannot be shown")),
    )
    ds.add_argument("document_id", help="the document's id")
    ds.add_argument("--chunks", action="store_true", help="also its indexed chunks, in order")
    ds.add_argument(
        "--offset", type=int, default=0, help="first chunk shown (with --chunks; default: 0)"
    )
    ds.add_argument(
        "--limit", type=int, default=50, help="chunks shown, 1-500 (with --chunks; default: 50)"
    )
    ds.add_argument(
        "--json", action="store_true", help="print JSON (with --chunks: {document, chunks})"
    )
    dd = add_command(
        dsub,
        "delete",
        "out of search now; a task removes points, chunks, file",
        epilog=exit_codes((1, "no such document"), FOLLOW_CODE),
    )
    dd.add_argument("document_id", help="the document's id")
    dd.add_argument("--reason", default="", help="recorded in the audit log (default: none)")
    dd.add_argument("--follow", action="store_true", help="show progress until it finishes")


def _add_search(sub: Any) -> None:
    q = add_command(sub, "search", "search imported documents (hybrid, dense or keyword)")
    q.add_argument("query", help="what to search for (quote it if it has spaces)")
    q.add_argument("-k", type=int, default=5, help="hits returned (default: %(default)s)")
    q.add_argument("--document-id", help="search only this document (default: all)")
    q.add_argument(
        "--mode",
        choices=["hybrid", "dense", "keyword"],
        default="hybrid",
        help="hybrid (default): meaning and exact words; dense: meaning; keyword: BM25",
    )
    q.add_argument("--json", action="store_true", help="print the hits as JSON")


def main(argv: Sequence[str] | None = None) -> None:
    code = run(argv)
    # Exit without interpreter finalisation: the Temporal client's native runtime can crash
    # during teardown (temporalio/sdk-python#300), turning a success into exit 134/139.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as e:
        print("\n".join(f"error: {line}" for line in str(e).splitlines()), file=sys.stderr)
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
    if args.command == "db":
        from starter.cli import db as cli_db

        return await cli_db.command(args, settings)
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
        if args.command == "ocr":
            from starter.cli import ocr as cli_ocr

            return await cli_ocr.command(service, args, settings)
        from starter.cli import tasks as cli_tasks

        return await cli_tasks.command(service, args)


if __name__ == "__main__":
    main()
