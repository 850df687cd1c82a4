"""What the CLI's command modules share: who acts, the task service, following tasks.

Imports of the heavy modules (Temporal client, database) stay inside the functions, so a
command that needs none of them starts fast."""

from __future__ import annotations

import argparse
import json
import os
import textwrap
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx

from knowledgeops.config.settings import Settings

if TYPE_CHECKING:
    from starter.services.tasks import TaskQueueService
from starter.services.task_models import TaskStatus

# Width of an epilog's lines: argparse wraps help texts to the terminal, but an epilog is kept
# as written (RawDescriptionHelpFormatter), so it is wrapped here.
EPILOG_WIDTH = 79


def add_command(
    sub: Any, name: str, text: str, *, epilog: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand: `text` is its line in the parent's listing and opens its own --help; its
    epilog (exit codes, task types) keeps the lines `epilog_section` gave it."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=text,
        description=textwrap.fill(text, EPILOG_WIDTH),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def epilog_section(title: str, rows: Iterable[tuple[object, str]], width: int = 5) -> str:
    """`title:` then one `key  text` row each, the text wrapped under itself."""
    lines = [f"{title}:"]
    for key, text in rows:
        lines += textwrap.wrap(
            text,
            EPILOG_WIDTH,
            initial_indent=f"  {key!s:<{width}} ",
            subsequent_indent=" " * (width + 3),
            break_on_hyphens=False,
        )
    return "\n".join(lines)


def exit_codes(*rows: tuple[int, str]) -> str:
    """The `exit codes:` section of a command's epilog: the codes it adds to the common ones
    (`knowledgeops --help`); the texts of one code are joined into one row."""
    merged: dict[int, list[str]] = {}
    for code, text in rows:
        merged.setdefault(code, []).append(text)
    return epilog_section(
        "exit codes (besides those of `knowledgeops --help`)",
        [(code, "; ".join(texts)) for code, texts in sorted(merged.items())],
    )


# What follow_and_report makes of a followed task, for the epilogs of the commands that follow.
FOLLOW_CODE = (
    1,
    "with --follow: the task did not complete (failed, cancelled, terminated, timed out)",
)


def actor() -> str:
    """Who the audit log names for a CLI action."""
    return f"cli:{os.environ.get('USER', 'unknown')}"[:200]  # the audit column's width


@asynccontextmanager
async def task_service(settings: Settings) -> AsyncIterator[TaskQueueService]:
    """A TaskQueueService with the database (the audit log and the document catalogue)."""
    from knowledgeops.db.database import open_prepared
    from knowledgeops.runtime.temporal import connect
    from starter.services.tasks import TaskQueueService

    client = await connect(settings)
    db = await open_prepared(settings)
    service = TaskQueueService(client, settings, db)
    try:
        yield service
    finally:
        await service.listed()
        await db.close()


@asynccontextmanager
async def task_follower(settings: Settings) -> AsyncIterator[TaskQueueService]:
    """A TaskQueueService for reading tasks only: Temporal, no database (a CLI on another
    machine than the server has none of its own to open)."""
    from knowledgeops.runtime.temporal import connect
    from starter.services.tasks import TaskQueueService

    yield TaskQueueService(await connect(settings), settings)


async def follow_and_report(
    service: TaskQueueService, tasks: list[tuple[str, str]], *, quiet: bool
) -> int:
    """Progress bars until every task finishes; exit code 0 only if all completed."""
    from starter.cli.progress import follow

    statuses = await follow(service, tasks, quiet=quiet)
    if quiet:
        print(json.dumps([s.model_dump(mode="json") for s in statuses], indent=2))
    return 0 if all(s.status == "completed" for s in statuses) else 1


def print_status(st: TaskStatus) -> None:
    p = st.progress
    done = f"{p.done}/{p.total}" if p.total is not None else f"{p.done}"
    print(f"task:     {st.task_id}  ({st.task_type})")
    print(f"status:   {st.status}   stage: {p.stage}   {p.unit}: {done}")
    if p.eta_seconds is not None:
        print(f"eta:      {p.eta_seconds:.0f}s")
    if st.attempts > 1:
        print(f"attempts: {st.attempts}")
    if st.last_error:
        print(f"error:    {st.last_error}")
    if st.result:
        print(f"result:   {json.dumps(st.result, ensure_ascii=False)}")


def problem_detail(r: httpx.Response) -> str:
    """What an error answer of the API says: its problem's `detail` (docs/api.md, "Errors"), or
    the raw body when a proxy in between answered instead."""
    try:
        return str(r.json()["detail"])
    except (ValueError, KeyError, TypeError):
        return r.text
