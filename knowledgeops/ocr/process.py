"""OCR subprocess: `python -m knowledgeops.ocr.process REQUEST_JSON`.

OCR of untrusted images runs here, not in the worker: a file that crashes the image decoder,
the PDF engine or onnxruntime kills this process only, its memory is capped (RLIMIT_AS) and
returned when it exits, and a cancel kills it. One page is in memory at a time: it is loaded
(a PDF page rendered), recognised, written to the OCR store, and only then is the next one
loaded, so memory stays flat however long the scan.

Prints one JSON line per message: {"inspected": {"format", "page_count"}} (mode "inspect"),
{"page", "characters", "lines", "rss"} after each page is stored (mode "recognize"), or
{"error": {"kind", "message"}} for a problem with the file (then exit code 3).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from knowledgeops.process_guard import die_with_parent

if TYPE_CHECKING:
    from PIL.Image import Image

EXIT_DOCUMENT_ERROR = 3
# PDF pages are rendered at 200 DPI: measured on A4 pages of 11 pt text, 150 DPI lost
# characters of English (accuracy 0.966) and 200 / 300 DPI read every character (1.000).
PDF_DPI = 200
# Longest side, in pixels, of the image OCR sees: rapidocr scales anything larger down to this
# anyway (its max_side_len, 2000), so larger pages and images are scaled here first, before a
# big scan is expanded into memory. A4 at 200 DPI is 1654 x 2339: recognised at ~170 DPI.
MAX_SIDE = 2000
# Images beyond this are refused rather than decoded (Pillow's decompression-bomb guard; a
# scan of an A3 page at 600 DPI has 70 megapixels).
MAX_IMAGE_PIXELS = 120_000_000
# onnxruntime threads per OCR process: the worker runs several OCR processes at once (one per
# two cores), and each thread reserves address space that counts against RLIMIT_AS.
THREADS = 2
MODEL_FILES = {
    "Det.model_path": "PP-OCRv6_det_small.onnx",
    "Cls.model_path": "ch_ppocr_mobile_v2.0_cls_mobile.onnx",
    "Rec.model_path": "PP-OCRv6_rec_small.onnx",
}
OCR_FORMATS = "png, jpeg, tiff, webp, bmp or pdf"


class OcrChildInput(BaseModel):
    mode: Literal["inspect", "recognize"]
    path: str
    filename: str
    file_id: str
    ocr_dir: str
    memory_mb: int
    format: str = ""
    pages: list[int] = []


def _emit(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


def main() -> int:
    die_with_parent()
    request = OcrChildInput.model_validate_json(sys.argv[1])
    # Batch work yields the CPU to the API and Temporal on the same machine.
    os.nice(10)
    limit = request.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    from knowledgeops.errors import DocumentError

    try:
        if request.mode == "inspect":
            _emit({"inspected": inspect(Path(request.path), request.filename)})
        else:
            recognize(request)
    except DocumentError as e:
        _emit({"error": {"kind": e.kind, "message": e.message}})
        return EXIT_DOCUMENT_ERROR
    except MemoryError:
        _emit(
            {
                "error": {
                    "kind": "PageTooLarge",
                    "message": f"a page of {request.filename} needs more than the OCR "
                    f"memory limit of {request.memory_mb} MB; scan it at a lower resolution",
                }
            }
        )
        return EXIT_DOCUMENT_ERROR
    return 0


def inspect(path: Path, filename: str) -> dict[str, Any]:
    """The file's format and page count; a file OCR cannot read raises DocumentError."""
    fmt = ocr_format(path, filename)
    if fmt == "pdf":
        with _pdf(path, filename) as pdf:
            count = len(pdf)
    else:
        with _image(path, filename) as image:
            count = getattr(image, "n_frames", 1) if fmt == "tiff" else 1
    if count == 0:
        from knowledgeops.errors import DocumentError

        raise DocumentError("EmptyDocument", f"{filename} has no pages")
    return {"format": fmt, "page_count": count}


