"""Live progress bars for `knowledgeops import --follow`."""

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

from starter.service import JobStatus, TaskQueueService


async def follow(
    service: TaskQueueService, jobs: list[tuple[str, str]], *, quiet: bool = False
) -> list[JobStatus]:
    """Poll each job until it finishes; returns the final statuses in the given order."""
    console = Console(stderr=quiet)
    final: dict[str, JobStatus] = {}
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
            job_id: progress.add_task("", total=None, name=name[-40:], stage="pending")
            for name, job_id in jobs
        }
        while len(final) < len(jobs):
            for _, job_id in jobs:
                if job_id in final:
                    continue
                st = await service.get_status(job_id)
                label = st.progress.stage if st.status == "running" else st.status
                if st.last_error and not st.finished:
                    label += f" (retrying: {st.last_error[:60]})"
                progress.update(
                    bars[job_id], total=st.progress.total, completed=st.progress.done, stage=label
                )
                if st.finished:
                    final[job_id] = st
            await asyncio.sleep(0.5)
    for name, job_id in jobs:
        st = final[job_id]
        if st.status != "completed" and not quiet:
            console.print(f"[red]{name}: {st.status}[/red] {st.last_error or ''}")
    return [final[j] for _, j in jobs]
