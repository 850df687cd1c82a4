"""A diagnosis as the text a model merges, and an analysis (diagnosis or answer check) as
readable Markdown."""

from __future__ import annotations

from knowledgeops.contracts.analysis import AnalysisOutput, Diagnosis


def diagnosis_text(d: Diagnosis) -> str:
    lines = [f"Difficulty: {d.difficulty} ({d.difficulty_reason})"]
    lines += [f"- concept {c.name} [chunk {c.chunk}]: {c.explanation}" for c in d.key_concepts]
    lines += [f"- prerequisite: {p}" for p in d.prerequisites]
    lines += [f"- gap [chunk {g.chunk}]: {g.description}" for g in d.gaps]
    return "\n".join(lines)


def analysis_md(out: AnalysisOutput) -> str:
    lines = [f"# {out.title}: {'diagnosis' if out.mode == 'diagnosis' else 'answer check'}", ""]
    if out.diagnosis is not None:
        d = out.diagnosis
        lines += [f"**Difficulty:** {d.difficulty} ({d.difficulty_reason})", "", "## Key concepts"]
        lines += [f"- **{c.name}**: {c.explanation} (chunk {c.chunk})" for c in d.key_concepts]
        if d.prerequisites:
            lines += ["", "## Prerequisites", *(f"- {p}" for p in d.prerequisites)]
        if d.gaps:
            lines += ["", "## Gaps", *(f"- {g.description} (chunk {g.chunk})" for g in d.gaps)]
    if out.answer_check is not None:
        a = out.answer_check
        lines += [f"**Question:** {out.question}", "", f"**Answer:** {out.answer}", ""]
        lines += [f"**Verdict:** {a.verdict}", "", a.feedback]
        if a.missing:
            lines += ["", "## Missing", *(f"- {m}" for m in a.missing)]
        if a.misconceptions:
            lines += ["", "## Misconceptions", *(f"- {m}" for m in a.misconceptions)]
        if a.citations:
            lines += ["", "Sources: " + ", ".join(f"chunk {c}" for c in a.citations)]
    return "\n".join(lines) + "\n"
