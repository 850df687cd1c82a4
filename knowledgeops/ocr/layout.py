"""Reading order of recognised lines: top to bottom, left to right, column by column.

A recursive XY cut on the lines' boxes. First look for a vertical gutter (a band of x that no
line crosses, at least one line-height wide): the parts on either side are columns, read left
to right. Else cut at the widest horizontal gaps (bands of y no line crosses): the parts are
blocks, read top to bottom. Each part is cut again the same way. A part that cannot be cut
(lines whose boxes overlap vertically, as tight Chinese text does once the detector has
padded its boxes) is read row by row: lines whose vertical centres are within half a
line-height form a row, read left to right. So a two-column article under a full-width
title reads title, left column, right column; a header with the page number at the right
reads before the body.
Limits: a table or a form with a wide gap between its columns is read column by column, not
row by row; two columns whose aligned lines are spaced wider than the gap under a heading
above them can be read row by row across both; vertical text is read as separate boxes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import median

Box = Sequence[Sequence[float]]  # four (x, y) corner points


class _Span:
    __slots__ = ("bottom", "index", "left", "right", "top")

    def __init__(self, index: int, box: Box) -> None:
        xs = [float(p[0]) for p in box]
        ys = [float(p[1]) for p in box]
        self.index = index
        self.left, self.right = min(xs), max(xs)
        self.top, self.bottom = min(ys), max(ys)

    @property
    def height(self) -> float:
        return self.bottom - self.top

    @property
    def middle(self) -> float:
        return (self.top + self.bottom) / 2


# Where a span starts and ends along one axis.
_Extent = Callable[[_Span], tuple[float, float]]


def reading_order(boxes: Sequence[Box]) -> list[int]:
    """Indexes of `boxes` in reading order."""
    spans = [_Span(i, b) for i, b in enumerate(boxes)]
    if not spans:
        return []
    line_height = max(1.0, median(s.height for s in spans))
    return [s.index for s in _order(spans, line_height)]


def _order(spans: list[_Span], line_height: float) -> list[_Span]:
    if len(spans) <= 1:
        return spans
    columns = _split(spans, lambda s: (s.left, s.right), min_gap=line_height)
    if len(columns) > 1:
        return [s for part in columns for s in _order(part, line_height)]
    # Only the widest horizontal gaps: cutting at every gap between lines would slice two
    # columns whose lines are aligned into rows before their gutter could be seen.
    blocks = _split(spans, lambda s: (s.top, s.bottom), min_gap=0.0, widest_only=True)
    if len(blocks) > 1:
        return [s for part in blocks for s in _order(part, line_height)]
    return _rows(spans, line_height)


def _split(
    spans: list[_Span], extent: _Extent, min_gap: float, widest_only: bool = False
) -> list[list[_Span]]:
    """Groups of spans separated by gaps wider than `min_gap` along one axis, in order; with
    `widest_only`, cut only at the widest gaps (within 10 %)."""
    ordered = sorted(spans, key=lambda s: extent(s)[0])
    gaps: list[float] = []  # gaps[i]: before ordered[i + 1]; <= min_gap where nothing opens
    reach = extent(ordered[0])[1]
    for s in ordered[1:]:
        start, end = extent(s)
        gaps.append(start - reach)
        reach = max(reach, end)
    cut_at = max(gaps, default=0.0) * 0.9 if widest_only else min_gap
    groups: list[list[_Span]] = [[ordered[0]]]
    for s, gap in zip(ordered[1:], gaps, strict=True):
        if gap > min_gap and gap >= cut_at:
            groups.append([s])
        else:
            groups[-1].append(s)
    return groups


def _rows(spans: list[_Span], line_height: float) -> list[_Span]:
    out: list[_Span] = []
    row: list[_Span] = []
    for s in sorted(spans, key=lambda s: s.middle):
        if row and s.middle - row[0].middle > line_height / 2:
            out += sorted(row, key=lambda r: r.left)
            row = []
        row.append(s)
    return out + sorted(row, key=lambda r: r.left)
