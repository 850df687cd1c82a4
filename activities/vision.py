"""The activity of VISION_ANALYZE: read a stored image (or render a PDF page), analyse it,
store the analysis.

With VISION_MODEL set, the model gets the image (scaled so its longer side is at most
`MAX_SIDE` pixels: what vision endpoints read anyway, and a bounded request) with the
instruction and, when OCR_PROCESS has stored text for that page, the OCR text, and answers a
structured `Analysis`. Without one, the honest local method: the image's properties (format,
size, colour mode, dominant colours) and the OCR text if any; it describes, it does not answer.
Either way the output is stored under the task id (a retry overwrites it) and the result is small.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from PIL import Image, UnidentifiedImageError
from temporalio import activity

from activities.model_errors import model_failures
from activities.support import Heartbeater
from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.contracts.base import Checkpoint
from knowledgeops.contracts.ocr import IMAGE_FORMATS
from knowledgeops.contracts.vision import (
    ANALYZE_IMAGE,
    LOCAL_METHOD,
    Analysis,
    AnalyzeRequest,
    Colour,
    ImageProperties,
    VisionOutput,
    VisionResult,
)
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.errors import bad_input
from knowledgeops.files import file_store
from knowledgeops.files.ocr_results import OcrResults
from knowledgeops.files.outputs import OutputStore
from knowledgeops.formats import image_format
from knowledgeops.models.chat import ChatModel, image_part
from knowledgeops.runtime.resources import Resources

# Longest side of the image a model is sent, in pixels.
MAX_SIDE = 2048
# Images already small and in a format every vision endpoint reads are sent as they are.
SEND_AS_IS = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
SEND_AS_IS_BYTES = 4 * 1024 * 1024
# PDF pages are rendered at up to this scale (2 = 144 dpi), within MAX_SIDE.
PDF_SCALE = 2.0
# OCR text given to the model at most (characters): a page's text, not a book.
MAX_OCR_CHARS = 8000
# Named colours a dominant colour is described by (the nearest one).
_NAMED = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "grey": (128, 128, 128),
    "silver": (192, 192, 192),
    "red": (220, 30, 30),
    "orange": (245, 140, 20),
    "yellow": (245, 220, 40),
    "green": (40, 160, 60),
    "olive": (128, 128, 0),
    "teal": (0, 128, 128),
    "cyan": (40, 200, 220),
    "blue": (30, 80, 220),
    "navy": (0, 0, 128),
    "purple": (128, 50, 160),
    "pink": (240, 130, 180),
    "brown": (130, 80, 40),
    "beige": (225, 210, 170),
}

_SYSTEM = (
    "You analyse one image for a learner's knowledge base. Describe what it shows, list the "
    "objects and each figure (chart, diagram, table, formula) with what it shows, transcribe "
    "the text you can read, and answer the instruction from what the image shows. If OCR text "
    "of the image is given, use it to read small print, but trust the image where they "
    "disagree. Say so when the image does not show what the instruction asks about."
)


@dataclass
class _Loaded:
    image: Image.Image
    properties: ImageProperties
    # What a model is sent: the stored bytes when they are fit to send, else a re-encoding.
    payload: bytes
    mime: str


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
            # _load's FileNotFound, as before).
            await self.resources.files.fetch(path)
            loaded = await asyncio.to_thread(_load, path, file_id, req.page)
            ocr_text = await self._ocr_text(file_id, req.page)
            vision = self.resources.vision
            if vision is not None:
                with model_failures():
                    analysis, usage = await _ask(vision, loaded, req.instruction, ocr_text)
                method = f"model:{vision.model_id}"
                answer: str | None = analysis.answer
            else:
                analysis, usage = _describe(loaded.properties, ocr_text), TokenUsage()
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


async def _ask(
    model: ChatModel, loaded: _Loaded, instruction: str, ocr_text: str | None
) -> tuple[Analysis, TokenUsage]:
    text = f"Instruction: {instruction}"
    if ocr_text:
        text += f"\n\nOCR text of this image:\n{ocr_text[:MAX_OCR_CHARS]}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _SYSTEM},
        {
            "role": "user",
            "content": [{"type": "text", "text": text}, image_part(loaded.payload, loaded.mime)],
        },
    ]
    return await model.structured(messages, Analysis)


def _describe(p: ImageProperties, ocr_text: str | None) -> Analysis:
    colours = ", ".join(f"{c.name} {round(c.share * 100)}%" for c in p.dominant_colours)
    description = (
        f"A {p.width}×{p.height} pixel {p.format.upper()} image ({p.mode}); "
        f"dominant colours: {colours}."
    )
    if ocr_text:
        description += f" OCR found {len(ocr_text.split())} words of text."
    return Analysis(
        description=description, objects=[], figures=[], text_seen=ocr_text or "", answer=""
    )


def _load(path: Path, file_id: str, page: int) -> _Loaded:
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        raise bad_input(
            "FileNotFound", f"no stored file {file_id}: upload it first (POST /v1/documents)"
        ) from None
    if head.startswith(b"%PDF-"):
        return _pdf_page(path, file_id, page, size)
    kind = image_format(head)
    if kind is None:
        raise bad_input(
            "NotAnImage",
            f"file {file_id} is neither an image ({', '.join(IMAGE_FORMATS)}) nor a PDF: "
            "VISION_ANALYZE reads only those",
        )
    try:
        with Image.open(path) as source:
            frames = getattr(source, "n_frames", 1)
            _check_page(file_id, page, frames, "frame" if frames > 1 else "page")
            source.seek(page - 1)
            source.load()
            image = source.copy()
    except Image.DecompressionBombError as e:
        raise bad_input("HostileImage", f"file {file_id}: {e}") from None
    except (UnidentifiedImageError, OSError, SyntaxError) as e:
        raise bad_input("CorruptImage", f"file {file_id} is a damaged {kind} image: {e}") from None
    if kind in SEND_AS_IS and size <= SEND_AS_IS_BYTES and max(image.size) <= MAX_SIDE:
        payload, mime = path.read_bytes(), SEND_AS_IS[kind]
    else:
        payload, mime = _encode(image)
    return _Loaded(image, _properties(image, kind, size, frames), payload, mime)


def _pdf_page(path: Path, file_id: str, page: int, size: int) -> _Loaded:
    import pypdfium2

    try:
        pdf = pypdfium2.PdfDocument(str(path))
    except pypdfium2.PdfiumError as e:
        raise bad_input(
            "CorruptDocument", f"file {file_id} is a PDF that cannot be opened ({e})"
        ) from None
    try:
        _check_page(file_id, page, len(pdf), "page")
        pdf_page = pdf[page - 1]
        width, height = pdf_page.get_size()
        scale = min(PDF_SCALE, MAX_SIDE / max(width, height, 1.0))
        image = pdf_page.render(scale=scale).to_pil()
        pages = len(pdf)
    finally:
        pdf.close()
    payload, mime = _encode(image)
    return _Loaded(image, _properties(image, "pdf", size, pages), payload, mime)


def _check_page(file_id: str, page: int, pages: int, unit: str) -> None:
    if page > pages:
        raise bad_input(
            "PageOutOfRange",
            f"file {file_id} has {pages} {unit}{'s' if pages != 1 else ''}; "
            f"{unit} {page} was asked for",
        )


def _encode(image: Image.Image) -> tuple[bytes, str]:
    """PNG when the image has transparency or few colours (diagrams), else JPEG; scaled down to
    MAX_SIDE."""
    img = image.copy()
    img.thumbnail((MAX_SIDE, MAX_SIDE))
    out = io.BytesIO()
    if img.mode in ("RGBA", "LA", "P", "1", "L"):
        img.save(out, "PNG", optimize=True)
        return out.getvalue(), "image/png"
    img.convert("RGB").save(out, "JPEG", quality=90)
    return out.getvalue(), "image/jpeg"


def _properties(image: Image.Image, kind: str, size: int, pages: int) -> ImageProperties:
    return ImageProperties(
        format=kind,
        width=image.width,
        height=image.height,
        mode=image.mode,
        bytes=size,
        pages=pages,
        dominant_colours=dominant_colours(image),
    )


def dominant_colours(image: Image.Image, k: int = 5) -> list[Colour]:
    """The `k` most common colours after median-cut quantisation of a 128-pixel sample."""
    small = image.convert("RGB")
    # Nearest-pixel sampling: smoothing would invent blended colours the image does not have.
    small.thumbnail((128, 128), Image.Resampling.NEAREST)
    quantised = small.quantize(colors=k, method=Image.Quantize.MEDIANCUT)
    palette = quantised.getpalette() or []
    counts = sorted(quantised.getcolors() or [], reverse=True)
    total = sum(n for n, _ in counts) or 1
    colours = []
    for n, index in counts[:k]:
        at = 3 * cast(int, index)  # a palette image's colours are palette indexes
        r, g, b = palette[at : at + 3]
        colours.append(
            Colour(hex=f"#{r:02x}{g:02x}{b:02x}", name=_name(r, g, b), share=round(n / total, 3))
        )
    return colours


def _name(r: int, g: int, b: int) -> str:
    return min(
        _NAMED, key=lambda n: sum((a - c) ** 2 for a, c in zip(_NAMED[n], (r, g, b), strict=True))
    )
