"""Rendered pages with known text for the OCR tests and benchmark: images and image-only PDF
"scans" drawn with a CJK font from PyPI (`paperang-p2-fonts-cjk`: WenQuanYi Micro Hei, which
also has Latin glyphs), and the character accuracy of recognised text."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

CHINESE = [
    "光合作用是植物利用阳光把水和二氧化碳转化为葡萄糖的过程。",
    "水循环包括蒸发、凝结、降水和径流四个主要环节。",
    "间隔重复是一种根据遗忘曲线安排复习时间的学习方法。",
]
ENGLISH = [
    "Photosynthesis turns light, water and carbon dioxide into sugar.",
    "The water cycle moves water between oceans, air and land.",
    "Spaced repetition schedules reviews just before you forget.",
]


def cjk_font() -> Path | None:
    """The font file, or None when the package is not installed."""
    try:
        import paperang_p2_fonts_cjk  # type: ignore[import-untyped]
    except ImportError:
        return None
    return Path(paperang_p2_fonts_cjk.__file__).parent / "fonts" / "wqy-microhei.ttc"


def render_lines(lines: list[str], font: Path, *, size: int = 30, width: int = 1200) -> Image.Image:
    """Black text on white, one line per entry, like a clean scan."""
    face = ImageFont.truetype(str(font), size)
    step = int(size * 1.8)
    image = Image.new("RGB", (width, 2 * size + step * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((size, size + i * step), line, font=face, fill="black")
    return image


def page_lines(number: int) -> list[str]:
    """The known text of page `number` of a generated scan: both languages, unique per page."""
    return [
        f"第{number}页：{CHINESE[number % len(CHINESE)]}",
        f"Page {number}: {ENGLISH[number % len(ENGLISH)]}",
    ]


def write_scan_pdf(path: Path, pages: int, font: Path, **kw: int) -> Path:
    """A PDF of page images only (no text layer), as a scanner makes."""
    images = [render_lines(page_lines(n), font, **kw) for n in range(1, pages + 1)]
    images[0].save(path, "PDF", save_all=True, append_images=images[1:], resolution=150.0)
    return path


def accuracy(got: str, expected: str) -> float:
    """1 - edit distance / length of the expected text (characters, line breaks included)."""
    return 1 - _edit_distance(got, expected) / max(1, len(expected))


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]
