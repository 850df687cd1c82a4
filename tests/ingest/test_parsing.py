"""Parsing and chunking of every supported format, and a clear error for each kind of bad file."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.errors import DocumentError
from knowledgeops.files.chunk_store import ChunkReader
from tests.helpers.documents import (
    numbered_paragraphs,
    parse_into_chunks,
    write_docx,
    write_pdf,
    write_zip_bomb_docx,
)
from tests.helpers.environment import EXAMPLES

OPTS = ChunkingOptions(chunk_tokens=64, overlap_tokens=8)


def parse(tmp_path: Path, path: Path, name: str | None = None) -> tuple[object, list[object]]:
    result = asyncio.run(parse_into_chunks(path, name or path.name, tmp_path / "c", OPTS, 1024))
    return result, ChunkReader(tmp_path / "c", "doc1", "v1").read(0, 10_000)


@pytest.mark.parametrize(
    ("name", "fmt", "needle"),
    [
        ("spaced-repetition.txt", "txt", "Ebbinghaus"),
        ("temporal-retries.md", "md", "heartbeat timeout"),
        ("photosynthesis.html", "html", "RuBisCO"),
        ("water-cycle.pdf", "pdf", "aquifers"),
        ("chemistry-plan.docx", "docx", "nucleophilic"),
        ("向量检索.md", "md", "重复的数据"),
    ],
)
def test_every_format_parses(tmp_path: Path, name: str, fmt: str, needle: str) -> None:
    result, chunks = parse(tmp_path, EXAMPLES / name)
    assert result.format == fmt  # type: ignore[attr-defined]
    assert result.total_chunks == len(chunks) > 0  # type: ignore[attr-defined]
    assert any(needle in c.text for c in chunks)  # type: ignore[attr-defined]
    assert [c.index for c in chunks] == list(range(len(chunks)))  # type: ignore[attr-defined]


def test_pdf_keeps_pages_and_outline_headings(tmp_path: Path) -> None:
    _, chunks = parse(tmp_path, EXAMPLES / "water-cycle.pdf")
    by_page = {c.page: c for c in chunks}  # type: ignore[attr-defined]
    assert set(by_page) == {1, 2, 3}
    assert "aquifers" in by_page[2].text and by_page[2].heading == "Groundwater"


def test_markdown_and_docx_keep_heading_paths(tmp_path: Path) -> None:
    _, chunks = parse(tmp_path, EXAMPLES / "temporal-retries.md")
    hb = next(c for c in chunks if "checkpoint" in c.text)  # type: ignore[attr-defined]
    assert hb.heading == "Durable execution with Temporal > Heartbeats"
    # Bodies long enough to be chunks of their own (shorter ones are merged, see test_chunking).
    first = "The first body explains what the alpha section is about, in a full sentence or two."
    second = "The second body goes on with the beta section, again long enough to stand alone."
    docx = write_docx(tmp_path / "d.docx", [("Alpha", first), ("Beta", second)])
    _, chunks = parse(tmp_path, docx)
    assert [(c.heading, "body" in c.text) for c in chunks] == [  # type: ignore[attr-defined]
        ("Alpha", True),
        ("Beta", True),
    ]


def test_chinese_text_in_gb18030_and_utf8(tmp_path: Path) -> None:
    text = "学习方法：间隔重复可以提高长期记忆。\n\n" * 30
    for enc in ("utf-8", "gb18030"):
        p = tmp_path / f"zh-{enc}.txt"
        p.write_bytes(text.encode(enc))
        _, chunks = parse(tmp_path, p)
        assert chunks and all("间隔重复" in c.text for c in chunks)  # type: ignore[attr-defined]


def test_chunks_respect_token_size(tmp_path: Path) -> None:
    p = tmp_path / "big.txt"
    p.write_text(numbered_paragraphs(200))
    result, chunks = parse(tmp_path, p)
    from semantic_text_splitter import TextSplitter

    # Re-split at the configured size, every chunk fits in one piece (none is over 64
    # tokens); re-split at half of it, most need two (they are not trivially small).
    at_size = TextSplitter.from_tiktoken_model("gpt-3.5-turbo", OPTS.chunk_tokens)
    at_half = TextSplitter.from_tiktoken_model("gpt-3.5-turbo", OPTS.chunk_tokens // 2)
    assert result.total_chunks >= 200  # type: ignore[attr-defined]
    texts = [c.text for c in chunks]  # type: ignore[attr-defined]
    assert all(len(at_size.chunks(text)) == 1 for text in texts)
    assert sum(len(at_half.chunks(text)) > 1 for text in texts) > 0.8 * len(texts)


def test_big_text_streams_in_blocks(tmp_path: Path) -> None:
    p = tmp_path / "big.txt"
    block = numbered_paragraphs(3000)  # ~900 KB, written 3 times: crosses block boundaries
    p.write_text(block * 3)
    result, chunks = parse(tmp_path, p)
    assert result.characters == len(block) * 3  # type: ignore[attr-defined]
    joined = "".join(c.text for c in chunks)  # type: ignore[attr-defined]
    assert joined.count("Paragraph 2999 of") == 3


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _zip_with_markdown(tmp_path: Path) -> Path:
    shutil.make_archive(str(tmp_path / "arch"), "zip", root_dir=EXAMPLES, base_dir="向量检索.md")
    return (tmp_path / "arch.zip").rename(tmp_path / "archive.docx")


BAD_FILES: dict[str, tuple[Callable[[Path], Path], str, str]] = {
    "empty": (lambda d: _write(d / "empty.txt", b""), "EmptyDocument", "is empty"),
    "blank": (lambda d: _write(d / "blank.md", b"  \n\n \n"), "EmptyDocument", "no extractable"),
    "fake_pdf": (lambda d: _write(d / "fake.pdf", b"not a pdf"), "CorruptDocument", "not a PDF"),
    "truncated_pdf": (
        lambda d: _write(d / "cut.pdf", (EXAMPLES / "water-cycle.pdf").read_bytes()[:400]),
        "CorruptDocument",
        "not a readable PDF",
    ),
    "gif": (
        lambda d: _write(d / "image.gif", b"GIF89a" + bytes(100)),
        "UnsupportedFormat",
        "GIF image",
    ),
    "zip_not_docx": (_zip_with_markdown, "UnsupportedFormat", "zip archive, not a .docx"),
    "encrypted_pdf": (
        lambda d: write_pdf(d / "secret.pdf", ["top secret"], password="pw"),
        "EncryptedDocument",
        "password-protected",
    ),
    "executable": (
        lambda d: _write(d / "tool.bin", b"\x7fELF" + b"\x02\x01" * 100),
        "UnsupportedFormat",
        "executable",
    ),
    "invalid_utf8": (
        # Valid UTF-8 for the first 64 KB (so detected as UTF-8), broken later on.
        lambda d: _write(d / "bad.txt", "好的 text\n".encode() * 9000 + b"\xff\xfe\xfd" * 3),
        "CorruptDocument",
        "not valid",
    ),
    "zip_bomb": (lambda d: write_zip_bomb_docx(d / "bomb.docx"), "HostileDocument", "zip bomb"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_files_fail_with_a_clear_error(tmp_path: Path, case: str) -> None:
    make, kind, words = BAD_FILES[case]
    path = make(tmp_path)
    with pytest.raises(DocumentError) as info:
        parse(tmp_path, path)
    assert info.value.kind == kind
    assert words in info.value.message
    assert not list((tmp_path / "c").glob("*")), "a failed parse must leave no chunk files"


ENCODED_TEXTS = [
    ("latin-1", "Straße München Übung Ärger. Die Größe der Äpfel überraschte alle."),
    ("cp1252", "L’élève a été très fâché — « Où est la clé ? » Ça coûte 5 €."),
    ("utf-16", "UTF-16 with its BOM: Straße, 为什么, Où."),
    ("utf-16-le", "UTF-16 little-endian without a BOM: Straße und Übung, Où est-il ?"),
    ("utf-16-be", "UTF-16 big-endian without a BOM: Straße und Übung, Où est-il ?"),
    ("gb18030", "为什么要把长文档切分成块？因为向量检索需要较短的文本片段。"),
    ("big5", "為什麼要把長文件切分成塊？因為向量檢索需要較短的文本片段。"),
    ("shift_jis", "なぜ長い文書をチャンクに分割するのですか？ベクトル検索には短い文が必要です。"),
]


@pytest.mark.parametrize(("encoding", "text"), ENCODED_TEXTS)
def test_text_encodings_round_trip_exactly(tmp_path: Path, encoding: str, text: str) -> None:
    # A few lines, as a real note would have; one chunk, so the text comes back whole.
    body = "\n".join([text] * 3) + "\n"
    path = tmp_path / f"note-{encoding}.txt"
    path.write_bytes(body.encode(encoding))
    one_chunk = ChunkingOptions(chunk_tokens=4000, overlap_tokens=0)
    result = asyncio.run(parse_into_chunks(path, path.name, tmp_path / "c", one_chunk, 1024))
    [chunk] = ChunkReader(tmp_path / "c", "doc1", "v1").read(0, 10)
    assert result.total_chunks == 1 and chunk.text == body.strip()


DATA = Path(__file__).resolve().parents[1] / "data"
ONE_CHUNK = ChunkingOptions(chunk_tokens=4000, overlap_tokens=0)


def _parse_whole(tmp_path: Path, path: Path) -> list[object]:
    asyncio.run(parse_into_chunks(path, path.name, tmp_path / "c", ONE_CHUNK, 1024))
    return ChunkReader(tmp_path / "c", "doc1", "v1").read(0, 10_000)


def test_web_page_indexes_the_article_not_the_page_furniture(tmp_path: Path) -> None:
    chunks = _parse_whole(tmp_path, DATA / "news-article.html")
    text = "\n".join(c.text for c in chunks)  # type: ignore[attr-defined]
    for furniture in (
        "cookies",
        "Subscribe",
        "ADVERTISEMENT",
        "Share on Facebook",
        "Related stories",
        "newsletter",
        "Privacy policy",
        "All rights reserved",
    ):
        assert furniture not in text, furniture
    article = (
        "Swiss glaciers lost about ten percent",
        "Saharan dust that settled",
        "could disappear entirely within two decades",
        "Aletsch | 2.4 m",  # tables are kept, a row per line
    )
    assert all(a in text for a in article)
    headings = {c.heading for c in chunks}  # type: ignore[attr-defined]
    assert any(h and h.endswith("> Measurements at the stations") for h in headings), headings
    # Indexed words / main-content words: the measure, target <= 1.10.
    main_words = 0
    html = (DATA / "news-article.html").read_text()
    start, end = html.index("<h1>"), html.index("</article>")
    from selectolax.lexbor import LexborHTMLParser

    body = LexborHTMLParser(html[start:end]).text(separator=" ")
    main_words = len(body.split()) - len("By A. Reporter, Science correspondent".split())
    main_words -= len("Share on Facebook · Share on X · Share by email · Copy link".split())
    assert len(text.split()) / main_words <= 1.10


def test_page_without_main_content_falls_back_to_its_text(tmp_path: Path) -> None:
    page = tmp_path / "links.html"
    page.write_text(
        "<html><head><title>Links</title></head><body><ul>"
        + "".join(f"<li><a href='/{i}'>Resource {i}</a></li>" for i in range(5))
        + "</ul></body></html>"
    )
    chunks = _parse_whole(tmp_path, page)
    assert chunks and "Resource 3" in chunks[0].text  # type: ignore[attr-defined]


def test_scans_and_images_go_to_ocr(tmp_path: Path) -> None:
    """The parse step marks what has no text layer for OCR (the import's OCR_PROCESS child):
    every page of a scan, only the blank page of a mixed PDF, all of an image."""
    from knowledgeops.ingest.parse_runner import run_parse

    def parsed(path: Path) -> object:
        return asyncio.run(run_parse(path, path.name, "doc1", tmp_path / f"{path.name}.s", 1024))

    scan = parsed(write_pdf(tmp_path / "scan.pdf", ["", ""]))
    assert (scan.ocr, scan.ocr_pages, scan.sections) == (True, [1, 2], 0)  # type: ignore[attr-defined]
    mixed = parsed(write_pdf(tmp_path / "mixed.pdf", ["Aquifers hold water.", "", "Rivers."]))
    assert (mixed.ocr, mixed.ocr_pages, mixed.sections) == (True, [2], 2)  # type: ignore[attr-defined]
    plain = parsed(write_pdf(tmp_path / "plain.pdf", ["Only text here."]))
    assert (plain.ocr, plain.ocr_pages) == (False, None)  # type: ignore[attr-defined]
    image = parsed(_write(tmp_path / "photo.png", b"\x89PNG\r\n\x1a\n" + bytes(100)))
    assert (image.ocr, image.format) == (True, "png")  # type: ignore[attr-defined]
