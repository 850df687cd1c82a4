"""The report as a person reads it: one self-contained HTML file, charts as inline SVG
(drawn by charts.py). A chart with nothing to show is replaced by a sentence saying so.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from html import escape

from knowledgeops.reports.data import STATUSES, ReportData

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
