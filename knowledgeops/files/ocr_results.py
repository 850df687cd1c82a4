"""Recognised text of OCR'd files, one JSON file per page, under `settings.ocr_dir`.

Keyed by the stored file's id (its content hash), so the text of the same bytes is the same
whichever task or document asked for it, and running OCR again overwrites instead of adding.
Each page is written atomically (`file_store.write_atomically`): a reader sees a page whole or
not at all, even after a crash of the OCR process, and `has(file_id, page)` means that page is
done. Lines are stored in reading order with their box (four corner points, pixels of the
image OCR saw) and the recogniser's confidence.

    results = OcrResults(settings.ocr_dir)
    for page in results.pages(file_id):
        text = results.text(file_id, page)
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from knowledgeops.files.file_store import FILE_ID_RE, write_atomically

_PAGE_FILE = re.compile(r"^page-(\d{5,})\.json$")


class OcrLine(BaseModel):
    text: str
    # Corner points clockwise from the top left, in pixels of the image as OCR saw it.
    box: list[tuple[float, float]] = Field(min_length=4, max_length=4)
    score: float = Field(ge=0.0, le=1.0)


class OcrPage(BaseModel):
    file_id: str
    page: int = Field(ge=1)
    method: str
    # Size of the image OCR saw (a PDF page rendered, an image scaled down): the boxes' frame.
    width: int
    height: int
    lines: list[OcrLine] = Field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)


class OcrResults:
    def __init__(self, ocr_dir: Path) -> None:
        self.root = ocr_dir

    def folder(self, file_id: str) -> Path:
        """The folder of a file's pages; the id is checked before it touches the disk."""
        if not FILE_ID_RE.fullmatch(file_id):
            raise ValueError(f"Invalid file id {file_id!r}: expected sha256 hex plus an extension")
        return self.root / file_id

    def path(self, file_id: str, page: int) -> Path:
        if page < 1:
            raise ValueError(f"page numbers start at 1, not {page}")
        return self.folder(file_id) / f"page-{page:05d}.json"

    def save(self, page: OcrPage) -> Path:
        path = self.path(page.file_id, page.page)
        write_atomically(path, page.model_dump_json().encode())
        return path

    def load(self, file_id: str, page: int) -> OcrPage | None:
        """The stored page, or None if it was never OCR'd (or its file is unreadable)."""
        try:
            raw = self.path(file_id, page).read_bytes()
        except FileNotFoundError:
            return None
        try:
            return OcrPage.model_validate_json(raw)
        except ValidationError as e:
            # Written atomically, so only a foreign or hand-edited file gets here: say so
            # instead of returning text that may be wrong.
            raise ValueError(
                f"the OCR result of page {page} of {file_id} is unreadable ({e.error_count()} "
                "errors); run OCR_PROCESS on the file again to rewrite it"
            ) from None

    def pages(self, file_id: str) -> list[int]:
        """Page numbers stored for the file, in order (empty if none)."""
        folder = self.folder(file_id)
        if not folder.is_dir():
            return []
        found = (_PAGE_FILE.match(p.name) for p in folder.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def has(self, file_id: str, page: int) -> bool:
        return self.path(file_id, page).is_file()

    def text(self, file_id: str, page: int) -> str | None:
        """The page's lines joined in reading order, or None if the page was never OCR'd."""
        stored = self.load(file_id, page)
        return None if stored is None else stored.text

    def remove_unfinished(self, file_id: str, pid: int) -> int:
        """Remove the temporary files a killed OCR process `pid` left behind."""
        folder = self.folder(file_id)
        if not folder.is_dir():
            return 0
        leftovers = [p for p in folder.glob(".tmp-*") if p.name.endswith(f"-{pid}")]
        for p in leftovers:
            p.unlink(missing_ok=True)
        return len(leftovers)

    def delete(self, file_id: str) -> int:
        """Remove every stored page of the file; returns how many there were."""
        count = len(self.pages(file_id))
        shutil.rmtree(self.folder(file_id), ignore_errors=True)
        return count
