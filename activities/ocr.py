"""Activities of OCR_PROCESS: inspect the input (format, pages), then recognise page by page.

Both run the OCR subprocess (knowledgeops/ocr/process.py): opening an untrusted image or PDF is
already a risk. Recognition heartbeats a checkpoint after every stored page, so a retry after
a crash or a killed worker starts at the next page.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio import activity

from activities.support import Heartbeater, resume_from
from knowledgeops.contracts.ocr import (
    INSPECT_OCR_INPUT,
    RECOGNIZE_PAGES,
    InspectRequest,
    InspectResult,
    RecognizeCheckpoint,
    RecognizeRequest,
    RecognizeResult,
)
from knowledgeops.errors import DocumentError, bad_input
from knowledgeops.files import file_store
from knowledgeops.files.ocr_results import OcrResults
from knowledgeops.ocr.process import OcrChildInput
from knowledgeops.ocr.runner import OCR_MEMORY_MB, run_ocr_child
from knowledgeops.runtime.resources import Resources

# Formats whose `pages` select pages (frames); any other image is one page.
_PAGED = ("pdf", "tiff")


class OcrActivities:
    def __init__(self, resources: Resources) -> None:
        self.settings = resources.settings
        self.files = resources.files
        self.results = OcrResults(self.settings.ocr_dir)
        # At most one OCR process per two cores, as for parsers (PARSER_CONCURRENCY): each
        # runs two onnxruntime threads and peaks at ~1 GB; more would only thrash.
        self._slots = asyncio.Semaphore(self.settings.parser_concurrency)

    async def _stored(self, file_id: str, filename: str) -> Path:
        try:
            path = file_store.path_for(self.settings.files_dir, file_id)
        except ValueError as e:
            raise bad_input("InvalidFileId", str(e)) from None
        # From the store, when another machine took the upload (STORAGE_URL).
        if not await self.files.fetch(path):
            raise bad_input(
                "FileNotFound",
                f"stored file {file_id} does not exist in {self.files.describe()}; upload it again",
            )
        size = path.stat().st_size
        if size > self.settings.max_file_bytes:
            raise bad_input(
                "FileTooLarge",
                f"{filename or file_id} is {size} bytes; the limit is "
                f"{self.settings.max_file_bytes} (MAX_FILE_BYTES)",
            )
        return path

    def _child(
        self, mode: Any, path: Path, file_id: str, filename: str, **kw: Any
    ) -> OcrChildInput:
        return OcrChildInput(
            mode=mode,
            path=str(path),
            filename=filename or file_id,
            file_id=file_id,
            ocr_dir=str(self.settings.ocr_dir),
            memory_mb=OCR_MEMORY_MB,
            **kw,
        )

    @activity.defn(name=INSPECT_OCR_INPUT.name)
    async def inspect_ocr_input(self, req: InspectRequest) -> InspectResult:
        path = await self._stored(req.file_id, req.filename)
        name = req.filename or req.file_id
        try:
            async with Heartbeater():
                answer = await run_ocr_child(self._child("inspect", path, req.file_id, name))
        except DocumentError as e:
            raise bad_input(e.kind, e.message) from None
        fmt, count = str(answer["format"]), int(answer["page_count"])
        if req.pages is None or fmt not in _PAGED:
            return InspectResult(format=fmt, page_count=count, pages=list(range(1, count + 1)))
        missing = [p for p in req.pages if p > count]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            raise bad_input(
                "PageOutOfRange",
                f"{name} has {count} page{'s' if count != 1 else ''}; there is no page {shown}: "
                f"ask for pages 1 to {count}, or for none to OCR every page",
            )
        return InspectResult(format=fmt, page_count=count, pages=req.pages)

    @activity.defn(name=RECOGNIZE_PAGES.name)
    async def recognize_pages(self, req: RecognizeRequest) -> RecognizeResult:
        path = await self._stored(req.file_id, req.filename)
        total = len(req.pages)
        if self.files.shared:
            # Pages an attempt on another machine recognised, so the checkpoint can count them.
            await self.files.fetch_all(self.results.path(req.file_id, p) for p in req.pages)

        def still_stored(cp: RecognizeCheckpoint) -> bool:
            # A checkpoint is only as good as the pages it counts (a cleanup may have run).
            return (
                cp.total == total
                and cp.done <= total
                and all(self.results.has(req.file_id, p) for p in req.pages[: cp.done])
            )

        checkpoint = resume_from(RecognizeCheckpoint(total=total), still_stored)
        resumed = checkpoint.done
        hb = Heartbeater(checkpoint.model_dump())

        sends: list[asyncio.Task[None]] = []

        def on_page(msg: dict[str, Any]) -> None:
            def count() -> None:
                checkpoint.done += 1
                checkpoint.characters += int(msg["characters"])
                checkpoint.lines += int(msg["lines"])
                hb.update(checkpoint.model_dump())

            if not self.files.shared:
                count()
                return
            page = self.results.path(req.file_id, int(msg["page"]))
            previous = sends[-1] if sends else None

            async def send_then_count() -> None:
                # Counted in the checkpoint only once another machine can read it; in order.
                if previous is not None:
                    await previous
                await self.files.send(page)
                count()

            sends.append(asyncio.create_task(send_then_count()))

        todo = req.pages[checkpoint.done :]
        if resumed:
            activity.logger.info("resuming OCR of %s at page %s", req.file_id, todo[:1])
        try:
            async with hb:
                if todo:
                    async with self._slots:
                        request = self._child(
                            "recognize",
                            path,
                            req.file_id,
                            req.filename,
                            format=req.format,
                            pages=todo,
                        )
                        await run_ocr_child(request, on_page)
                await asyncio.gather(*sends)
        except DocumentError as e:
            raise bad_input(e.kind, e.message) from None
        finally:
            for send in sends:
                send.cancel()  # the attempt failed: a retry sends again
        return RecognizeResult(
            pages=total,
            characters=checkpoint.characters,
            lines=checkpoint.lines,
            resumed=resumed,
            location=str(self.results.folder(req.file_id)),
        )
