"""Where a section is cut into chunks: content-defined boundaries.

Greedy packing (fill a chunk to the token limit, start the next where it ended) makes every cut
depend on where the chunk before it began, so one paragraph inserted near the start of a
document moves every later cut until the packing happens to realign: an edited copy of a
1,200-paragraph document re-embedded 10 chunks for a two-paragraph edit (issue 29). Here a cut
depends only on the text around it, as in content-defined chunking (rsync, FastCDC): a break
between paragraphs is a cut when its score (how strong a break it is: more blank lines, and
not right after a heading-like line; then a hash of the paragraph before it) is the highest of
the breaks within half a chunk either side. An edit moves only the cuts within that distance of
it, and the embedding cache reuses every chunk around them.

The text splitter stays the judge of size: a span is a chunk only if the splitter would leave
it whole (so no chunk exceeds the token limit), a span between two cuts that is too long is cut
again at content-chosen breaks near even shares of it, and a paragraph too long for one chunk
is cut at its lines, and a line too long at the splitter's own places (sentences, words), with
its overlap. Paragraph and line chunks carry no overlap: the splitter gave them none either
(it overlaps pieces only at the level it cut at, and whole paragraphs never fitted).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from semantic_text_splitter import MarkdownSplitter, TextSplitter

from knowledgeops.text.cjk import CJK_CHARS

# A break is a cut when it outscores every break within this share of a chunk on either side.
# Smaller: an edit moves fewer cuts, but chunks come out smaller (a cut of this kind is at
# least this far from the next, and spans longer than a chunk are cut again). At a half, the
# issue's edit re-embeds 3 chunks on average and chunks average ~0.68 of the limit; greedy
# packing: 7 to 13, and ~0.85 (bench/chunk_edits.py).
RADIUS = 0.5
# A span too long for one chunk is cut into even shares, each ended at the best-scoring break
# within this share of a share's length of its even point: pieces of a size, cut by the text.
SLACK = 0.25
# Above this many estimated chunk lengths a span is taken as too long without asking the
# splitter, whose answer costs a whole split when it is no (the estimate is within 10% for nine
# spans in ten of English, Chinese, code and Markdown).
SURELY_TOO_LONG = 1.2
# A unit of fewer estimated tokens is heading-like (a title, a label): the break after it is a
# weaker one.
SHORT = 12

# Breaks by level: paragraphs (a blank line), then lines; below that the splitter decides.
_PARAGRAPH_BREAK = re.compile(r"(?:\r\n|\n|\r)(?:[ \t]*(?:\r\n|\n|\r))+")
_LINE_BREAK = re.compile(r"(?:\r\n|\n|\r)+")
_NEWLINE = re.compile(r"\r\n|\n|\r")
# A fenced code block's opening line (Markdown): blank lines inside it are not paragraph breaks.
_FENCE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})", re.MULTILINE)

# Token estimate (cl100k), fitted on SQuAD, DRCD, CMRC, Cranfield, this repository's code and
# docs (within ~10% on each): a CJK character ~1.3 tokens, a run of digits or symbols ~1.2, a
# word 1 and a sixteenth for each letter past six; a word in another alphabet a third of its
# letters. Counted in 240ths of a token, so distances are exact integers: a break's distance
# to another must not depend on how much text comes before both.
PER_TOKEN = 240
_CJK = re.compile(f"[{CJK_CHARS}]")
_SYMBOLS = re.compile(r"\d{1,3}|[^\w\s]+")
_WORDS = re.compile(r"[A-Za-z]+")
_LONG_WORDS = re.compile(r"[A-Za-z]{7,}")
_OTHER_WORDS = re.compile(f"[^\\W\\d_A-Za-z{CJK_CHARS}]+")


def _class_table(pattern: re.Pattern[str]) -> bytes:
    """A bytes.translate table: the ASCII characters `pattern` matches to b"x", the rest to a
    space, so the pattern's runs in ASCII text are the words bytes.split() finds."""
    return bytes(ord("x") if pattern.fullmatch(chr(c)) else ord(" ") for c in range(256))


_LETTERS = _class_table(re.compile(r"[A-Za-z]"))
_DIGITS = _class_table(re.compile(r"\d"))
_PUNCTUATION = _class_table(re.compile(r"[^\w\s]"))


def estimate(text: str) -> int:
    """About how many tokens `text` is, in 240ths (the splitter checks every chunk's size)."""
    if text.isascii():
        return _ascii_estimate(text.encode())
    long_words = _LONG_WORDS.findall(text)
    total = (
        288 * len(_SYMBOLS.findall(text))
        + 240 * len(_WORDS.findall(text))
        + 15 * (sum(map(len, long_words)) - 6 * len(long_words))
    )
    total += 312 * len(_CJK.findall(text))
    total += sum(max(240, 80 * len(w)) for w in _OTHER_WORDS.findall(text))
    return total


