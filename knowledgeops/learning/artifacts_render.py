"""Artifacts as readable Markdown, and a mind map as Mermaid (`mindmap` diagram)."""

from __future__ import annotations

import re

from knowledgeops.contracts.artifacts import (
    GlossaryEntry,
    MindMap,
    OutlineItem,
    QuizQuestion,
    Summary,
)

# Characters that open or close a Mermaid mindmap node shape; never part of node text.
_MERMAID_SHAPES = re.compile(r"[()\[\]{}\"`<>]")


def summary_md(s: Summary) -> str:
    points = "\n".join(f"- {p.text} (chunk {p.chunk})" for p in s.key_points)
    return f"# Summary\n\n{s.summary}\n" + (f"\n## Key points\n\n{points}\n" if points else "")


def outline_md(items: list[OutlineItem]) -> str:
    lines = [f"{'  ' * (max(i.level, 1) - 1)}- {i.title} (chunk {i.chunk})" for i in items]
    return "# Outline\n\n" + "\n".join(lines) + "\n"


def glossary_md(entries: list[GlossaryEntry]) -> str:
    lines = [f"- **{e.term}**: {e.definition} (chunk {e.chunk})" for e in entries]
    return "# Glossary\n\n" + "\n".join(lines) + "\n"


def quiz_md(questions: list[QuizQuestion]) -> str:
    lines = [
        f"{n}. {q.question}\n   - Answer: {q.answer} (chunk {q.chunk})"
        for n, q in enumerate(questions, 1)
    ]
    return "# Quiz\n\n" + "\n".join(lines) + "\n"


def mindmap_md(m: MindMap) -> str:
    lines = [f"# {m.central_topic}", ""]
    for b in m.branches:
        lines.append(f"- {b.topic} (chunk {b.chunk})")
        lines.extend(f"  - {p}" for p in b.points)
    return "\n".join(lines) + "\n"


def _node(text: str, limit: int = 80) -> str:
    clean = " ".join(_MERMAID_SHAPES.sub(" ", text).split())
    return (clean[: limit - 1] + "…" if len(clean) > limit else clean) or "-"


def mermaid(m: MindMap) -> str:
    lines = ["mindmap", f"  root(({_node(m.central_topic)}))"]
    for b in m.branches:
        lines.append(f"    {_node(b.topic)}")
        lines.extend(f"      {_node(p)}" for p in b.points)
    return "\n".join(lines) + "\n"
