"""OCR throughput, accuracy and memory of the OCR subprocess on a many-page rendered scan.

    .venv/bin/python -m bench.ocr              # a 40-page image-only PDF, A4 at 150 DPI
    .venv/bin/python -m bench.ocr --pages 200

Runs the same runner and child process the OCR_PROCESS activity runs (without Temporal) on
pages of known text: odd pages Chinese, even pages English, 24 lines each. Prints pages/s,
character accuracy per language (1 - edit distance / length), and the child's memory: its
resident high-water mark, its resident size between pages (it reports it after storing
each: flat memory means one page at a time) and its peak address space (what RLIMIT_AS
caps). Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from PIL import Image

from knowledgeops.files.ocr_results import OcrResults
from knowledgeops.ocr.process import THREADS, OcrChildInput
from knowledgeops.ocr.runner import OCR_MEMORY_MB, run_ocr_child
from tests.helpers.ocr_pages import CHINESE, ENGLISH, accuracy, cjk_font, render_lines

LINES_PER_PAGE = 24


def page_text(number: int) -> list[str]:
    if number % 2:
        # Set as Chinese is: no space between the label and the text (a space next to CJK
        # is not meaningful, and the recogniser drops it).
        return [f"第{number}页{i}行：{CHINESE[(number + i) % 3]}" for i in range(LINES_PER_PAGE)]
    return [f"{number}.{i} {ENGLISH[(number + i) % 3]}" for i in range(LINES_PER_PAGE)]


def write_scan(path: Path, pages: int, font: Path) -> Path:
    """An A4 scan at 150 DPI (1240 x 1754 px), one page image at a time into the PDF."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(1, pages + 1):
            image = render_lines(page_text(n), font, size=26, width=1240)
            page = Path(tmp) / f"{n}.png"
            canvas = Image.new("RGB", (1240, 1754), "white")
            canvas.paste(image, (40, 60))
            canvas.save(page)
            pdf.add_page()
            pdf.image(str(page), x=0, y=0, w=210, h=297)
            page.unlink()
    pdf.output(str(path))
    return path


class ChildMemory:
    """The OCR child's (a child of this process) high-water marks, as the kernel keeps them:
    VmHWM (resident), VmPeak (address space)."""

    def __init__(self) -> None:
        self.hwm = self.vm_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process(os.getpid())
        while not self._stop.is_set():
            for child in me.children():
                try:
                    status = Path(f"/proc/{child.pid}/status").read_text()
                except OSError:
                    continue  # ended between listing and reading
                fields = {
                    k: int(v.split()[0]) * 1024
                    for k, _, v in (line.partition(":") for line in status.splitlines())
                    if k in ("VmHWM", "VmPeak")
                }
                self.hwm = max(self.hwm, fields.get("VmHWM", 0))
                self.vm_peak = max(self.vm_peak, fields.get("VmPeak", 0))
            time.sleep(0.05)

    def __enter__(self) -> ChildMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def mb(n: int) -> str:
    return f"{n / 1024 / 1024:.0f} MB"


async def main(pages: int) -> None:
    font = cjk_font()
    if font is None:
        raise SystemExit("needs a CJK font: pip install paperang-p2-fonts-cjk")
    with tempfile.TemporaryDirectory() as tmp:
        scan = write_scan(Path(tmp) / "scan.pdf", pages, font)
        file_id = "0" * 64 + ".pdf"
        ocr_dir = Path(tmp) / "ocr"
        rss_after: dict[int, int] = {}
        memory = ChildMemory()

        def on_page(msg: dict[str, Any]) -> None:
            rss_after[int(msg["page"])] = int(msg["rss"])

        request = OcrChildInput(
            mode="recognize",
            path=str(scan),
            filename=scan.name,
            file_id=file_id,
            ocr_dir=str(ocr_dir),
            memory_mb=OCR_MEMORY_MB,
            format="pdf",
            pages=list(range(1, pages + 1)),
        )
        with memory:
            started = time.perf_counter()
            await run_ocr_child(request, on_page)
            seconds = time.perf_counter() - started
        results = OcrResults(ocr_dir)
        # Per page (edit distance is quadratic), summed per language.
        errors = {"zh": 0.0, "en": 0.0}
        length = {"zh": 0, "en": 0}
        for n in range(1, pages + 1):
            lang, expected = "zh" if n % 2 else "en", "\n".join(page_text(n))
            got = results.text(file_id, n) or ""
            errors[lang] += (1 - accuracy(got, expected)) * len(expected)
            length[lang] += len(expected)
        scores = {k: 1 - errors[k] / max(1, length[k]) for k in errors}
        print(
            f"OCR of a {pages}-page A4 scan (150 DPI images, rendered at 200 DPI, "
            f"{LINES_PER_PAGE} lines a page): {seconds:.1f} s, {pages / seconds:.2f} pages/s "
            f"(model loading included)"
        )
        print(
            f"character accuracy: Chinese {scores['zh']:.4f}, English {scores['en']:.4f}; "
            f"{os.cpu_count()} cores, {THREADS} onnxruntime threads"
        )
        middle = rss_after.get(pages // 2 or 1, 0)
        print(
            f"OCR child: peak RSS {mb(memory.hwm)}; RSS after page 1 {mb(rss_after.get(1, 0))}, "
            f"page {pages // 2 or 1} {mb(middle)}, page {pages} {mb(rss_after.get(pages, 0))}; "
            f"peak address space {mb(memory.vm_peak)} (RLIMIT_AS cap {OCR_MEMORY_MB} MB)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=40)
    asyncio.run(main(parser.parse_args().pages))
