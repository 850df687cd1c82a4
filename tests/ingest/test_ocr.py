"""OCR_PROCESS: reading order and storage as pure functions, then end to end on the real dev
server with a real worker and the real OCR subprocess (Chinese and English accuracy, a
multi-page scan page by page, resume after the OCR process is killed, bad input)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from knowledgeops.contracts.ocr import OcrPayload
from knowledgeops.files import file_store
from knowledgeops.files.ocr_results import OcrLine, OcrPage, OcrResults
from knowledgeops.formats import detect_format
from knowledgeops.ocr.layout import reading_order
from knowledgeops.registry.task_types import TaskType
from starter.cli.ocr import parse_pages
from starter.services.task_models import PayloadInvalidError, TaskStatus
from tests.helpers.environment import ROOT, Env, settings_env
from tests.helpers.ocr_pages import (
    CHINESE,
    ENGLISH,
    accuracy,
    cjk_font,
    page_lines,
    render_lines,
    write_scan_pdf,
)
from tests.helpers.temporal import activity_starts
from tests.helpers.waiting import eventually

WAIT = 120.0
FONT = cjk_font()
needs_font = pytest.mark.skipif(
    FONT is None, reason="needs a CJK font from PyPI: pip install paperang-p2-fonts-cjk"
)


def _box(left: float, top: float, right: float, bottom: float) -> list[tuple[float, float]]:
    return [(left, top), (right, top), (right, bottom), (left, bottom)]


def test_reading_order_rows_columns_and_headers() -> None:
    # Lines given shuffled; a title across both columns, then two columns, then a footer.
    boxes = {
        "title": _box(100, 50, 900, 80),
        "l1": _box(100, 120, 480, 145),
        "l2": _box(100, 160, 470, 185),
        "r1": _box(540, 120, 900, 145),
        "r2": _box(540, 160, 890, 185),
        "footer": _box(100, 300, 900, 325),
    }
    names = ["r2", "footer", "l2", "title", "r1", "l1"]
    order = reading_order([boxes[n] for n in names])
    assert [names[i] for i in order] == ["title", "l1", "l2", "r1", "r2", "footer"]
    # Boxes of adjacent lines overlapping vertically (padded boxes of tight text): row by
    # row, each row left to right, a slightly lower word still in its row.
    tight = [_box(300, 10, 400, 42), _box(10, 38, 200, 70), _box(10, 8, 250, 40)]
    tight.append(_box(260, 41, 400, 72))
    assert reading_order(tight) == [2, 0, 1, 3]
    assert reading_order([]) == []


def test_store_pages_atomically_by_file(tmp_path: Path) -> None:
    results = OcrResults(tmp_path / "ocr")
    file_id = "a" * 64 + ".png"
    assert (results.pages(file_id), results.has(file_id, 1), results.text(file_id, 1)) == (
        [],
        False,
        None,
    )
    lines = [OcrLine(text="第一行", box=_box(0, 0, 9, 9), score=0.99)]
    lines.append(OcrLine(text="second line", box=_box(0, 10, 9, 19), score=0.9))
    for page in (3, 1):
        results.save(
            OcrPage(file_id=file_id, page=page, method="m", width=9, height=20, lines=lines)
        )
    # A killed writer's temporary file is neither a page nor kept once cleaned up.
    (results.folder(file_id) / f".tmp-page-00002.json-{os.getpid()}").write_text("{")
    assert results.pages(file_id) == [1, 3]
    assert results.text(file_id, 3) == "第一行\nsecond line"
    assert results.remove_unfinished(file_id, os.getpid()) == 1
    with pytest.raises(ValueError, match="Invalid file id"):
        results.pages("../etc")
    assert results.delete(file_id) == 2 and results.pages(file_id) == []


def test_payload_is_validated() -> None:
    file_id = "b" * 64 + ".pdf"
    assert OcrPayload(file_id=file_id, pages=[3, 1, 3]).pages == [1, 3]
    with pytest.raises(ValidationError, match="start at 1"):
        OcrPayload(file_id=file_id, pages=[0, 2])
    with pytest.raises(ValidationError, match="file_id"):
        OcrPayload(file_id="../x.pdf")


@needs_font
def test_image_formats_are_detected_by_content(tmp_path: Path) -> None:
    assert FONT is not None
    image = render_lines(["x"], FONT, size=12, width=60)
    for fmt, ext in [("png", "a"), ("jpeg", "b"), ("tiff", "c"), ("webp", "d"), ("bmp", "e")]:
        path = tmp_path / f"image.{ext}"  # the name says nothing: the bytes decide
        image.save(path, fmt.upper())
        assert detect_format(path, path.name) == fmt
    text = tmp_path / "notes.txt"
    text.write_text("BMW and BMX are not bitmaps, even at the start of a text file.")
    assert detect_format(text, text.name) == "txt"


@needs_font
def test_models_come_from_the_wheel_and_nothing_is_downloaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from knowledgeops.ocr.process import make_engine, recognize_image

    def no_network(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"OCR tried to open a network connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    assert FONT is not None
    lines = recognize_image(make_engine(), render_lines(ENGLISH[:1], FONT))
    assert accuracy(lines[0][0], ENGLISH[0]) >= 0.98


async def _store(env: Env, path: Path) -> str:
    return file_store.store_path(env.settings.files_dir, path, env.settings.max_file_bytes)


async def _ocr(env: Env, path: Path, **payload: Any) -> tuple[str, TaskStatus]:
    file_id = await _store(env, path)
    ref = await env.service.enqueue(
        TaskType.OCR_PROCESS, {"file_id": file_id, "filename": path.name, **payload}
    )
    return file_id, await env.service.wait(ref.task_id, timeout=WAIT)


@needs_font
async def test_chinese_and_english_images_are_read_accurately(env: Env, tmp_path: Path) -> None:
    assert FONT is not None
    chinese, english = tmp_path / "中文.png", tmp_path / "english.jpg"
    render_lines(CHINESE, FONT).save(chinese)
    render_lines(ENGLISH, FONT).save(english, quality=90)
    results = OcrResults(env.settings.ocr_dir)
    for path, expected in [(chinese, CHINESE), (english, ENGLISH)]:
        # `pages` is ignored for a single image.
        file_id, st = await _ocr(env, path, pages=[1, 2])
        assert st.status == "completed", st.last_error
        assert st.result is not None
        assert (st.result["pages"], st.result["method"]) == ([1], "rapidocr PP-OCRv6")
        assert st.progress.unit == "pages" and st.progress.done == st.progress.total == 1
        text = results.text(file_id, 1)
        assert text is not None
        score = accuracy(text, "\n".join(expected))
        assert score >= 0.98, (path.name, score, text)
        assert st.result["characters"] == len(text)
        assert st.result["location"] == str(results.folder(file_id))


@needs_font
async def test_multi_page_scan_is_read_page_by_page(env: Env, tmp_path: Path) -> None:
    assert FONT is not None
    scan = write_scan_pdf(tmp_path / "scan.pdf", 3, FONT, size=24, width=900)
    file_id, st = await _ocr(env, scan, pages=[3, 1])
    assert st.status == "completed", st.last_error
    assert st.result is not None and st.result["pages"] == [1, 3]
    results = OcrResults(env.settings.ocr_dir)
    assert results.pages(file_id) == [1, 3]
    for n in (1, 3):
        text = results.text(file_id, n)
        assert text is not None and accuracy(text, "\n".join(page_lines(n))) >= 0.98, text
    # A multi-page TIFF: every frame, as its own page.
    tiff = tmp_path / "scan.tiff"
    frames = [render_lines(page_lines(n), FONT, size=24, width=900) for n in (1, 2)]
    frames[0].save(tiff, save_all=True, append_images=frames[1:])
    file_id, st = await _ocr(env, tiff)
    assert st.status == "completed", st.last_error
    assert results.pages(file_id) == [1, 2]
    assert "Page 2" in (results.text(file_id, 2) or "")


def _ocr_children(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            continue
        if "knowledgeops.ocr.process" in cmdline and marker in cmdline and '"recognize"' in cmdline:
            found.append(int(pid))
    return found


@needs_font
async def test_killed_ocr_process_resumes_at_the_next_page(env: Env, tmp_path: Path) -> None:
    assert FONT is not None
    # Pages large enough (~0.5-1 s each here) that the kill lands mid-scan.
    pages = 8
    scan = write_scan_pdf(tmp_path / "long-scan.pdf", pages, FONT, size=48, width=2000)
    file_id = await _store(env, scan)
    ref = await env.service.enqueue(TaskType.OCR_PROCESS, {"file_id": file_id})
    results = OcrResults(env.settings.ocr_dir)

    async def checkpoint() -> int:
        return (await env.service.get_status(ref.task_id)).progress.done

    # Wait until the server holds a checkpoint (not just until a page file exists).
    done = await eventually(
        checkpoint, lambda n: n >= 1, timeout=60, interval=0.1, what="the first checkpoint"
    )
    assert 1 <= done < pages, f"no checkpoint before the end of the scan (done={done})"
    before = {n: results.path(file_id, n).stat() for n in range(1, done + 1)}
    children = _ocr_children(str(env.settings.data_dir))
    assert len(children) == 1, children
    os.kill(children[0], signal.SIGKILL)

    st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "completed", st.last_error
    assert await last_attempt(env, ref.task_id, "recognize_pages") == 2
    assert results.pages(file_id) == list(range(1, pages + 1))
    for n, stat in before.items():
        after = results.path(file_id, n).stat()
        # Written by the first attempt only: a rewrite would replace the file (new inode).
        assert (after.st_ino, after.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns), n
    assert st.result is not None
    assert st.result["characters"] == sum(
        len(results.text(file_id, n) or "") for n in range(1, pages + 1)
    )


async def test_bad_input_fails_at_once_and_names_the_problem(env: Env, tmp_path: Path) -> None:
    import pypdfium2 as pdfium
    from fpdf import FPDF

    notes = tmp_path / "notes.txt"
    notes.write_text("plain text needs no OCR")
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    two_pages = tmp_path / "two.pdf"
    pdf = FPDF()
    for _ in range(2):
        pdf.add_page()
    pdf.output(str(two_pages))
    empty = tmp_path / "empty.pdf"
    pdfium.PdfDocument.new().save(str(empty))
    cases: list[tuple[Path, dict[str, Any], str, str]] = [
        (notes, {}, "UnsupportedFormat", "not an image or a PDF"),
        (broken, {}, "CorruptDocument", "not a readable image"),
        (two_pages, {"pages": [2, 5]}, "PageOutOfRange", "has 2 pages; there is no page 5"),
        (empty, {}, "EmptyDocument", "has no pages"),
    ]
    outcomes = await asyncio.gather(*(_ocr(env, path, **p) for path, p, _, _ in cases))
    for (path, _, kind, words), (_, st) in zip(cases, outcomes, strict=True):
        assert st.status == "failed", (path.name, st)
        assert st.last_error is not None and kind in st.last_error and words in st.last_error
        assert await last_attempt(env, st.task_id, "inspect_ocr_input") == 1, path.name
    with pytest.raises(PayloadInvalidError, match="file_id"):
        await env.service.enqueue(TaskType.OCR_PROCESS, {"file_id": "nope"})
    missing = {"file_id": "c" * 64 + ".png"}
    ref = await env.service.enqueue(TaskType.OCR_PROCESS, missing)
    st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "failed" and "FileNotFound" in (st.last_error or "")


def test_pages_option_of_the_cli() -> None:
    assert parse_pages("3,1-2, 5") == [3, 1, 2, 5] and parse_pages(None) is None
    with pytest.raises(ValueError, match="runs backwards"):
        parse_pages("5-3")
    with pytest.raises(ValueError, match="not a page"):
        parse_pages("one")


@needs_font
async def test_cli_ocr_follows_and_prints_the_text(env: Env, tmp_path: Path) -> None:
    assert FONT is not None
    image = tmp_path / "note.webp"
    render_lines(ENGLISH[1:2], FONT).save(image, lossless=True)
    args = [sys.executable, "-m", "starter.cli.main", "ocr", str(image), "--follow", "--text"]
    # In a thread: this test's event loop runs the worker the command waits for.
    r = await asyncio.to_thread(
        subprocess.run,
        args,
        cwd=ROOT,
        env=settings_env(env.settings),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert r.returncode == 0, r.stderr
    assert "--- page 1 ---" in r.stdout
    text = r.stdout.split("--- page 1 ---", 1)[1].strip()
    assert accuracy(text, ENGLISH[1]) >= 0.98, r.stdout


@needs_font
async def test_cancel_kills_the_ocr_process(env: Env, tmp_path: Path) -> None:
    assert FONT is not None
    scan = write_scan_pdf(tmp_path / "cancelled.pdf", 8, FONT, size=48, width=2000)
    ref = await env.service.enqueue(TaskType.OCR_PROCESS, {"file_id": await _store(env, scan)})
    marker = str(env.settings.data_dir)
    await eventually(
        partial(_ocr_children, marker),
        bool,
        timeout=30,
        interval=0.05,
        what="the OCR process started",
    )
    await env.service.cancel(ref.task_id, reason="test")
    st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "cancelled"
    # WAIT_CANCELLATION_COMPLETED: the activity (and its child) ended before the workflow did.
    assert _ocr_children(marker) == []


async def last_attempt(env: Env, task_id: str, activity: str) -> int:
    return max(
        (a.attempt for a in await activity_starts(env.client, task_id) if a.activity == activity),
        default=0,
    )
