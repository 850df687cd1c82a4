"""`knowledgeops ocr FILE [--pages 1,3-5] [--follow] [--text] [--json]`: store an image or a
PDF and start OCR_PROCESS on it; with --follow, show progress, and with --text also print the
recognised text page by page (read from the OCR store under the data directory)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowledgeops.config.settings import Settings
from knowledgeops.files import file_store
from knowledgeops.files.data_files import open_storage
from knowledgeops.files.ocr_results import OcrResults
from knowledgeops.registry.task_types import TaskType
from starter.cli.common import FOLLOW_CODE, actor, add_command, exit_codes, follow_and_report

if TYPE_CHECKING:
    from starter.services.tasks import TaskQueueService


def add_parser(sub: Any) -> None:
    o = add_command(
        sub,
        "ocr",
        "OCR an image or a PDF's pages (OCR_PROCESS)",
        epilog=exit_codes(
            (1, "PATH cannot be stored (missing, too big) or --pages is invalid"), FOLLOW_CODE
        ),
    )
    o.add_argument(
        "path", type=Path, metavar="PATH", help="the file: png, jpeg, tiff, webp, bmp or pdf"
    )
    o.add_argument("--pages", help="PDF pages (or TIFF frames), e.g. 1,3-5; default: all")
    o.add_argument("--follow", action="store_true", help="show progress until it finishes")
    o.add_argument("--text", action="store_true", help="with --follow: then print the text")
    o.add_argument(
        "--json",
        action="store_true",
        help="print JSON: the task started (with --follow: its final status)",
    )


def parse_pages(spec: str | None) -> list[int] | None:
    """ "1,3-5" -> [1, 3, 4, 5]; None or "" -> None (every page)."""
    if not spec:
        return None
    pages: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        first, _, last = part.partition("-")
        try:
            start, end = int(first), int(last or first)
        except ValueError:
            raise ValueError(f"--pages: {part!r} is not a page or a range like 3-5") from None
        if end < start:
            raise ValueError(f"--pages: the range {part} runs backwards")
        pages.extend(range(start, end + 1))
    return pages


async def command(service: TaskQueueService, args: argparse.Namespace, settings: Settings) -> int:

    path: Path = args.path
    pages = parse_pages(args.pages)
    file_id = await asyncio.to_thread(
        file_store.store_path, settings.files_dir, path, settings.max_file_bytes
    )
    # Into the store the workers read (STORAGE_URL), when there is one.
    files = open_storage(settings)[1]
    await files.send(file_store.path_for(settings.files_dir, file_id))
    payload = {"file_id": file_id, "filename": path.name, "pages": pages}
    ref = await service.enqueue(TaskType.OCR_PROCESS, payload, requested_by=actor())
    if not args.follow:
        print(ref.model_dump_json(indent=2) if args.json else ref.task_id)
        return 0
    tasks = [(TaskType.OCR_PROCESS.value, ref.task_id)]
    code: int = await follow_and_report(service, tasks, quiet=args.json)
    if code == 0 and args.text and not args.json:
        st = await service.get_status(ref.task_id)
        results = OcrResults(settings.ocr_dir)
        for page in (st.result or {}).get("pages", []):
            await files.fetch(results.path(file_id, page))
            print(f"--- page {page} ---")
            print(results.text(file_id, page) or "")
    return code
