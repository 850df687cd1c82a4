"""Turn a stored file into text sections (page- and heading-aware).

Each parser is a generator of `Section`s so that big files stream through in bounded memory.
Anything wrong with the file itself raises `DocumentError` with a message a user can act on.
"""

from __future__ import annotations

import codecs
import hashlib
import logging
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from knowledgeops.errors import DocumentError
from knowledgeops.formats import text_encoding

log = logging.getLogger(__name__)

# Text files are read and chunked in blocks of about this size, cut at a line break.
TEXT_BLOCK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Section:
    text: str
    page: int | None = None
    heading: str | None = None


def parse(path: Path, fmt: str, filename: str) -> Iterator[Section]:
    parsers = {"txt": parse_text, "md": parse_markdown, "html": parse_html}
    if fmt in parsers:
        return parsers[fmt](path, filename)
    if fmt == "pdf":
        return parse_pdf(path, filename)
    if fmt == "docx":
        return parse_docx(path, filename)
    raise DocumentError("UnsupportedFormat", f"unsupported format {fmt!r}")


def _read_text_blocks(path: Path, filename: str) -> Iterator[str]:
    """Decode incrementally and yield blocks of about TEXT_BLOCK_BYTES cut at a line break."""
    with path.open("rb") as f:
        sample = f.read(64 * 1024)
        encoding = text_encoding(sample)
        f.seek(0)
        decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
        carry = ""
        while True:
            raw = f.read(TEXT_BLOCK_BYTES)
            last = len(raw) < TEXT_BLOCK_BYTES  # a short read of a regular file means EOF
            try:
                text = carry + decoder.decode(raw, final=last)
            except UnicodeDecodeError as e:
                raise DocumentError(
                    "CorruptDocument",
                    f"{filename} is not valid {encoding} text near byte {f.tell()}: {e.reason}",
                ) from None
            if last:
                if text:
                    yield text
                return
            cut = _block_end(text)
            if cut <= 0:
                carry = text
                continue
            yield text[: cut + 1]
            carry = text[cut + 1 :]


