"""How a task presents itself in Temporal's Web UI (its one-line summary and Markdown details),
where operators meet it before anything else."""

from __future__ import annotations

from pydantic import BaseModel

from knowledgeops.registry.task_types import TaskSpec


def document_id_of(payload: BaseModel) -> str | None:
    value = getattr(payload, "document_id", None)
    return value if isinstance(value, str) else None


def one_line(text: str) -> str:
    # The Web UI shows a summary on one line of the workflow list.
    line = " ".join(text.split())
    return line if len(line) <= 200 else line[:199] + "…"


def web_ui_details(
    spec: TaskSpec, payload: BaseModel, requested_by: str | None, owner: str | None
) -> str:
    """The Web UI's details of a task (Markdown): what it is and who asked."""
    lines = [spec.description]
    document_id = document_id_of(payload)
    for label, value in (
        ("Document", document_id),
        ("Owner", owner),
        ("Requested by", requested_by),
    ):
        if value:
            lines.append(f"**{label}:** `{value}`")
    return "\n\n".join(lines)
