"""The worker process: opens the resources once, registers what the registry declares, runs,
and shuts down cleanly on SIGINT / SIGTERM.

Run with `python worker.py` or `knowledgeops worker`. With the embedded Qdrant (no QDRANT_URL)
this process owns the index, so it also serves the HTTP API (`--no-api` to skip): embedded
Qdrant admits one process per folder. With QDRANT_URL set, any number of workers and API
processes run side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.ingest.parser_pool import POOL as PARSER_POOL
from knowledgeops import metrics, tracing
from knowledgeops.operator_actions import OperatorActions
from knowledgeops.resources import Resources, open_resources
from knowledgeops.schedules import ensure_schedules
from knowledgeops.settings import Settings, SettingsError, load_settings
from knowledgeops.task_types import COMMON_ACTIVITY_CLASSES, REGISTRY, TaskQueue, load
from knowledgeops.temporal import connect, ensure_search_attributes
from starter.http.serve import ApiServer
from starter.processes import configure_logging, run_until_stopped, until_signal

log = logging.getLogger("knowledgeops.worker")

# Heartbeats reach the server at most this often (the SDK default is 0.8 x heartbeat timeout):
# fresh checkpoints mean less re-embedding after a crash, live progress and prompt cancels.
HEARTBEAT_THROTTLE = timedelta(seconds=1)


@dataclass
class QueuePlan:
    """What one task queue's worker registers."""

    workflows: list[type] = field(default_factory=list)
    activities: dict[str, Callable[..., Any]] = field(default_factory=dict)
    # Activities its worker runs at once; None: WORKER_MAX_ACTIVITIES.
    max_activities: int | None = None


# Queues whose worker runs fewer activities at once than WORKER_MAX_ACTIVITIES.
QUEUE_CAPACITY: dict[TaskQueue, Callable[[Settings], int]] = {
    TaskQueue.PARSE: lambda s: s.parser_concurrency,
}


def activity_methods(obj: object) -> dict[str, Callable[..., Any]]:
    """Activity name -> bound method, for every `@activity.defn` method of an instance."""
    found: dict[str, Callable[..., Any]] = {}
    for _, method in inspect.getmembers(obj, inspect.ismethod):
        definition = getattr(method, "__temporal_activity_definition", None)
        if definition is not None:
            found[definition.name] = method
    return found


def plan_queues(resources: Resources) -> dict[str, QueuePlan]:
    """Per task queue, the workflows and activities of its implemented task types. Activity
    classes are built once each, so types that share one (and its resources) share it."""
    instances: dict[str, object] = {}
    plans: dict[str, QueuePlan] = {}
    for spec in REGISTRY.values():
        if spec.workflow_class is None:
            continue
        plan = plans.setdefault(resources.settings.queue(spec.task_queue.value), QueuePlan())
        workflow_cls = load(spec.workflow_class)
        if workflow_cls not in plan.workflows:
            plan.workflows.append(workflow_cls)
        for path in (*COMMON_ACTIVITY_CLASSES, *spec.activity_classes):
            if path not in instances:
                instances[path] = load(path)(resources)
            for name, method in activity_methods(instances[path]).items():
                # On the type's own queue too when the activity has a queue of its own: its
                # workflows run it there as a local activity for a small document.
                plan.activities[name] = method
                own = spec.activities.get(name)
                if own is not None and own.task_queue is not None:
                    capacity = QUEUE_CAPACITY.get(own.task_queue)
                    other = plans.setdefault(
                        resources.settings.queue(own.task_queue.value), QueuePlan()
                    )
                    other.activities[name] = method
                    other.max_activities = capacity(resources.settings) if capacity else None
    return plans


def build_workers(client: Client, resources: Resources) -> Sequence[Worker]:
    """One worker per task queue that has implemented task types."""
    return [
        Worker(
            client,
            task_queue=queue,
            workflows=plan.workflows,
            activities=list(plan.activities.values()),
            max_concurrent_activities=plan.max_activities
            or resources.settings.worker_max_activities,
            max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
            default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
            graceful_shutdown_timeout=timedelta(
                seconds=resources.settings.worker_shutdown_grace_seconds
            ),
        )
        for queue, plan in plan_queues(resources).items()
    ]


async def run_worker(
    settings: Settings,
    stop: asyncio.Event,
    *,
    serve_api: bool,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Workers (and the API, when this process owns the embedded index) until `stop`."""
    client = await connect(settings, sdk_metrics=True)
    await ensure_search_attributes(client, settings.temporal_namespace)
    await ensure_schedules(client, settings)
    async with open_resources(settings) as resources:
        api = None
        if serve_api:
            # Before the workers: a port in use stops start-up before any task is taken.
            # Its own client: requests fail fast (503) while the workers' client keeps retrying.
            api = ApiServer(await connect(settings, fail_fast=True), resources, stop)
        workers = build_workers(client, resources)
        tasks = [asyncio.create_task(w.run()) for w in workers]
        # What operators do in Temporal's Web UI / CLI shows up in our events and audit log.
        reconciler = OperatorActions(client, settings, resources.db)
        tasks.append(asyncio.create_task(reconciler.run(stop)))
        if api is not None:
            tasks += api.start()
        elif settings.metrics_address:
            metrics.serve(settings.metrics_address)
        if on_ready:
            on_ready()
        try:
            await run_until_stopped(tasks, stop)
        finally:
            if api is not None:
                api.stop()
            await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
            await asyncio.gather(*tasks, return_exceptions=True)
            # After the workers: no parse is running any more, so no warm parser is needed.
            PARSER_POOL.close()
            tracing.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="worker.py", description=__doc__)
    parser.add_argument("--no-api", action="store_true", help="do not serve the HTTP API")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as e:
        print(e)
        return 2
    configure_logging(settings)
    serve = not settings.qdrant_url and not args.no_api
    try:
        return until_signal(
            lambda stop: run_worker(
                settings,
                stop,
                serve_api=serve,
                on_ready=lambda: log.info(
                    "worker ready on %s%s",
                    settings.temporal_address,
                    f"; API on {settings.resolved_api_url}" if serve else "",
                ),
            )
        )
    except RuntimeError as e:
        log.error("worker stopped: %s", e)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
