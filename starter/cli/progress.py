"""Live progress bars for `knowledgeops import --follow` and `knowledgeops run --follow`."""

from __future__ import annotations

import asyncio

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

from starter.services.task_models import TaskStatus
from starter.services.tasks import TaskQueueService


async def follow(
    service: TaskQueueService, tasks: list[tuple[str, str]], *, quiet: bool = False
) -> list[TaskStatus]:
    """Poll each task until it finishes; returns the final statuses in the given order."""
    console = Console(stderr=quiet)
    final: dict[str, TaskStatus] = {}
    with Progress(
        TextColumn("{task.fields[name]}", style="bold"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stage]}"),
        TimeRemainingColumn(),
        console=console,
        disable=quiet,
        transient=False,
    ) as progress:
        bars = {
            task_id: progress.add_task("", total=None, name=name[-40:], stage="pending")
            for name, task_id in tasks
        }
        while len(final) < len(tasks):
            for _, task_id in tasks:
                if task_id in final:
                    continue
                st = await service.get_status(task_id)
                label = st.progress.stage if st.status == "running" else st.status
                if st.last_error and not st.finished:
                    label += f" (retrying: {st.last_error[:60]})"
                progress.update(
                    bars[task_id], total=st.progress.total, completed=st.progress.done, stage=label
                )
                if st.finished:
                    final[task_id] = st
            await asyncio.sleep(0.5)
    for name, task_id in tasks:
        st = final[task_id]
        if st.status != "completed" and not quiet:
            console.print(f"[red]{name}: {st.status}[/red] {st.last_error or ''}")
    return [final[j] for _, j in tasks]