def ocr_format(path: Path, filename: str) -> str:
    from knowledgeops.contracts.ocr import IMAGE_FORMATS
    from knowledgeops.errors import DocumentError
    from knowledgeops.formats import detect_format

    try:
        fmt = detect_format(path, filename)
    except DocumentError as e:
        if e.kind != "UnsupportedFormat":
            raise
        fmt = "other"
    if fmt != "pdf" and fmt not in IMAGE_FORMATS:
        raise DocumentError(
            "UnsupportedFormat",
            f"{filename} is not an image or a PDF: OCR reads {OCR_FORMATS} files"
            + (f" (this is {fmt}: import it as a document instead)" if fmt != "other" else ""),
        )
    return fmt


def recognize(request: OcrChildInput) -> None:
    from knowledgeops.contracts.ocr import OCR_METHOD
    from knowledgeops.files.ocr_results import OcrLine, OcrPage, OcrResults

    engine = make_engine()
    release = _memory_release()
    results = OcrResults(Path(request.ocr_dir))
    for number, image in _pages(
        Path(request.path), request.filename, request.format, request.pages
    ):
        lines = [OcrLine(text=t, box=b, score=s) for t, b, s in recognize_image(engine, image)]
        page = OcrPage(
            file_id=request.file_id,
            page=number,
            method=OCR_METHOD,
            width=image.width,
            height=image.height,
            lines=lines,
        )
        del image
        results.save(page)
        release()
        # Only after the page is stored: the runner's checkpoint counts stored pages. The
        # resident size between pages shows whether memory stays flat (bench/ocr.py).
        _emit({"page": number, "characters": len(page.text), "lines": len(lines), "rss": _rss()})


def _memory_release() -> Callable[[], object]:
    """What hands the freed memory of a page back to the system: glibc keeps the heap a page's
    tensors grew (measured: 500 MB resident between pages, 170 MB after malloc_trim, at no
    measurable cost per page). A no-op where there is no glibc."""
    import ctypes

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    return lambda: trim(0)


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def make_engine() -> Any:
    """rapidocr with the models inside its wheel, which never downloads anything."""
    import rapidocr
    from rapidocr.utils import download_file

    def refuse(params: Any) -> None:
        raise RuntimeError(
            f"rapidocr tried to download {getattr(params, 'file_url', params)}; OCR uses only "
            "the models inside the rapidocr wheel: reinstall rapidocr if they are missing"
        )

    # Missing files make rapidocr fetch them from the internet; here that must fail instead.
    setattr(download_file.DownloadFile, "run", staticmethod(refuse))  # noqa: B010
    models = Path(rapidocr.__file__).parent / "models"
    params: dict[str, Any] = {
        "Global.log_level": "error",
        "Global.max_side_len": MAX_SIDE,
        # Detect at the image's own size (at most MAX_SIDE). rapidocr's default scales the
        # short side up to 736 px: measured on a 1200 x 179 strip of English, that made the
        # line classifier turn the text upside down (accuracy 0.53, 1.00 this way), and every
        # small image ran 2-4x slower.
        "Det.limit_type": "max",
        "Det.limit_side_len": MAX_SIDE,
        # Turn a line upside down only when the orientation model is sure: at its default
        # (0.9) it flipped 1 in ~50 long English lines of upright scans into garbage.
        "Cls.cls_thresh": 0.99,
        "EngineConfig.onnxruntime.intra_op_num_threads": THREADS,
        "EngineConfig.onnxruntime.inter_op_num_threads": 1,
    }
    for key, name in MODEL_FILES.items():
        if not (models / name).is_file():
            refuse(models / name)
        params[key] = str(models / name)
    return rapidocr.RapidOCR(params=params)


def recognize_image(
    engine: Any, image: Image
) -> list[tuple[str, list[tuple[float, float]], float]]:
    """(text, box, score) of every line of an RGB image, in reading order."""
    import numpy as np

    from knowledgeops.ocr.layout import reading_order

    out = engine(np.asarray(image))
    if out.boxes is None or not out.txts:
        return []
    found = [
        (str(text).strip(), [(float(x), float(y)) for x, y in box.tolist()], float(score))
        for box, text, score in zip(out.boxes, out.txts, out.scores, strict=True)
    ]
    found = [f for f in found if f[0]]
    return [found[i] for i in reading_order([f[1] for f in found])]