def _block_end(text: str) -> int:
    """Where a block ends: at the paragraph break in its second half with the highest hash of
    the text after it (a line break if it has none there; the last line break if none at all).
    Chosen by the text around it, not as the last break before the block size: then a paragraph
    inserted near the start of a big file does not move every later block's end, and with it
    the chunks on either side of each (the embedding cache keys on their text)."""
    for sep in ("\n\n", "\n"):
        best, cut = b"", -1
        at = text.find(sep, len(text) // 2)
        while at != -1:
            key = hashlib.blake2b(text[at : at + 64].encode(), digest_size=8).digest()
            if key > best:
                best, cut = key, at
            at = text.find(sep, at + len(sep))
        if cut != -1:
            return cut
    return text.rfind("\n")


def parse_text(path: Path, filename: str) -> Iterator[Section]:
    for block in _read_text_blocks(path, filename):
        yield Section(text=block)


def parse_markdown(path: Path, filename: str) -> Iterator[Section]:
    """Split at headings (found with markdown-it, so `#` inside code blocks is not a heading)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    heading_path: list[tuple[int, str]] = []  # carried across blocks of a big file
    for block in _read_text_blocks(path, filename):
        lines = block.splitlines(keepends=True)
        tokens = md.parse(block)
        starts = [(0, 0, "")]  # (first line, level, title); level 0 continues the current path
        for i, tok in enumerate(tokens):
            if tok.type == "heading_open" and tok.map:
                title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
                starts.append((tok.map[0], int(tok.tag[1]), title))
        ends = [s[0] for s in starts[1:]] + [len(lines)]
        for (line, level, title), end in zip(starts, ends, strict=True):
            if level:
                heading_path = [p for p in heading_path if p[0] < level] + [(level, title)]
            text = "".join(lines[line:end])
            if text.strip():
                yield Section(text=text, heading=" > ".join(t for _, t in heading_path) or None)


def parse_html(path: Path, filename: str) -> Iterator[Section]:
    """The page's main content (trafilatura: no navigation, share bars, footers, ads), with
    its title, heading path and tables; the whole page's text where no main content is found,
    rather than nothing."""
    raw = path.read_bytes()
    html = raw.decode(text_encoding(raw[:65536]), errors="replace")
    main = _main_content(html)
    yield from main if main else _full_text(html)


def _main_content(html: str) -> list[Section] | None:
    import trafilatura
    from lxml import etree

    # favor_recall: on short pages the default drops headings (measured on examples/), and
    # recall matters more than the last few boilerplate words.
    xml = trafilatura.extract(
        html,
        output_format="xml",
        include_tables=True,
        include_formatting=True,
        include_comments=False,
        include_links=False,
        include_images=False,
        with_metadata=True,
        favor_recall=True,
    )
    if not xml:
        return None
    doc = etree.fromstring(xml.encode())
    main = doc.find("main")
    if main is None:
        return None
    title = doc.get("title") or None
    sections: list[Section] = []
    path_: list[tuple[int, str]] = []
    buf: list[str] = []

    def flush() -> None:
        text = "\n".join(buf).strip()
        buf.clear()
        if text:
            sections.append(Section(text=text, heading=" > ".join(h for _, h in path_) or title))

    for el in main:
        text = " ".join("".join(el.itertext()).split())
        if el.tag == "head":
            flush()
            rend = el.get("rend") or "h2"
            level = int(rend[1]) if rend[1:].isdigit() else 2
            path_ = [p for p in path_ if p[0] < level] + [(level, text)]
            buf.append(text)
        elif el.tag == "table":
            for row in el.iter("row"):
                buf.append(" | ".join(" ".join("".join(c.itertext()).split()) for c in row))
        elif el.tag == "list":
            buf.extend(f"- {' '.join(''.join(i.itertext()).split())}" for i in el.iter("item"))
        elif text:
            buf.append(text)
    flush()
    return sections or None


def _full_text(html: str) -> Iterator[Section]:
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    for node in tree.css("script, style, noscript, template, svg, head > *:not(title)"):
        node.decompose()
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node else None
    if title_node:
        title_node.decompose()
    marker = "\x1ehead:"
    for node in tree.css("h1, h2, h3, h4, h5, h6"):
        rank = (node.tag or "h1")[1]
        node.replace_with(f"\n{marker}{rank}:{' '.join(node.text().split())}\n")
    root = tree.body or tree.root
    if root is None:
        return
    body = root.text(separator="\n")
    path_: list[tuple[int, str]] = []
    buf: list[str] = []

    def flush() -> Iterator[Section]:
        text = "\n".join(line for line in buf if line.strip())
        buf.clear()
        if text.strip():
            yield Section(text=text, heading=" > ".join(t for _, t in path_) or title)

    for line in body.split("\n"):
        if line.startswith(marker):
            yield from flush()
            level_s, _, heading = line[len(marker) :].partition(":")
            level = int(level_s)
            path_ = [p for p in path_ if p[0] < level] + [(level, heading)]
            buf.append(heading)
        else:
            buf.append(line.strip())
    yield from flush()


def parse_pdf(path: Path, filename: str) -> Iterator[Section]:
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as e:
        msg = str(e)
        if "password" in msg.lower():
            raise DocumentError(
                "EncryptedDocument",
                f"{filename} is password-protected; remove the password and import it again",
            ) from None
        raise DocumentError("CorruptDocument", f"{filename} is not a readable PDF: {msg}") from None
    try:
        headings = _pdf_page_headings(pdf)
        current: str | None = None
        for index in range(len(pdf)):
            current = headings.get(index, current)
            page = pdf[index]
            try:
                textpage = page.get_textpage()
                text = textpage.get_text_bounded()
                textpage.close()
            finally:
                page.close()
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            if text.strip():
                yield Section(text=text, page=index + 1, heading=current)
    finally:
        pdf.close()


def _pdf_page_headings(pdf: object) -> dict[int, str]:
    """First outline (bookmark) title per page, used as the heading of that page's chunks."""
    headings: dict[int, str] = {}
    try:
        for item in pdf.get_toc(max_depth=3):  # type: ignore[attr-defined]
            dest = item.get_dest()
            index = dest.get_index() if dest is not None else None
            if index is not None and index not in headings:
                headings[index] = item.get_title()
    except Exception as e:  # a broken outline must not fail a readable document
        headings.clear()
        log.warning("ignoring unreadable PDF outline: %s", e)
    return headings


def parse_docx(path: Path, filename: str) -> Iterator[Section]:
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(str(path))
    except (PackageNotFoundError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise DocumentError("CorruptDocument", f"{filename} is not a readable .docx: {e}") from None
    heading_path: list[tuple[int, str]] = []
    buf: list[str] = []

    def flush() -> Iterator[Section]:
        text = "\n".join(buf)
        buf.clear()
        if text.strip():
            yield Section(text=text, heading=" > ".join(t for _, t in heading_path) or None)

    has_body = False
    for style, text in _docx_blocks(document):
        level = _heading_level(style)
        if level is not None:
            # A heading directly under another heading stays with it: no heading-only chunks.
            if has_body:
                yield from flush()
                has_body = False
            heading_path = [h for h in heading_path if h[0] < level] + [(level, text)]
        else:
            has_body = True
        buf.append(text)
        if sum(len(b) for b in buf) > TEXT_BLOCK_BYTES:
            yield from flush()
    yield from flush()


def _heading_level(style: str) -> int | None:
    if style == "Title":
        return 0
    if style.startswith("Heading "):
        tail = style.removeprefix("Heading ").strip()
        return int(tail) if tail.isdigit() else None
    return None


def _docx_blocks(document: object) -> Iterator[tuple[str, str]]:
    """(style name, text) for paragraphs and table rows, in document order."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for item in document.iter_inner_content():  # type: ignore[attr-defined]
        if isinstance(item, Paragraph):
            style = item.style.name if item.style is not None else ""
            if item.text.strip():
                yield style or "", item.text.strip()
        elif isinstance(item, Table):
            for row in item.rows:
                cells = [c.text.strip() for c in row.cells if c.text.strip()]
                if cells:
                    yield "", " | ".join(dict.fromkeys(cells))
