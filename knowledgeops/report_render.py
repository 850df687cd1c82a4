"""The report as a person reads it: one self-contained HTML file, charts as inline SVG.

Charts are drawn with matplotlib's object API (no pyplot state, Agg backend) and inlined, text
kept as text (`svg.fonttype: none`), so the file needs nothing else: no scripts, fonts,
stylesheets or images from anywhere. A chart with nothing to show is replaced by a sentence
saying so, never drawn empty.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from html import escape

import matplotlib

matplotlib.use("Agg")
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, StrMethodFormatter

from knowledgeops.reporting import STATUSES, ReportData, hour_of

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

# -- HTML ----------------------------------------------------------------------------------------

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;
 color:#1d2330;background:#f4f5f7;margin:0}
main{max-width:1100px;margin:0 auto;padding:28px 32px 48px;background:#fff;min-height:100vh}
h1{font-size:28px;margin:0 0 4px}h2{font-size:20px;margin:36px 0 10px;
 border-bottom:2px solid #e3e6ec;padding-bottom:4px}
.range{font-size:17px;color:#36415a}.meta{color:#6b7487;font-size:13px;margin-top:4px}
.cards{display:grid;grid-template-columns:repeat(5,1fr);gap:12px;
 margin:22px 0 6px}
.card{border:1px solid #e3e6ec;border-radius:8px;padding:10px 14px;background:#fafbfc}
.card b{display:block;font-size:24px}.card span{color:#6b7487;font-size:13px}
.card.bad b{color:#c62828}
table{border-collapse:collapse;width:100%;margin:10px 0;font-size:14px}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #e3e6ec;vertical-align:top}
th{background:#f0f2f5;font-weight:600}td.n,th.n{text-align:right;
 font-variant-numeric:tabular-nums;white-space:nowrap}
td.msg{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;
 word-break:break-word;color:#3b4254}
.chart svg{width:100%;height:auto;display:block}
.empty{color:#6b7487;font-style:italic;background:#f7f8fa;border:1px dashed #d5d9e0;
 border-radius:6px;padding:18px;text-align:center}
.note{color:#6b7487;font-size:13px}dl.defs{font-size:13px;color:#4b5366}
dl.defs dt{font-weight:600;margin-top:6px}dl.defs dd{margin:0 0 0 14px}
"""


