"""`knowledgeops import | documents list|show|delete | search`: the document service from the
command line.

With the embedded index (no QDRANT_URL) only one process can open it: the running worker. So
what needs the index (search, show, delete) goes through that process's HTTP API when one
answers, and opens the index here only when nobody holds it. With QDRANT_URL, always here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentMetadata
from starter.cli.common import (
    actor,
    follow_and_report,
    print_status,
    problem_detail,
    task_follower,
    task_service,
)
from starter.cli.upload import UploadRefusedError, api_answers, upload_files
from starter.services.document_chunks import ChunkPage, check_page
from starter.services.document_models import DeleteAccepted, DocumentDetail, ImportRef
from starter.services.documents import DocumentService
from starter.services.search import SearchHit

_NOBODY = object()  # no process serves the API: open the index here


async def command(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "search":
        return await _search(args, settings)
    if args.command == "import":
        return await _import(args, settings)
    return await _documents(args, settings)


@asynccontextmanager
async def _document_service(
    settings: Settings, *, with_index: bool
) -> AsyncIterator[DocumentService]:
    from knowledgeops.index.opening import open_index

    store = open_index(settings, build=False) if with_index else None
    try:
        async with task_service(settings) as service:
            assert service.db is not None  # task_service opens it
            yield DocumentService(service, service.db, settings, store)
    finally:
        if store is not None:
            store.close()


async def _via_api(settings: Settings, method: str, path: str, **params: Any) -> Any:
    """The answer of the process that owns the embedded index, or _NOBODY."""
    if settings.qdrant_url:
        return _NOBODY
    query = {k: v for k, v in params.items() if v is not None}
    # X-Requested-With: what the API asks of state changes while it runs without tokens.
    headers = {"X-Requested-With": "knowledgeops-cli"}
    if token := settings.client_api_token():
        headers["Authorization"] = f"Bearer {token}"
    try:
        async with httpx.AsyncClient(timeout=180, headers=headers) as http:
            r = await http.request(method, f"{settings.resolved_api_url}{path}", params=query)
    except httpx.ConnectError:
        return _NOBODY
    if r.status_code >= 400:
        raise RuntimeError(f"{problem_detail(r)} (HTTP {r.status_code})")
    return r.json()


async def _import(args: argparse.Namespace, settings: Settings) -> int:
    missing = [str(p) for p in args.paths if not (p.is_file() or p.is_dir())]
    if missing:
        print(f"error: not a file or folder: {', '.join(missing)}", file=sys.stderr)
        return 1
    folders = any(p.is_dir() for p in args.paths)
    if args.document_id and (len(args.paths) > 1 or folders):
        print("error: --document-id needs exactly one file", file=sys.stderr)
        return 1
    if args.title and folders:
        print(
            "error: --title names one document; a folder's are named by their files",
            file=sys.stderr,
        )
        return 1
    meta = DocumentMetadata(
        title=args.title,
        tags=[t.strip() for t in args.tags.split(",") if t.strip()],
        owner=args.owner,
    )
    if folders:
        # A folder is one batch task: its documents in groups, one progress line.
        from starter.cli import folder_import

        named = await asyncio.to_thread(folder_import.collect, args.paths)
        return await folder_import.run(args, settings, named, meta)
    if await api_answers(settings):
        return await _import_through_api(args, settings, meta)
    # Nobody serves the API: store the files here, where the workers must see them too.
    print(
        f"note: no API answers at {settings.resolved_api_url}; storing the files in "
        + (
            f"{settings.files_dir} and {settings.storage_url}, which every worker reads"
            if settings.storage_url
            else f"{settings.files_dir}, which every worker must share"
        ),
        file=sys.stderr,
    )
    async with _document_service(settings, with_index=False) as documents:
        refs = []
        for path in args.paths:
            ref = await documents.import_file(path, document_id=args.document_id, metadata=meta)
            refs.append((path, ref))
            if not args.json:
                print(f"{ref.task_id}  {path}")
        if not args.follow:
            if args.json:
                print(json.dumps([r.model_dump(mode="json") for _, r in refs], indent=2))
            return 0
        tasks = [(str(p), r.task_id) for p, r in refs]
        return await follow_and_report(documents.tasks, tasks, quiet=args.json)


async def _import_through_api(
    args: argparse.Namespace, settings: Settings, meta: DocumentMetadata
) -> int:
    def accepted(path: Path, ref: ImportRef) -> None:
        if not args.json:
            print(f"{ref.task_id}  {path}", flush=True)

    results = await upload_files(
        settings, args.paths, metadata=meta, document_id=args.document_id, on_accepted=accepted
    )
    refs = [(p, r) for p, r in results if isinstance(r, ImportRef)]
    refused = [r for _, r in results if isinstance(r, UploadRefusedError)]
    for e in refused:
        print(f"error: {e}", file=sys.stderr)
    code = 1 if refused else 0
    if not args.follow:
        if args.json:
            print(json.dumps([r.model_dump(mode="json") for _, r in refs], indent=2))
        return code
    async with task_follower(settings) as service:
        followed = await follow_and_report(
            service, [(str(p), r.task_id) for p, r in refs], quiet=args.json
        )
    return code or followed


async def _documents(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "list":
        async with _document_service(settings, with_index=False) as documents:
            page = await documents.list(limit=args.limit, owner=args.owner)
        if args.json:
            print(page.model_dump_json(indent=2))
            return 0
        for d in page.items:
            name = d.title or d.filename
            print(f"{d.document_id}  {d.status:<9} {d.indexed_chunks:>6} chunks  {name}")
        print(f"{len(page.items)} of {page.total} documents")
        return 0
    path = f"/v1/documents/{args.document_id}"
    if args.action == "show":
        raw = await _via_api(settings, "GET", path)
        if raw is _NOBODY:
            async with _document_service(settings, with_index=True) as documents:
                detail = await documents.get(args.document_id)
        else:
            detail = DocumentDetail.model_validate(raw)
        chunks, problem = await _chunk_page(args, settings) if args.chunks else (None, None)
        if args.json:
            if problem is not None:
                print(f"error: {problem}", file=sys.stderr)
                return 1
            if chunks is None:
                print(detail.model_dump_json(indent=2))
            else:  # both, one JSON document
                both = {"document": detail.model_dump(mode="json"), "chunks": chunks.model_dump()}
                print(json.dumps(both, ensure_ascii=False, indent=2))
            return 0
        print(f"document: {detail.document_id}  {detail.title or detail.filename}")
        print(
            f"catalogue: {detail.status}, {detail.indexed_chunks} chunks indexed, "
            f"{detail.points_in_index} points in the index"
        )
        if detail.task is not None:
            print_status(detail.task)
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr)
            return 1
        if chunks is not None:
            _print_chunks(chunks)
        return 0
    reason = args.reason
    # Through the API the audit names the API token's caller (API_TOKEN), not this user.
    raw = await _via_api(settings, "DELETE", path, reason=reason)
    if raw is _NOBODY:
        async with _document_service(settings, with_index=True) as documents:
            accepted = await documents.delete(args.document_id, reason=reason, actor=actor())
    else:
        accepted = DeleteAccepted.model_validate(raw)
    print(f"deleting {accepted.document_id}: it is out of search; task {accepted.task_id}")
    if not args.follow:
        return 0
    async with task_service(settings) as service:
        code = await follow_and_report(service, [("delete", accepted.task_id)], quiet=False)
        result = (await service.get_status(accepted.task_id)).result or {}
    if code == 0:
        print(
            f"deleted {accepted.document_id}: {result.get('points_removed')} points removed"
            + (", its import was cancelled" if result.get("import_cancelled") else "")
        )
    return code


async def _chunk_page(
    args: argparse.Namespace, settings: Settings
) -> tuple[ChunkPage | None, str | None]:
    """The page of chunks `show --chunks` asks for, or why there is none (the detail is
    printed either way: it says what the import is doing)."""
    path = f"/v1/documents/{args.document_id}/chunks"
    try:
        check_page(args.offset, args.limit)
        raw = await _via_api(settings, "GET", path, offset=args.offset, limit=args.limit)
        if raw is not _NOBODY:
            return ChunkPage.model_validate(raw), None
        # Chunks are files, not the index: no need to open it here.
        async with _document_service(settings, with_index=False) as documents:
            page = await documents.chunks(args.document_id, offset=args.offset, limit=args.limit)
        return page, None
    except (LookupError, ValueError, RuntimeError) as e:
        return None, str(e)


def _print_chunks(page: ChunkPage) -> None:
    first, last = page.offset, page.offset + len(page.chunks) - 1
    shown = f"{first}-{last}" if page.chunks else f"none at offset {page.offset}"
    print(f"chunks:   {shown} of {page.total} (version {page.version or '-'})")
    for c in page.chunks:
        where = [f"page {c.page}" if c.page is not None else "", c.heading or ""]
        print(f"\n[{c.index}] {' | '.join(w for w in where if w)}".rstrip())
        for line in c.text.splitlines() or [""]:
            print(f"    {line}")


async def _search(args: argparse.Namespace, settings: Settings) -> int:
    raw = await _via_api(
        settings,
        "GET",
        "/v1/search",
        q=args.query,
        k=args.k,
        document_id=args.document_id,
        mode=args.mode,
    )
    if raw is _NOBODY:
        raw = await _search_here(args, settings)
    hits = [SearchHit.model_validate(h) for h in raw]
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


async def _search_here(args: argparse.Namespace, settings: Settings) -> list[Any]:
    from knowledgeops.contracts.search import SearchMode
    from knowledgeops.runtime.resources import open_resources
    from starter.services.search import search

    async with open_resources(settings, warm_up=False) as r:
        found = await search(
            r.store, r, args.query, args.k, args.document_id, r.db, mode=SearchMode(args.mode)
        )
        return [h.model_dump() for h in found]
