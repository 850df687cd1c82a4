"""A stored image (or one page of a stored PDF, rendered) loaded for analysis: the image, its
properties, and what a vision model is sent (the stored bytes when they are fit to send, else a
re-encoding scaled to `MAX_SIDE`). A file that is missing, not an image, damaged or without the
page asked for fails as bad input: no retry can fix it."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from knowledgeops.contracts.ocr import IMAGE_FORMATS
from knowledgeops.contracts.vision import ImageProperties
from knowledgeops.errors import bad_input
from knowledgeops.formats import image_format
from knowledgeops.vision.colours import dominant_colours

# Longest side of the image a model is sent, in pixels.
MAX_SIDE = 2048
# Images already small and in a format every vision endpoint reads are sent as they are.
SEND_AS_IS = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
SEND_AS_IS_BYTES = 4 * 1024 * 1024
# PDF pages are rendered at up to this scale (2 = 144 dpi), within MAX_SIDE.
PDF_SCALE = 2.0


@dataclass
class Loaded:
    image: Image.Image
    properties: ImageProperties
    # What a model is sent: the stored bytes when they are fit to send, else a re-encoding.
    payload: bytes
    mime: str


def load(path: Path, file_id: str, page: int) -> Loaded:
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
    return Loaded(image, _properties(image, kind, size, frames), payload, mime)


def _pdf_page(path: Path, file_id: str, page: int, size: int) -> Loaded:
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
    return Loaded(image, _properties(image, "pdf", size, pages), payload, mime)


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
