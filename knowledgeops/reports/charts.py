"""The report's charts, as inline SVG: one function a chart, each returning None when there is
nothing to show (the page then says so in a sentence, never draws a chart empty).

Drawn with matplotlib's object API (no pyplot state, Agg backend), text kept as text
(`svg.fonttype: none`), so the page needs nothing else: no scripts, fonts, stylesheets or
images from anywhere. Separate from render.py (the HTML page) because matplotlib is
heavy: only a worker that renders a report imports this module.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import matplotlib

matplotlib.use("Agg")
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, StrMethodFormatter

from knowledgeops.reports.data import STATUSES, ReportData
from knowledgeops.reports.figures import hour_of

COLOURS = {
    "completed": "#2e7d32",
    "failed": "#c62828",
    "cancelled": "#8d8d8d",
    "running": "#1565c0",
    "pending": "#f2a900",
    "p50": "#5c6bc0",
    "p95": "#283593",
    "billed": "#ef6c00",
    "reused": "#00897b",
}
WIDTH = 10.0  # inches; the page is ~1100 px wide
# Up to this long a period is charted per hour; longer ones per day (bars stay readable).
HOURLY_UP_TO = timedelta(days=7)

Draw = Callable[[ReportData], str | None]


def _svg(fig: Figure, salt: str) -> str:
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    # Inline: drop the XML prologue; the page's CSS sizes the <svg>.
    return text[text.index("<svg") :]


def _figure(height: float) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(WIDTH, height), dpi=96)
    ax = fig.subplots()
    ax.spines[["top", "right"]].set_visible(False)
    ax.tick_params(labelsize=10)
    return fig, ax


def _label_bars(ax: Axes, fmt: str = "{:g}") -> None:
    for container in ax.containers:
        ax.bar_label(container, fmt=fmt, padding=3, fontsize=9)  # type: ignore[arg-type]


def tasks_chart(data: ReportData) -> str | None:
    if not data.tasks:
        return None
    rows = list(reversed(data.tasks))  # largest on top
    fig, ax = _figure(1.0 + 0.38 * len(rows))
    left = [0] * len(rows)
    names = [r.task_type for r in rows]
    for status in STATUSES:
        values = [r.by_status.get(status, 0) for r in rows]
        if any(values):
            ax.barh(names, values, left=left, color=COLOURS[status], label=status, height=0.6)
            left = [a + b for a, b in zip(left, values, strict=True)]
    for i, total in enumerate(left):
        ax.text(total, i, f"  {total}", va="center", fontsize=9)
    ax.set_xlabel("runs")
    ax.set_xlim(0, max(left) * 1.12 + 1)
    ax.legend(loc="lower right", fontsize=9, frameon=False, ncols=5, bbox_to_anchor=(1, 1))
    return _svg(fig, "tasks")


def hours_in(since: datetime, until: datetime) -> list[datetime]:
    """Every hour the period touches: empty hours are zero bars, not gaps."""
    out, h = [], hour_of(since)
    while h < until:
        out.append(h)
        h += timedelta(hours=1)
    return out


def throughput_chart(data: ReportData) -> str | None:
    if not data.throughput:
        return None
    hourly = data.until - data.since <= HOURLY_UP_TO
    step = timedelta(hours=1) if hourly else timedelta(days=1)
    buckets = hours_in(data.since, data.until)
    if not hourly:
        buckets = sorted({h.replace(hour=0) for h in buckets})
    counts = {b: {"completed": 0, "failed": 0, "cancelled": 0} for b in buckets}
    for h in data.throughput:
        key = h.hour if hourly else h.hour.replace(hour=0)
        bucket = counts.setdefault(key, {"completed": 0, "failed": 0, "cancelled": 0})
        for status in bucket:
            bucket[status] += getattr(h, status)
    keys = sorted(counts)
    xs = [_days(k) for k in keys]
    width = step / timedelta(days=1) * 0.9  # date numbers count days
    fig, ax = _figure(3.2)
    bottom = [0] * len(xs)
    for status in ("completed", "failed", "cancelled"):
        values = [counts[k][status] for k in keys]
        if any(values):
            ax.bar(xs, values, width, bottom=bottom, align="edge", color=COLOURS[status],
                   label=status)  # fmt: skip
            bottom = [a + b for a, b in zip(bottom, values, strict=True)]
    ax.set_ylabel("runs ended per hour" if hourly else "runs ended per day")
    ax.set_xlabel("time (UTC)")
    ax.set_xlim(_days(data.since), _days(data.until))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ticks = _time_ticks(data.since, data.until)
    ax.set_xticks([_days(t) for t in ticks], [_tick_label(t, ticks) for t in ticks])
    ax.legend(loc="lower right", fontsize=9, frameon=False, ncols=3, bbox_to_anchor=(1, 1))
    return _svg(fig, "throughput")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TICK_STEPS = [timedelta(hours=h) for h in (1, 2, 3, 6, 12, 24, 48, 168, 336, 720)]


def _days(dt: datetime) -> float:
    return (dt - _EPOCH) / timedelta(days=1)


def _time_ticks(since: datetime, until: datetime) -> list[datetime]:
    """At most 9 ticks on round hours / midnights (UTC), so labels never overlap."""
    span = until - since
    step = next((s for s in _TICK_STEPS if span / s <= 8), _TICK_STEPS[-1])
    if step >= timedelta(days=1):
        t = since.replace(hour=0, minute=0, second=0, microsecond=0)
    else:
        t = hour_of(since)
        t -= timedelta(hours=t.hour % int(step / timedelta(hours=1)))
    ticks = []
    while t <= until:
        if t >= since:
            ticks.append(t)
        t += step
    return ticks


def _tick_label(t: datetime, ticks: list[datetime]) -> str:
    daily = len(ticks) < 2 or ticks[1] - ticks[0] >= timedelta(days=1)
    if daily:
        return (
            t.strftime("%a %d %b")
            if ticks[-1] - ticks[0] <= timedelta(days=14)
            else (t.strftime("%d %b %Y"))
        )
    return t.strftime("%H:%M\n%d %b") if t.hour == 0 or t == ticks[0] else t.strftime("%H:%M")


def durations_chart(data: ReportData) -> str | None:
    if not data.durations:
        return None
    rows = list(reversed(data.durations))
    fig, ax = _figure(1.0 + 0.55 * len(rows))
    ys = list(range(len(rows)))
    ax.barh([y + 0.18 for y in ys], [r.p50_seconds for r in rows], height=0.34,
            color=COLOURS["p50"], label="p50")  # fmt: skip
    ax.barh([y - 0.18 for y in ys], [r.p95_seconds for r in rows], height=0.34,
            color=COLOURS["p95"], label="p95")  # fmt: skip
    _label_bars(ax, "{:.1f} s")
    ax.set_yticks(ys, [r.task_type for r in rows])
    ax.set_xlabel("seconds from start to completion")
    ax.set_xlim(0, max(r.p95_seconds for r in rows) * 1.2 + 0.1)
    ax.legend(loc="lower right", fontsize=9, frameon=False, ncols=2, bbox_to_anchor=(1, 1))
    return _svg(fig, "durations")


def embeddings_chart(data: ReportData) -> str | None:
    emb = data.embeddings
    if emb.billed + emb.reused == 0:
        return None
    fig, ax = _figure(1.8)
    names = ["reused (already indexed)", "billed (newly embedded)"]
    ax.barh(names, [emb.reused, emb.billed], height=0.55,
            color=[COLOURS["reused"], COLOURS["billed"]])  # fmt: skip
    _label_bars(ax, "{:,.0f}")
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_xlabel("chunks")
    ax.set_xlim(0, max(emb.billed, emb.reused) * 1.15 + 1)
    return _svg(fig, "embeddings")


CHARTS: list[tuple[str, Draw]] = [
    ("tasks", tasks_chart),
    ("throughput", throughput_chart),
    ("durations", durations_chart),
    ("embeddings", embeddings_chart),
]
