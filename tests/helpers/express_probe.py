"""A workflow that reports whether its activities (one local, one queued) ran express: on its
own module, which the workflow sandbox imports (nothing here touches files)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

from knowledgeops.db.write_turns import EXPRESS


@activity.defn
async def marked_express() -> bool:
    return EXPRESS.get()


@workflow.defn
class ReportsExpress:
    @workflow.run
    async def run(self) -> list[bool]:
        timeout = timedelta(seconds=30)
        local = await workflow.execute_local_activity(
            marked_express, start_to_close_timeout=timeout
        )
        queued = await workflow.execute_activity(marked_express, start_to_close_timeout=timeout)
        return [local, queued]
