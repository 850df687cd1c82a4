"""Express tasks' writes go first: a one-page upload during a bulk import must not queue behind it.

Temporal's priority orders the task queues, but a small document's import runs its steps as
local activities, which carry no priority, and every step ends in the application database,
whose SQLite writers take turns in the worker (`Database.write`). Measured at 50,000 chunks
with 84 imports running, a one-page note's event record waited up to 12 s for its turn behind
the bulk imports' records and publishes (each holding the turn ~0.7 s on a busy event loop).

So an express task's workflow marks every activity it starts with a header, and each activity
so marked (or, run from a task queue, started at EXPRESS_PRIORITY) runs with `EXPRESS` set:
its writes take the next turn, ahead of any waiting bulk writer.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from knowledgeops.db.write_turns import EXPRESS
from knowledgeops.registry.spec import EXPRESS_PRIORITY

HEADER = "knowledgeops-express"
_MARK = Payload(data=b"1")


def _express_workflow() -> bool:
    priority = workflow.info().priority
    return priority is not None and priority.priority_key == EXPRESS_PRIORITY


class ExpressInterceptor(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityInbound(next)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _WorkflowInbound


class _WorkflowInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_WorkflowOutbound(outbound))


class _WorkflowOutbound(WorkflowOutboundInterceptor):
    # Headers are not part of the commands a replay compares: marking is replay-safe.
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        if _express_workflow():
            input.headers = {**input.headers, HEADER: _MARK}
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        if _express_workflow():
            input.headers = {**input.headers, HEADER: _MARK}
        return super().start_local_activity(input)


class _ActivityInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        priority = activity.info().priority
        express = HEADER in input.headers or priority.priority_key == EXPRESS_PRIORITY
        token = EXPRESS.set(express)
        try:
            return await self.next.execute_activity(input)
        finally:
            EXPRESS.reset(token)
