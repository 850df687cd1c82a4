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
    image = image_format(head)
    if image is not None:
        return image
    for magic, what in _BINARY_MAGIC:
        if head.startswith(magic):
            raise DocumentError(
                "UnsupportedFormat", f"{filename} is {what}; supported: {SUPPORTED}"
            )
    if b"\x00" in head and not text_encoding(head).startswith(("utf_16", "utf_32")):
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


# DIB header sizes of real BMP files: "BM" alone would also match text starting with "BM".
_BMP_HEADER_SIZES = {12, 40, 52, 56, 64, 108, 124}


def image_format(head: bytes) -> str | None:
    """The image format OCR reads ("png", "jpeg", "tiff", "webp", "bmp") from the first
    bytes, or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "tiff"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "webp"
    if head.startswith(b"BM") and int.from_bytes(head[14:18], "little") in _BMP_HEADER_SIZES:
        return "bmp"
    return None


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


# Multi-byte codecs the detector is trusted with (its single-byte Latin guesses are not).
_MULTIBYTE = ("utf_16", "utf_32", "gb", "big5", "cp932", "shift_jis", "euc", "cp949", "cp950")
_BOMS = [
    (codecs.BOM_UTF32_LE, "utf_32"),
    (codecs.BOM_UTF32_BE, "utf_32"),
    (codecs.BOM_UTF8, "utf_8_sig"),
    (codecs.BOM_UTF16_LE, "utf_16"),
    (codecs.BOM_UTF16_BE, "utf_16"),
]


def text_encoding(sample: bytes) -> str:
    """The encoding of a text file from its first bytes: a BOM is authoritative, then valid
    UTF-8, then a well-kept detector (charset-normalizer) for UTF-16/32 without BOM and the CJK
    codecs (GB18030, Big5, Shift-JIS...). Any other legacy single-byte text is read as cp1252,
    a superset of Latin-1: the detector, on short Western samples, picks Central European
    code pages (measured: French cp1252 text detected as cp1250, "Où" read as "Oů"), so
    cp1250 / cp1257 files must be re-saved as UTF-8 (say so when they look wrong)."""
    for bom, name in _BOMS:  # UTF-32 LE's BOM starts with UTF-16 LE's: longest first
        if sample.startswith(bom):
            return name
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
        return "utf_8"
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(sample).best()
    if best is not None:
        name = codecs.lookup(best.encoding).name.replace("-", "_")
        if name.startswith(_MULTIBYTE):
            return name
    return "cp1252" if _decodes(sample, "cp1252") else "latin_1"


def _decodes(sample: bytes, encoding: str) -> bool:
    try:
        codecs.getincrementaldecoder(encoding)().decode(sample, final=False)
        return True
    except UnicodeDecodeError:
        return False
