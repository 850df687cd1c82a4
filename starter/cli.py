"""`knowledgeops` command line: run the system, import, follow, cancel and search."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from knowledgeops.models import DocumentMetadata
from knowledgeops.settings import Settings, SettingsError, load_settings


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="knowledgeops", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("dev", help="Temporal dev server + worker + API, all in one (Ctrl-C stops)")
    sub.add_parser("server", help="only the Temporal dev server, configured as `dev` does")
    sub.add_parser("api", help="only the HTTP API (needs QDRANT_URL or a free local index)")
    w = sub.add_parser("worker", help="a worker against TEMPORAL_ADDRESS")
    w.add_argument("--no-api", action="store_true", help="do not serve the search API")

    i = sub.add_parser("import", help="store files and start one import per file")
    i.add_argument("paths", nargs="+", type=Path)
    i.add_argument("--follow", action="store_true", help="show progress until all finish")
    i.add_argument("--json", action="store_true")
    i.add_argument("--document-id", help="document id (default: derived from the content)")
    i.add_argument("--title")
    i.add_argument("--tags", default="", help="comma-separated")
    i.add_argument("--owner")

    s = sub.add_parser("status", help="status and progress of a job")
    s.add_argument("job_id")
    s.add_argument("--json", action="store_true")

    c = sub.add_parser("cancel", help="cancel a job (its partial index entries are removed)")
    c.add_argument("job_id")
    c.add_argument("--reason", default="", help="recorded in the audit log")

    q = sub.add_parser("search", help="semantic search over imported documents")
    q.add_argument("query")
    q.add_argument("-k", type=int, default=5)
    q.add_argument("--document-id")
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
            from starter import node  # heavy (models, index): only for long-running commands

        if args.command == "dev":
            return node.run_dev(settings)
        if args.command == "server":
            return node.run_server(settings)
        if args.command == "api":
            return node.run_api(settings)
        if args.command == "worker":
            return node.run_standalone_worker(settings, serve_api=False if args.no_api else None)
        return asyncio.run(_client_command(args, settings))
    except KeyboardInterrupt:
        return 130
    except (ConnectionError, LookupError, ValueError, RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


async def _client_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "search":
        return await _search(args, settings)
    from activities.database import Database
    from knowledgeops.temporal import connect
    from starter.service import TaskQueueService

    client = await connect(settings)
    # The database holds the document catalogue and the audit log (a CLI cancel is audited).
    db = await Database.open(settings)
    try:
        return await _service_command(TaskQueueService(client, settings, db), args)
    finally:
        await db.close()


async def _service_command(service: Any, args: argparse.Namespace) -> int:
    if args.command == "import":
        return await _import(service, args)
    if args.command == "status":
        st = await service.get_status(args.job_id)
        if args.json:
            print(st.model_dump_json(indent=2))
        else:
            _print_status(st)
        return 0
    if args.command == "cancel":
        actor = f"cli:{os.environ.get('USER', 'unknown')}"
        await service.cancel(args.job_id, reason=args.reason, actor=actor)
        print(f"cancel requested for {args.job_id}")
        return 0
    raise AssertionError(args.command)


async def _import(service: Any, args: argparse.Namespace) -> int:
    missing = [str(p) for p in args.paths if not p.is_file()]
    if missing:
        print(f"error: not a file: {', '.join(missing)}", file=sys.stderr)
        return 1
    if args.document_id and len(args.paths) > 1:
        print("error: --document-id needs exactly one file", file=sys.stderr)
        return 1
    meta = DocumentMetadata(
        title=args.title,
        tags=[t.strip() for t in args.tags.split(",") if t.strip()],
        owner=args.owner,
    )
    refs = []
    for path in args.paths:
        ref = await service.import_file(path, document_id=args.document_id, metadata=meta)
        refs.append((path, ref))
        if not args.json:
            print(f"{ref.job_id}  {path}")
    if not args.follow:
        if args.json:
            print(json.dumps([r.model_dump(mode="json") for _, r in refs], indent=2))
        return 0
    from starter.progress import follow

    statuses = await follow(service, [(str(p), r.job_id) for p, r in refs], quiet=args.json)
    if args.json:
        print(json.dumps([s.model_dump(mode="json") for s in statuses], indent=2))
    return 0 if all(s.status == "completed" for s in statuses) else 1


def _print_status(st: Any) -> None:
    p = st.progress
    done = f"{p.done}/{p.total}" if p.total is not None else "-"
    print(f"job:      {st.job_id}  ({st.task_type})")
    print(f"status:   {st.status}   stage: {p.stage}   chunks: {done}")
    if p.eta_seconds is not None:
        print(f"eta:      {p.eta_seconds:.0f}s")
    if st.attempts > 1:
        print(f"attempts: {st.attempts}")
    if st.last_error:
        print(f"error:    {st.last_error}")
    if st.result:
        print(f"result:   {json.dumps(st.result, ensure_ascii=False)}")


async def _search(args: argparse.Namespace, settings: Settings) -> int:
    from starter.search import SearchHit

    hits = [SearchHit.model_validate(h) for h in await _search_hits(args, settings)]
    if args.json:
        print(json.dumps([h.model_dump() for h in hits], ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no results")
    for n, h in enumerate(hits, 1):
        where = ", ".join(x for x in (f"page {h.page}" if h.page else "", h.heading or "") if x)
        name = h.title or h.filename or h.document_id
        print(f"{n}. [{h.score:.3f}] {name}{f' ({where})' if where else ''}  <{h.document_id}>")
        snippet = " ".join(h.text.split())
        print(f"   {snippet[:300]}{'...' if len(snippet) > 300 else ''}")
    return 0


async def _search_hits(args: argparse.Namespace, settings: Settings) -> list[Any]:
    """Through the API of the process that owns the index; directly if we can open it."""
    import httpx

    if not settings.qdrant_url:
        params: dict[str, Any] = {"q": args.query, "k": args.k}
        if args.document_id:
            params["document_id"] = args.document_id
        try:
            async with httpx.AsyncClient(timeout=60) as http:
                r = await http.get(f"{settings.resolved_api_url}/v1/search", params=params)
        except httpx.ConnectError:
            pass  # nobody serves the index: open it ourselves below
        else:
            if r.status_code != 200:
                raise RuntimeError(f"search failed ({r.status_code}): {r.text}")
            hits: list[Any] = r.json()
            return hits
    from activities.database import Database
    from activities.embedding import make_embedder
    from activities.vector_store import VectorStore
    from starter.search import search

    store = VectorStore.open(settings)
    db = await Database.open(settings)
    embedder = make_embedder(settings)
    try:
        found = await search(store, embedder, args.query, args.k, args.document_id, db)
        return [h.model_dump() for h in found]
    finally:
        store.close()
        await embedder.aclose()
        await db.close()


if __name__ == "__main__":
    main()