def _pages(path: Path, filename: str, fmt: str, numbers: list[int]) -> Iterator[tuple[int, Image]]:
    """(page number, RGB image no larger than MAX_SIDE) for each page, one at a time."""
    if fmt == "pdf":
        with _pdf(path, filename) as pdf:
            for n in numbers:
                yield n, _render(pdf, n)
        return
    from PIL import ImageOps

    with _image(path, filename) as image:
        for n in numbers:
            frame = _decoded(image, filename, n)
            # Photos carry their rotation in EXIF; OCR wants the text upright.
            frame = ImageOps.exif_transpose(frame)
            frame.thumbnail((MAX_SIDE, MAX_SIDE))
            yield n, frame


def _decoded(image: Image, filename: str, page: int) -> Image:
    from PIL import Image as PILImage

    from knowledgeops.errors import DocumentError

    try:
        if page > 1:
            image.seek(page - 1)  # TIFF frames; the runner checked the numbers
        image.load()
        if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
            # Transparent text on nothing would turn black on black: put it on white.
            rgba = image.convert("RGBA")
            flat = PILImage.new("RGB", rgba.size, "white")
            flat.paste(rgba, mask=rgba.getchannel("A"))
            return flat
        if image.mode.startswith("I;16") or image.mode == "I":
            # 16-bit scans: scale to 8 bits first (a plain convert clips them to white).
            image = image.point(lambda v: v / 256).convert("L")
        return image.convert("RGB")
    except (EOFError, OSError, SyntaxError, ValueError) as e:
        raise DocumentError(
            "CorruptDocument", f"page {page} of {filename} is not a readable image: {e}"
        ) from None


def _render(pdf: Any, number: int) -> Image:
    page = pdf[number - 1]
    try:
        width, height = page.get_size()  # points
        scale = min(PDF_DPI / 72, MAX_SIDE / max(width, height, 1.0))
        bitmap = page.render(scale=scale)
        try:
            image: Image = bitmap.to_pil().convert("RGB")
            return image
        finally:
            bitmap.close()
    finally:
        page.close()


@contextmanager
def _pdf(path: Path, filename: str) -> Iterator[Any]:
    import pypdfium2 as pdfium

    from knowledgeops.errors import DocumentError

    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as e:
        if getattr(e, "err_code", None) == 0:
            # PDFium refuses a document without pages, reporting no error: that is all it is.
            raise DocumentError("EmptyDocument", f"{filename} has no pages") from None
        if "password" in str(e).lower():
            raise DocumentError(
                "EncryptedDocument",
                f"{filename} is password-protected; remove the password and run OCR again",
            ) from None
        raise DocumentError("CorruptDocument", f"{filename} is not a readable PDF: {e}") from None
    try:
        yield pdf
    finally:
        pdf.close()


@contextmanager
def _image(path: Path, filename: str) -> Iterator[Image]:
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    from knowledgeops.errors import DocumentError

    PILImage.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    # Pillow only warns between the limit and twice the limit: refuse from the limit on.
    warnings.simplefilter("error", PILImage.DecompressionBombWarning)
    try:
        image = PILImage.open(path)
        # A JPEG decodes straight at a fraction of its size (never below MAX_SIDE): a big
        # photo never exists at full size in memory. Other formats ignore this.
        image.draft("RGB", (MAX_SIDE, MAX_SIDE))
        image.load()
    except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning):
        raise DocumentError(
            "ImageTooLarge",
            f"{filename} has more than {MAX_IMAGE_PIXELS} pixels; scale it down and try again",
        ) from None
    except UnidentifiedImageError:
        raise DocumentError(
            "CorruptDocument", f"{filename} is not a readable image (damaged or truncated)"
        ) from None
    except (OSError, SyntaxError, ValueError) as e:
        raise DocumentError("CorruptDocument", f"{filename} is not a readable image: {e}") from None
    try:
        yield image
    finally:
        image.close()


if __name__ == "__main__":
    sys.exit(main())