def _ascii_estimate(data: bytes) -> int:
    """estimate() of ASCII text, the same number from runs of a class of characters (one
    translate and split each): the regular expressions cost ~25 us per 2,000 characters each,
    and estimating was a third of chunking (profiled at 50,000 chunks)."""
    words = [len(w) for w in data.translate(_LETTERS).split()]
    long_letters = sum(n - 6 for n in words if n > 6)
    # \d{1,3} takes a run of digits three at a time; [^\w\s]+ takes a run whole.
    digit_groups = sum((len(d) + 2) // 3 for d in data.translate(_DIGITS).split())
    symbols = digit_groups + len(data.translate(_PUNCTUATION).split())
    return 288 * symbols + 240 * len(words) + 15 * long_letters


def _score(text: str, strength: int) -> int:
    """A break's score: its strength (twice its newlines, plus one after a unit of text rather
    than a heading-like one), then a hash of the unit before it."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return (strength << 64) | int.from_bytes(digest, "big")


_EDGE = 1 << 80  # a section's edges and the ends of a too-long unit outscore every break


@dataclass(frozen=True)
class _Units:
    """The pieces of a span at one level, and the breaks between them: break k lies before
    unit k, so breaks 0 and n are the span's edges."""

    spans: list[tuple[int, int]]
    scores: list[int]  # per break, n + 1 of them
    at: list[int]  # estimated size from the span's start to each break (240ths of a token)


class ContentDefinedSplitter:
    """Cuts a section's text into chunk-sized pieces at content-defined breaks; the same
    interface as the text splitter's `chunk_indices`."""

    def __init__(
        self,
        splitter: TextSplitter | MarkdownSplitter,
        tokens: int,
        markdown: bool,
        judge: TextSplitter | MarkdownSplitter | None = None,
    ):
        self.splitter = splitter
        # Whether a span fits is the same question with or without overlap, and a splitter
        # without it answers it in two thirds of the time (measured): `judge`, if given.
        self.judge = judge or splitter
        self.tokens = tokens
        self.markdown = markdown
        self.limit = tokens * PER_TOKEN  # a chunk's size in the estimate's units
        # The splitter's pieces of the last span found too long: a paragraph of one line too
        # long for a chunk is cut into them next, so it is not split twice.
        self._too_long: tuple[int, int, list[tuple[int, str]]] | None = None
        # The last span found to fit: a share found to fit is packed next, which asks again.
        self._fitting: tuple[int, int] | None = None

    def chunk_indices(self, text: str) -> list[tuple[int, str]]:
        """(offset, text) of each piece, in order; trimmed, as the splitter's pieces are."""
        self._too_long = self._fitting = None
        # Tokens average under ten characters in any text but padding: a longer text is not
        # estimated (a pass over up to a megabyte) only to be split anyway.
        if len(text) <= 10 * SURELY_TOO_LONG * self.tokens and self._fits(
            text, 0, len(text), estimate(text)
        ):
            return _trimmed(text, 0, len(text))
        return list(self._split(text, 0, len(text), level=0))

    def _split(self, text: str, start: int, end: int, level: int) -> Iterator[tuple[int, str]]:
        """A span too long for one chunk, cut at breaks of `level` (0: paragraphs, 1: lines,
        then the splitter's own)."""
        if level == 2:
            known = self._too_long
            if known is not None and known[:2] == (start, end):
                pieces = known[2]
            else:
                pieces = self.splitter.chunk_indices(text[start:end])
            for at, piece in pieces:
                if piece.strip():
                    yield start + at, piece
            return
        units = self._units(text, start, end, level)
        if len(units.spans) == 1:
            yield from self._split(text, *units.spans[0], level + 1)
            return
        for a, b in itertools.pairwise(self._cuts(text, units)):
            yield from self._pack(text, units, a, b, level)

    def _units(self, text: str, start: int, end: int, level: int) -> _Units:
        pattern = _PARAGRAPH_BREAK if level == 0 else _LINE_BREAK
        fences = _fenced(text, start, end) if self.markdown and level == 0 else []
        spans: list[tuple[int, int]] = []
        scores = [_EDGE]
        at = [0]
        unit_start = start
        fence = 0
        for m in pattern.finditer(text, start, end):
            while fence < len(fences) and fences[fence][1] <= m.start():
                fence += 1
            if fence < len(fences) and fences[fence][0] <= m.start():
                continue  # a blank line inside a code block
            unit = text[unit_start : m.start()]
            if unit.strip():
                spans.append((unit_start, m.start()))
                at.append(at[-1] + estimate(unit))
                # A break after a heading-like line is a poor cut: it parts the heading from
                # what follows it.
                strength = 2 * len(_NEWLINE.findall(m.group()))
                strength += at[-1] - at[-2] >= SHORT * PER_TOKEN
                scores.append(_score(unit, strength))
            unit_start = m.end()
        if text[unit_start:end].strip():
            spans.append((unit_start, end))
            at.append(at[-1] + estimate(text[unit_start:end]))
        return _Units(spans, [*scores[: len(spans)], _EDGE], at)

    def _cuts(self, text: str, units: _Units) -> list[int]:
        """The breaks chunks end at: the edges, both ends of every unit too long for a chunk,
        and every break that outscores all others within RADIUS of a chunk either side."""
        scores = list(units.scores)
        for k, (a, b) in enumerate(units.spans):
            size = units.at[k + 1] - units.at[k]
            # Most units are far below a chunk: the splitter is asked only about the others.
            if 4 * size > 3 * self.limit and not self._fits(text, a, b, size):
                scores[k] = scores[k + 1] = _EDGE
        radius = int(RADIUS * self.limit)
        return [
            k
            for k in range(len(scores))
            if scores[k] == _EDGE or _local_max(scores, units.at, k, radius)
        ]

    def _pack(
        self, text: str, units: _Units, a: int, b: int, level: int
    ) -> Iterator[tuple[int, str]]:
        """Units a..b-1 as chunks: whole if they fit, else cut into even shares at the
        best-scoring break near the end of each."""
        while a < b:
            start, end = units.spans[a][0], units.spans[b - 1][1]
            if self._fits(text, start, end, units.at[b] - units.at[a]):
                yield from _trimmed(text, start, end)
                return
            if b == a + 1:
                yield from self._split(text, start, end, level + 1)
                return
            shares = max(2, -(-(units.at[b] - units.at[a]) // self.limit))
            cut = _best_cut(units, a, b, shares)
            # The estimate can be low: halve until the first share fits (one unit may not; it
            # is then cut at the next level's breaks).
            while cut > a + 1 and not self._fits(
                text, start, units.spans[cut - 1][1], units.at[cut] - units.at[a]
            ):
                cut = _best_cut(units, a, cut, 2)
            yield from self._pack(text, units, a, cut, level)
            a = cut

    def _fits(self, text: str, start: int, end: int, size: int) -> bool:
        """Whether the splitter would leave text[start:end] whole (within the token limit)."""
        if size > SURELY_TOO_LONG * self.limit:
            return False
        if self._fitting == (start, end):
            return True
        pieces = self.judge.chunk_indices(text[start:end])
        if len(pieces) <= 1:
            self._fitting = (start, end)
        elif self.judge is self.splitter:
            self._too_long = (start, end, pieces)
        return len(pieces) <= 1


def _trimmed(text: str, start: int, end: int) -> list[tuple[int, str]]:
    piece = text[start:end]
    stripped = piece.strip()
    if not stripped:
        return []
    return [(start + len(piece) - len(piece.lstrip()), stripped)]


def _local_max(scores: list[int], at: list[int], k: int, radius: int) -> bool:
    """Break k outscores every break within `radius` before it and ties none after it (so of
    equal breaks the first is the cut)."""
    j = k - 1
    while j >= 0 and at[k] - at[j] <= radius:
        if scores[j] >= scores[k]:
            return False
        j -= 1
    j = k + 1
    while j < len(scores) and at[j] - at[k] <= radius:
        if scores[j] > scores[k]:
            return False
        j += 1
    return True


def _best_cut(units: _Units, a: int, b: int, shares: int) -> int:
    """The break that ends the first of `shares` even shares of units a..b-1: the best-scoring
    one within SLACK of a share's length of the even point, else the one nearest it; a break
    after a heading-like unit only if there is no other."""
    at = units.at
    share = (at[b] - at[a]) / shares
    target = at[a] + share
    lo = bisect.bisect_left(at, target - SLACK * share, a + 1, b)
    hi = bisect.bisect_right(at, target + SLACK * share, a + 1, b)
    near = [k for k in range(lo, hi) if _after_text(units, k)] or range(lo, hi)
    if near:
        return max(near, key=lambda k: units.scores[k])
    # None that near (units longer than the slack): the nearest on either side of the target.
    after = bisect.bisect_left(at, target, a + 1, b)
    around = [k for k in range(after - 2, after + 2) if a < k < b]
    return min(around, key=lambda k: (not _after_text(units, k), abs(at[k] - target)))


def _after_text(units: _Units, k: int) -> bool:
    """Whether break k follows a unit of text rather than a heading-like one."""
    return bool(units.scores[k] >> 64 & 1)


def _fenced(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Spans of fenced code blocks (an unclosed fence runs to the end, as in CommonMark)."""
    spans = []
    pos = start
    while (m := _FENCE.search(text, pos, end)) is not None:
        fence = m.group(1)
        close = re.compile(rf"^[ ]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*\r?$", re.M)
        line_end = text.find("\n", m.end(), end)
        c = close.search(text, line_end + 1, end) if line_end != -1 else None
        block_end = c.end() if c is not None else end
        spans.append((m.start(), block_end))
        pos = block_end
        if c is None:
            break
    return spans
