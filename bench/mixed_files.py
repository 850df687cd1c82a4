"""A folder of mixed real files for bench.folder_import: markdown notes, plain text, HTML pages
and small PDFs in subfolders, as a person's exported notes and saved pages look. Deterministic
(seeded): the same arguments write the same bytes, and no two files share their bytes (each is
a document of its own, none a duplicate of another).

    40% markdown  headings, lists, paragraphs, sometimes a quote or a code block; 1-6 KB
    25% text      a title line and paragraphs; 1-10 KB
    20% HTML      a whole page: head and title, nav, article, sometimes a table, footer; 2-20 KB
    15% PDF       1-3 pages of text with a title (fpdf2, as bench.common.write_big_pdf)
"""

from __future__ import annotations

import random
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

# Imported here, not in pdf(): its first import (~0.3 s) is not a PDF's generation time.
from fpdf import FPDF

from bench.common import _WORDS, paragraph

# Kind (its file extension), share of the files, and its size range in bytes (PDFs: pages).
KINDS: dict[str, tuple[float, int, int]] = {
    "md": (0.40, 1024, 6 * 1024),
    "txt": (0.25, 1024, 10 * 1024),
    "html": (0.20, 2 * 1024, 20 * 1024),
    "pdf": (0.15, 1, 3),
}
# A text file stops growing once past its target; the last block added is at most about this
# long, so targets stay this far below a kind's maximum.
_LAST_BLOCK = 1000
# PDFs carry a creation date; a fixed one keeps their bytes the same from run to run.
_PDF_DATE = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass
class MixedFolder:
    """What was written: files, bytes and seconds spent, per kind."""

    files: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.files.values())


def _title(rng: random.Random, i: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(2, 6))]
    # The index makes every file's bytes its own even if two drew the same words.
    return " ".join(words).capitalize() + f" ({i})"


def _phrase(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi)))


def _grow(target: int, first: str, block: Callable[[], str]) -> str:
    parts = [first]
    size = len(first)
    while size < target:
        parts.append(block())
        size += len(parts[-1]) + 2
    return "\n\n".join(parts) + "\n"


def markdown(rng: random.Random, i: int, target: int) -> str:
    def block() -> str:
        roll = rng.random()
        if roll < 0.30:
            return f"## {_phrase(rng, 2, 5).capitalize()}\n\n{paragraph(rng, rng.randint(30, 70))}"
        if roll < 0.50:
            return "\n".join(f"- {_phrase(rng, 3, 10)}" for _ in range(rng.randint(3, 7)))
        if roll < 0.62:
            return "\n".join(f"{n}. {_phrase(rng, 4, 12)}" for n in range(1, rng.randint(3, 7)))
        if roll < 0.68:
            return f"> {paragraph(rng, rng.randint(15, 30))}"
        if roll < 0.72:
            return (
                f"```python\ndef {rng.choice(_WORDS)}(x):\n    return x * {rng.randint(2, 9)}\n```"
            )
        return paragraph(rng, rng.randint(40, 90))

    return _grow(target, f"# {_title(rng, i)}\n\n{paragraph(rng, rng.randint(20, 50))}", block)


def text(rng: random.Random, i: int, target: int) -> str:
    return _grow(target, _title(rng, i).upper(), lambda: paragraph(rng, rng.randint(40, 120)))


def html(rng: random.Random, i: int, target: int) -> str:
    title = _title(rng, i)
    nav = "\n".join(
        f'      <li><a href="/{w}/">{w.capitalize()}</a></li>' for w in rng.sample(_WORDS, 5)
    )
    head = (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n'
        f"  <title>{title}</title>\n"
        f'  <link rel="stylesheet" href="/static/site.css">\n'
        f"  <style>body {{ font-family: sans-serif; }} nav li {{ display: inline; }}</style>\n"
        f"</head>\n<body>\n  <header>\n    <nav><ul>\n{nav}\n    </ul></nav>\n  </header>\n"
        f"  <main>\n  <article>\n    <h1>{title}</h1>\n    <p>{paragraph(rng, 40)}</p>"
    )
    tail = (
        f"  </article>\n  </main>\n  <footer><p>{_phrase(rng, 5, 10)} &middot; "
        f'<a href="/about/">About</a></p></footer>\n</body>\n</html>\n'
    )
    table = rng.random() < 0.35  # a table on some pages, at most one

    def block() -> str:
        nonlocal table
        roll = rng.random()
        if table and roll < 0.15:
            table = False
            rows = "\n".join(
                f"        <tr><td>{rng.choice(_WORDS)}</td><td>{rng.randint(1, 90)}</td>"
                f"<td>{_phrase(rng, 3, 8)}</td></tr>"
                for _ in range(rng.randint(3, 12))
            )
            return (
                "    <table>\n      <thead><tr><th>Term</th><th>Days</th><th>Note</th></tr>"
                f"</thead>\n      <tbody>\n{rows}\n      </tbody>\n    </table>"
            )
        if roll < 0.30:
            return f"    <h2>{_phrase(rng, 2, 5).capitalize()}</h2>"
        if roll < 0.42:
            items = "".join(f"<li>{_phrase(rng, 3, 9)}</li>" for _ in range(rng.randint(3, 6)))
            return f"    <ul>{items}</ul>"
        return f"    <p>{paragraph(rng, rng.randint(40, 100))}</p>"

    return _grow(target - len(tail), head, block).rstrip("\n") + "\n" + tail


def pdf(rng: random.Random, i: int, pages: int) -> bytes:
    # Lines placed one by one (`text`), wrapped here: fpdf2's multi_cell measures every word
    # and made a 2-page file take ~40 ms, this ~2 ms.
    doc = FPDF()
    doc.set_creation_date(_PDF_DATE)
    title = _title(rng, i)
    doc.set_title(title)
    for page in range(pages):
        doc.add_page()
        y = 20.0
        if page == 0:
            doc.set_font("helvetica", style="B", size=14)
            doc.text(15, y, title)
            y += 10
        doc.set_font("helvetica", size=10)
        while y < 240:  # an A4 page's text area, 5 mm a line
            for line in textwrap.wrap(paragraph(rng, rng.randint(40, 80)), 90):
                doc.text(15, y, line)
                y += 5
            y += 5
    return bytes(doc.output())


def write_mixed(root: Path, n: int, seed: int = 17) -> MixedFolder:
    """`n` files under `root` in subfolders (area-NN/topic-NN), kinds in KINDS' shares."""
    rng = random.Random(seed)
    counts = {kind: int(n * share) for kind, (share, _, _) in KINDS.items()}
    counts["md"] += n - sum(counts.values())
    kinds = [kind for kind, c in counts.items() for _ in range(c)]
    rng.shuffle(kinds)
    out = MixedFolder(
        files=dict.fromkeys(KINDS, 0),
        bytes=dict.fromkeys(KINDS, 0),
        seconds=dict.fromkeys(KINDS, 0.0),
    )
    for i, kind in enumerate(kinds):
        _, lo, hi = KINDS[kind]
        folder = root / f"area-{i % 8:02d}" / f"topic-{i % 37:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{kind}-{i:05d}.{kind}"
        started = time.perf_counter()
        if kind == "pdf":
            path.write_bytes(pdf(rng, i, rng.randint(lo, hi)))
        else:
            make = {"md": markdown, "txt": text, "html": html}[kind]
            path.write_text(make(rng, i, rng.randint(lo, hi - _LAST_BLOCK)))
        out.seconds[kind] += time.perf_counter() - started
        out.files[kind] += 1
        out.bytes[kind] += path.stat().st_size
    return out
