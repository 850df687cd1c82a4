"""OCR_PROCESS's contract: payload, activity requests / results / checkpoint, result.

The recognised text never crosses Temporal: each page is written to the OCR store
(`files/ocr_results.py`, keyed by the file id) and only page numbers and counts come back.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from knowledgeops.contracts.base import ActivityRef, Checkpoint
from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN

FILE_ID_PATTERN = r"^[0-9a-f]{64}(\.[a-z0-9]{1,10})?$"
# What recognises the text: reported in every result and kept in every page file, so a
# reader can tell which engine produced a stored page.
OCR_METHOD = "rapidocr PP-OCRv6"
# Image formats `knowledgeops.formats.detect_format` names; "pdf" is the other input.
IMAGE_FORMATS = ("png", "jpeg", "tiff", "webp", "bmp")
# A payload lists at most this many pages (a longer scan: give no list, i.e. every page).
MAX_LISTED_PAGES = 5000


class OcrPayload(BaseModel):
    """Input of OCR_PROCESS: a stored image or PDF, never its bytes."""

    file_id: str = Field(pattern=FILE_ID_PATTERN)
    filename: str = Field(default="", max_length=500)
    # 1-based PDF page numbers (or TIFF frames); None: every page. Ignored for single images.
    pages: list[int] | None = Field(default=None, min_length=1, max_length=MAX_LISTED_PAGES)
    # The document the text is for, if any (carried in events; the text is keyed by file).
    document_id: str | None = Field(default=None, pattern=DOCUMENT_ID_PATTERN)

    @field_validator("pages")
    @classmethod
    def _pages_are_page_numbers(cls, pages: list[int] | None) -> list[int] | None:
        if pages is None:
            return None
        if min(pages) < 1:
            raise ValueError("page numbers start at 1 (the first page is page 1)")
        # In page order, each once: the order text is stored and read in.
        return sorted(set(pages))


class InspectRequest(BaseModel):
    file_id: str = Field(pattern=FILE_ID_PATTERN)
    filename: str = ""
    pages: list[int] | None = None


class InspectResult(BaseModel):
    format: str
    # Pages (PDF pages, TIFF frames; 1 for other images) the file has.
    page_count: int
    # The pages to recognise, in order: the payload's, checked against `page_count`.
    pages: list[int]


class RecognizeRequest(BaseModel):
    file_id: str = Field(pattern=FILE_ID_PATTERN)
    filename: str = ""
    format: str
    pages: list[int]


class RecognizeCheckpoint(Checkpoint):
    """Heartbeat of the recognise activity: the first `done` of the request's pages are
    stored; a retry resumes at the next one."""

    characters: int = Field(default=0, ge=0)
    lines: int = Field(default=0, ge=0)


class RecognizeResult(BaseModel):
    pages: int
    characters: int
    lines: int
    # Pages a previous attempt had stored (not recognised again by this one).
    resumed: int = 0
    # The OCR store's folder of the file.
    location: str


class OcrResult(BaseModel):
    file_id: str
    format: str
    # The pages recognised and stored, in order.
    pages: list[int]
    characters: int
    lines: int
    seconds: float
    method: str = OCR_METHOD
    # Where the text is: the OCR store's folder of this file (one JSON file per page); read
    # it with `OcrResults(settings.ocr_dir).text(file_id, page)`.
    location: str
    document_id: str | None = None


INSPECT_OCR_INPUT: ActivityRef[InspectRequest, InspectResult] = ActivityRef(
    "inspect_ocr_input", InspectRequest, InspectResult
)
RECOGNIZE_PAGES: ActivityRef[RecognizeRequest, RecognizeResult] = ActivityRef(
    "recognize_pages", RecognizeRequest, RecognizeResult
)
