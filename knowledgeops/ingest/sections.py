"""The parse step's output: a document's text sections in storage, read back by the chunk step.

The parser subprocess streams sections into `<document>~<version>.sections.jsonl` in the chunk
store's folder (written under a temporary name, renamed when complete), so parsing and chunking
are separate activities with their own retries, and no text passes through Temporal. The file
is removed when the version is published or discarded (it carries the `.jsonl` suffix of the
version's files, which those steps remove).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from knowledgeops.contracts.document_import import ParseResult
from knowledgeops.contracts.ocr import IMAGE_FORMATS, MAX_LISTED_PAGES
from knowledgeops.errors import DocumentError
from knowledgeops.files.ocr_results import OcrResults
from knowledgeops.formats import detect_format
from knowledgeops.ingest.parsing import Section, parse


def read_sections(path: Path) -> Iterator[Section]:
    with path.open("rb") as f:
        for line in f:
            r = json.loads(line)
            yield Section(text=r["t"], page=r["p"], heading=r["s"])


def with_ocr_pages(
    sections: Iterable[Section], ocr_dir: Path, file_id: str, pages: list[int]
) -> Iterator[Section]:
    """The parsed sections with the OCR'd pages' text merged in, in page order (a page OCR
    found no text on adds nothing)."""
    ocr = OcrResults(ocr_dir)
    waiting = sorted(pages)
    heading: str | None = None

    def ocr_before(page: int | None) -> Iterator[Section]:
        while waiting and (page is None or waiting[0] < page):
            n = waiting.pop(0)
            text = ocr.text(file_id, n)
            if text and text.strip():
                yield Section(text=text, page=n, heading=heading)

    for s in sections:
        yield from ocr_before(s.page if s.page is not None else 0)
        heading = s.heading
        yield s
    yield from ocr_before(None)


def extract_sections(
    path: Path,
    filename: str,
    document_id: str,
    out: Path,
    max_characters: int | None = None,
) -> ParseResult:
    """Parse a stored file into `out`; runs inside the parser subprocess."""
    fmt = detect_format(path, filename or path.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt in IMAGE_FORMATS:
        # No text layer at all: OCR reads every page (frame) of it.
        out.write_bytes(b"")
        return ParseResult(document_id=document_id, format=fmt, sections=0, ocr=True)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    pages_with_text: set[int] = set()
    title: list[str] = []
    characters = count = 0
    try:
        with tmp.open("wb") as f:
            for s in _observed(parse(path, fmt, filename), pages_with_text, title):
                characters += len(s.text)
                # Checked as the text comes out: a small compressed file can expand to far
                # more than anyone wants indexed, so stop at the limit instead of after it.
                if max_characters is not None and characters > max_characters:
                    raise DocumentError(
                        "DocumentTooLarge",
                        f"the document holds more than {max_characters} characters of text "
                        "(MAX_DOCUMENT_CHARACTERS); split it into smaller documents",
                    )
                record = {"t": s.text, "p": s.page, "s": s.heading}
                f.write(json.dumps(record, ensure_ascii=False).encode() + b"\n")
                count += 1
        pages = _page_count(path) if fmt == "pdf" else None
        # Scanned pages (no text layer) go to OCR.
        scanned = [p for p in range(1, (pages or 0) + 1) if p not in pages_with_text]
        if count == 0 and not scanned:
            raise DocumentError(
                "EmptyDocument", f"{filename or path.name} contains no extractable text"
            )
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ParseResult(
        document_id=document_id,
        format=fmt,
        sections=count,
        pages=pages,
        title=title[0] if title else None,
        characters=characters,
        ocr=bool(scanned),
        # A long scan: every page, rather than a list of thousands of page numbers.
        ocr_pages=scanned if scanned and len(scanned) <= MAX_LISTED_PAGES else None,
    )


def _observed(sections: Iterable[Section], pages: set[int], title: list[str]) -> Iterator[Section]:
    for s in sections:
        if s.page is not None:
            pages.add(s.page)
        if not title and s.heading:
            title.append(s.heading.split(" > ")[0])
        yield s


def _page_count(path: Path) -> int:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        return len(pdf)
    finally:
        pdf.close()
