"""The activity of VISION_ANALYZE: read a stored image (or render a PDF page), analyse it,
store the analysis.

With VISION_MODEL set, the model gets the image (scaled so its longer side is at most
`MAX_SIDE` pixels: what vision endpoints read anyway, and a bounded request) with the
instruction and, when OCR_PROCESS has stored text for that page, the OCR text, and answers a
structured `Analysis`. Without one, the honest local method: the image's properties (format,
size, colour mode, dominant colours) and the OCR text if any; it describes, it does not answer.
Either way the output is stored under the task id (a retry overwrites it) and the result is small.
The image work itself (loading, encoding, colours, the prompt) is in `knowledgeops/vision/`.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from activities.model_errors import model_failures
from activities.support import Heartbeater
from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.contracts.base import Checkpoint
from knowledgeops.contracts.vision import (
    ANALYZE_IMAGE,
    LOCAL_METHOD,
    AnalyzeRequest,
    VisionOutput,
    VisionResult,
)
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.errors import bad_input
from knowledgeops.files import file_store
from knowledgeops.files.ocr_results import OcrResults
from knowledgeops.files.outputs import OutputStore
from knowledgeops.runtime.resources import Resources
from knowledgeops.vision.images import load
from knowledgeops.vision.local import describe
from knowledgeops.vision.model import ask


class VisionActivities:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings
        self.outputs = OutputStore(resources.storage)
        self.ocr = OcrResults(resources.settings.ocr_dir)

    @activity.defn(name=ANALYZE_IMAGE.name)
    async def analyze_image(self, req: AnalyzeRequest) -> VisionResult:
        async with Heartbeater(Checkpoint(total=1).model_dump()):
            file_id = req.file_id or await self._file_of(req.document_id or "")
            path = file_store.path_for(self.settings.files_dir, file_id)
            # Uploaded on another machine: fetched from STORAGE_URL's store (not there either:
            # load's FileNotFound, as before).
            await self.resources.files.fetch(path)
            loaded = await asyncio.to_thread(load, path, file_id, req.page)
            ocr_text = await self._ocr_text(file_id, req.page)
            vision = self.resources.vision
            if vision is not None:
                with model_failures():
                    analysis, usage = await ask(vision, loaded, req.instruction, ocr_text)
                method = f"model:{vision.model_id}"
                answer: str | None = analysis.answer
            else:
                analysis, usage = describe(loaded.properties, ocr_text), TokenUsage()
                method, answer = LOCAL_METHOD, None
            output = VisionOutput(
                file_id=file_id,
                page=req.page,
                instruction=req.instruction,
                method=method,
                image=loaded.properties,
                description=analysis.description,
                objects=analysis.objects,
                figures=analysis.figures,
                text_seen=analysis.text_seen,
                answer=answer,
                ocr_text=ocr_text,
                usage=usage,
            )
            await self.outputs.save(req.output_id, output)
        p = loaded.properties
        return VisionResult(
            file_id=file_id,
            page=req.page,
            method=method,
            format=p.format,
            width=p.width,
            height=p.height,
            ocr_text_used=ocr_text is not None,
            usage=usage,
            output_id=req.output_id,
            output_url=f"/v1/tasks/{req.output_id}/output",
        )

    async def _file_of(self, document_id: str) -> str:
        row = await DocumentCatalogue(self.resources.db).get(document_id)
        if row is None:
            raise bad_input(
                "DocumentNotFound",
                f"no document with id {document_id!r}: import it first, or give a file_id",
            )
        return row.file_id

    async def _ocr_text(self, file_id: str, page: int) -> str | None:
        try:
            # OCR'd on another machine: the page file comes from the store, if it has one.
            await self.resources.files.fetch(self.ocr.path(file_id, page))
            text = await asyncio.to_thread(self.ocr.text, file_id, page)
        except ValueError as e:
            # OCR text only helps; an unreadable page file must not stop the analysis.
            activity.logger.warning("ignoring the stored OCR text: %s", e)
            return None
        return text if text and text.strip() else None
