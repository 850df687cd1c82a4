"""What a stored file is: its format decided from the content first and the name second.

Shared by the upload path (a 4xx before anything is queued) and the parser (the same verdict
inside the worker). Anything wrong with the file itself raises `DocumentError`.
"""

from __future__ import annotations

import codecs
import zipfile
from pathlib import Path

from knowledgeops.errors import DocumentError

# A .docx is a zip: refuse archives that would inflate beyond this (zip bombs).
MAX_DOCX_INFLATED_BYTES = 512 * 1024 * 1024

_BINARY_MAGIC: list[tuple[bytes, str]] = [
    (b"\x89PNG", "a PNG image (use OCR_PROCESS or VISION_ANALYZE for images)"),
    (b"\xff\xd8\xff", "a JPEG image (use OCR_PROCESS or VISION_ANALYZE for images)"),
    (b"GIF8", "a GIF image"),
    (b"\x7fELF", "an executable (ELF)"),
    (b"MZ", "a Windows executable"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"Rar!", "a RAR archive"),
    (b"7z\xbc\xaf", "a 7-Zip archive"),
]
SUPPORTED = "txt, md, html, pdf, docx"


def detect_format(path: Path, filename: str) -> str:
    """Decide the format from the content first and the name second."""
    with path.open("rb") as f:
        head = f.read(8192)
    if not head:
        raise DocumentError("EmptyDocument", f"{filename or 'The file'} is empty (0 bytes)")
    ext = Path(filename).suffix.lower()
    if b"%PDF-" in head[:1024]:
        return "pdf"
    if ext == ".pdf":
        raise DocumentError("CorruptDocument", f"{filename} is named .pdf but is not a PDF")
    if head.startswith(b"PK\x03\x04"):
        return _zip_format(path, filename)
    if head.startswith(b"\xd0\xcf\x11\xe0"):
        raise DocumentError(
            "UnsupportedFormat",
            f"{filename} is a legacy Office file (.doc/.xls) or a password-protected Office "
            "file; save it as an unprotected .docx or PDF and import that",
        )
    if ext == ".docx":
        raise DocumentError("CorruptDocument", f"{filename} is named .docx but is not a zip")
    for magic, what in _BINARY_MAGIC:
        if head.startswith(magic):
            raise DocumentError(
                "UnsupportedFormat", f"{filename} is {what}; supported: {SUPPORTED}"
            )
    if b"\x00" in head and not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise DocumentError(
            "UnsupportedFormat", f"{filename} looks like binary data; supported: {SUPPORTED}"
        )
    if ext in {".md", ".markdown"}:
        return "md"
    if ext in {".html", ".htm", ".xhtml"}:
        return "html"
    lowered = head[:1024].lstrip().lower()
    if lowered.startswith((b"<!doctype html", b"<html")):
        return "html"
    if ext in {"", ".txt", ".text", ".log", ".csv", ".rst"}:
        return "txt"
    raise DocumentError(
        "UnsupportedFormat", f"{filename}: unsupported file type {ext!r}; supported: {SUPPORTED}"
    )


def _zip_format(path: Path, filename: str) -> str:
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            inflated = sum(i.file_size for i in z.infolist())
    except zipfile.BadZipFile as e:
        raise DocumentError("CorruptDocument", f"{filename} is a damaged zip/docx: {e}") from None
    if "word/document.xml" not in names:
        raise DocumentError(
            "UnsupportedFormat", f"{filename} is a zip archive, not a .docx; supported: {SUPPORTED}"
        )
    if inflated > MAX_DOCX_INFLATED_BYTES:
        raise DocumentError(
            "HostileDocument",
            f"{filename} would inflate to {inflated} bytes (limit {MAX_DOCX_INFLATED_BYTES}); "
            "refusing a possible zip bomb",
        )
    return "docx"