def _fmt_time(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%d %H:%M UTC")


def _span(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    if hours >= 48 and hours % 24 == 0:
        return f"{int(hours // 24)} days"
    return f"{hours:.1f} hours" if hours % 1 else f"{int(hours)} hours"


def _n(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _table(
    head: list[str], rows: list[list[str]], numeric: set[int], code: frozenset[int] = frozenset()
) -> str:
    """Cells are HTML already (escaped by the caller); `numeric` columns align right, `code`
    columns (error messages) are set in a monospace font."""

    def cells(tag: str, values: list[str]) -> str:
        out = []
        for i, v in enumerate(values):
            cls = "n" if i in numeric else "msg" if i in code and tag == "td" else ""
            out.append(f'<{tag} class="{cls}">{v}</{tag}>' if cls else f"<{tag}>{v}</{tag}>")
        return "".join(out)

    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    return f"<table><thead><tr>{cells('th', head)}</tr></thead><tbody>{body}</tbody></table>"


def _chart(svg: str | None, empty: str) -> str:
    return f'<div class="chart">{svg}</div>' if svg else f'<p class="empty">{escape(empty)}</p>'


def render_html(data: ReportData, charts: dict[str, str | None]) -> str:
    e = escape
    h = data.headline
    cards = [
        ("tasks", h.tasks, False), ("completed", h.completed, False),
        ("failed", h.failed, h.failed > 0), ("cancelled", h.cancelled, False),
        ("manual retries", h.manual_retries, False), ("documents", h.documents, False),
        ("chunks indexed", h.chunks, False), ("embeddings billed", h.embeddings_billed, False),
        ("embeddings reused", h.embeddings_reused, False),
    ]  # fmt: skip
    parts = [
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(data.title)}: {e(_fmt_time(data.since))} to {e(_fmt_time(data.until))}"
        f"</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{e(data.title)}</h1>",
        f'<div class="range">{e(_fmt_time(data.since))} &rarr; {e(_fmt_time(data.until))} '
        f"({e(_span(data.until - data.since))})</div>",
        f'<div class="meta">Generated {e(_fmt_time(data.generated_at))} &middot; report '
        f"{e(data.report_id)}</div>",
        '<div class="cards">'
        + "".join(
            f'<div class="card{" bad" if bad else ""}"><b>{_n(v)}</b><span>{e(k)}</span></div>'
            for k, v, bad in cards
        )
        + "</div>",
        "<h2>Tasks by type and status</h2>",
        _chart(charts.get("tasks"), "No tasks in this period."),
    ]
    if data.tasks:
        parts.append(
            _table(
                ["Task type", "Total", *[s.capitalize() for s in STATUSES]],
                [
                    [e(r.task_type), _n(r.total), *[_n(r.by_status.get(s, 0)) for s in STATUSES]]
                    for r in data.tasks
                ],
                set(range(1, 2 + len(STATUSES))),
            )
        )
    parts += [
        "<h2>Throughput</h2>",
        _chart(charts.get("throughput"), "No task ended in this period."),
    ]
    if data.throughput:
        ended = sum(x.completed + x.failed + x.cancelled for x in data.throughput)
        parts.append(
            f'<p class="note">{_n(ended)} runs ended; busiest hour: {_n(data.throughput_peak)} '
            f"runs; {len(data.throughput)} hours with activity.</p>"
        )
    parts += [
        "<h2>Durations</h2>",
        _chart(charts.get("durations"), "No task completed in this period."),
    ]
    if data.durations:
        parts.append(
            _table(
                ["Task type", "Completed runs", "p50", "p95", "Slowest"],
                [
                    [
                        e(d.task_type),
                        _n(d.runs),
                        f"{d.p50_seconds:,.1f} s",
                        f"{d.p95_seconds:,.1f} s",
                        f"{d.max_seconds:,.1f} s",
                    ]
                    for d in data.durations
                ],
                {1, 2, 3, 4},
            )
        )
    parts.append(
        f"<h2>Failure reasons (top {len(data.failures)} of {data.failure_reasons_total})</h2>"
        if data.failures
        else "<h2>Failure reasons</h2>"
    )
    if data.failures:
        parts.append(
            _table(
                ["Reason", "Runs", "Task types", "Last seen", "Latest message"],
                [
                    [
                        f"<b>{e(f.reason)}</b>",
                        _n(f.count),
                        e(", ".join(f.task_types)),
                        e(_fmt_time(f.last_at)),
                        e(f.example),
                    ]
                    for f in data.failures
                ],
                {1},
                frozenset({4}),
            )
        )
    else:
        parts.append('<p class="empty">No task failed in this period.</p>')
    r = data.retries
    parts += [
        "<h2>Retries</h2>",
        _table(
            ["Retries", "Count"],
            [
                ["Manual retries started (audit log)", _n(r.manual_started)],
                ["Manual retries refused (task not failed)", _n(r.manual_refused)],
                ["Runs started by a retry (TaskRetried)", _n(r.retried_runs)],
                ["Runs retried automatically (workflow attempt &gt; 1)", _n(r.automatic_runs)],
            ],
            {1},
        ),
    ]
    if r.manual_by_actor:
        who = ", ".join(f"{e(a)} ({n})" for a, n in r.manual_by_actor.items())
        parts.append(f'<p class="note">Manual retries by: {who}.</p>')
    emb = data.embeddings
    ratio = emb.reuse_ratio
    parts += [
        "<h2>Embeddings</h2>",
        _chart(charts.get("embeddings"), "No document import completed in this period."),
    ]
    if emb.imports:
        parts.append(
            f'<p class="note">{_n(emb.imports)} imports completed, {_n(emb.chunks)} chunks: '
            f"{_n(emb.billed)} embedded and billed, {_n(emb.reused)} reused"
            + (f" ({ratio:.0%} of chunks cost nothing)." if ratio is not None else ".")
            + "</p>"
        )
    kb = data.knowledge_base
    parts += ["<h2>Knowledge base now</h2>"]
    if kb.documents:
        rows = [
            ["Documents", _n(kb.documents)],
            *[[f"&nbsp;&nbsp;{e(s)}", _n(c)] for s, c in kb.by_status.items()],
            ["Chunks in the index (ready documents)", _n(kb.chunks)],
            ["Pages (paged formats: PDF)", _n(kb.pages)],
            ["Ready documents without pages (txt, md, html, docx)", _n(kb.documents_without_pages)],
            *[[f"Format: {e(f)}", _n(c)] for f, c in kb.formats.items()],
        ]
        parts.append(_table(["Knowledge base", "Count"], rows, {1}))
    else:
        parts.append('<p class="empty">The knowledge base has no documents yet.</p>')
    parts.append("<h2>How these figures are counted</h2><dl class='defs'>")
    parts += [
        f"<dt>{e(k.replace('_', ' ').capitalize())}</dt><dd>{e(v)}</dd>"
        for k, v in data.definitions.items()
    ]
    parts.append("</dl></main></body></html>")
    return "\n".join(parts)
