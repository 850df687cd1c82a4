"""The worker process: opens the resources once, registers what the registry declares, runs,
and shuts down cleanly on SIGINT / SIGTERM.

Run with `python worker.py` or `knowledgeops worker [--pool NAME ...]`. A worker runs every
pool of work unless told otherwise (`--pool`, WORKER_POOLS; the pools are declared in the
registry, knowledgeops/registry/task_types.py POOLS). With the embedded Qdrant (no QDRANT_URL) the
process of the pools that open the index owns it, so it also serves the HTTP API (`--no-api`
to skip): embedded Qdrant admits one process per folder; a parse-pool worker opens no index and
runs beside it. With QDRANT_URL set, any number of workers and API processes run side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from knowledgeops.backup.database_dump import DumpToolMissingError, check_dump_tools
from knowledgeops.backup.export import backup_store
from knowledgeops.config.loading import load_settings
from knowledgeops.config.settings import Settings
from knowledgeops.config.values import SettingsError, parse_pools
from knowledgeops.db.database import prepare_schema
from knowledgeops.db.migrations import SchemaNotAtHeadError
from knowledgeops.files.data_files import check_storage, keep_working_copy_trimmed
from knowledgeops.ingest.parser_pool import POOL as PARSER_POOL
from knowledgeops.observability import metrics, tracing
from knowledgeops.registry.task_types import (
    COMMON_ACTIVITY_CLASSES,
    POOLS,
    REGISTRY,
    Pool,
    TaskQueue,
    load,
    pool_queues,
)
from knowledgeops.runtime.express import ExpressInterceptor
from knowledgeops.runtime.operator_actions import OperatorActions
from knowledgeops.runtime.outages import OutageInterceptor
from knowledgeops.runtime.resources import Resources, open_resources
from knowledgeops.runtime.schedules import ensure_schedules
from knowledgeops.runtime.temporal import connect, ensure_search_attributes
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


def plan_queues(resources: Resources, pools: Sequence[Pool] = tuple(Pool)) -> dict[str, QueuePlan]:
    """Per task queue of `pools`, the workflows and activities of its task types.
    Activity classes are built once each (and only for a queue served here), so types that
    share one (and its resources) share it."""
    served = pool_queues(pools)
    instances: dict[str, object] = {}
    plans: dict[str, QueuePlan] = {}

    def plan_for(queue: TaskQueue) -> QueuePlan | None:
        if queue not in served:
            return None
        return plans.setdefault(resources.settings.queue(queue.value), QueuePlan())

    for spec in REGISTRY.values():
        plan = plan_for(spec.task_queue)
        if plan is not None:
            workflow_cls = load(spec.workflow_class)
            if workflow_cls not in plan.workflows:
                plan.workflows.append(workflow_cls)
        for path in (*COMMON_ACTIVITY_CLASSES, *spec.activity_classes):
            for name in _activity_names(path):
                # On the type's own queue too when the activity has a queue of its own: its
                # workflows run it there as a local activity for a small document.
                own = spec.activities.get(name)
                other = plan_for(own.task_queue) if own and own.task_queue else None
                if plan is None and other is None:
                    continue
                if path not in instances:
                    instances[path] = load(path)(resources)
                method = activity_methods(instances[path])[name]
                if plan is not None:
                    plan.activities[name] = method
                if other is not None and own is not None and own.task_queue is not None:
                    capacity = QUEUE_CAPACITY.get(own.task_queue)
                    other.activities[name] = method
                    other.max_activities = capacity(resources.settings) if capacity else None
    return plans


def _activity_names(path: str) -> list[str]:
    """The activity names a class (by import path) defines, without building it."""
    found = []
    for _, member in inspect.getmembers(load(path), inspect.isfunction):
        definition = getattr(member, "__temporal_activity_definition", None)
        if definition is not None:
            found.append(definition.name)
    return found


def build_workers(
    client: Client, resources: Resources, pools: Sequence[Pool] = tuple(Pool)
) -> Sequence[Worker]:
    """One worker per task queue of `pools` that has task types."""
    outages = OutageInterceptor(timedelta(seconds=resources.settings.outage_wait_seconds))
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
            # An unreachable service is waited out, not failed on (knowledgeops/runtime/outages.py).
            # Express tasks' writes go first (knowledgeops/runtime/express.py).
            interceptors=[outages, ExpressInterceptor()],
        )
        for queue, plan in plan_queues(resources, pools).items()
    ]


def opens_index(pools: Sequence[Pool]) -> bool:
    return any(POOLS[p].opens_index for p in pools)


async def run_worker(
    settings: Settings,
    stop: asyncio.Event,
    *,
    serve_api: bool,
    on_ready: Callable[[], None] | None = None,
    pools: Sequence[Pool] | None = None,
    migrate: bool = True,
) -> None:
    """Workers of `pools` (None: WORKER_POOLS; every pool unless set), and the API when this
    process owns the embedded index, until `stop`. `migrate=False`: the database's schema was
    prepared already (main: prepare_schema)."""
    pools = list(pools) if pools is not None else parse_pools(settings.worker_pools.split(","))
    await check_storage(settings)
    if Pool.MAINTENANCE in pools and (backups := backup_store(settings)) is not None:
        # A wrong BACKUP_URL or key stops start-up, not the first backup at 3 a.m.
        await backups.check()
    client = await connect(settings, sdk_metrics=True)
    await ensure_search_attributes(client, settings.temporal_namespace)
    await ensure_schedules(client, settings)
    index = opens_index(pools)
    # A parse-only worker needs neither the index nor the model: no lock, no model processes.
    async with open_resources(settings, index=index, warm_up=index, migrate=migrate) as resources:
        await resources.share_live_index()
        api = None
        if serve_api and index:
            # Before the workers: a port in use stops start-up before any task is taken.
            # Its own client: requests fail fast (503) while the workers' client keeps retrying.
            api = ApiServer(await connect(settings, fail_fast=True), resources, stop)
        workers = build_workers(client, resources, pools)
        tasks = [asyncio.create_task(w.run()) for w in workers]
        if resources.files.shared:
            trim = keep_working_copy_trimmed(resources.files, settings, stop)
            tasks.append(asyncio.create_task(trim))
        if Pool.MAINTENANCE in pools:
            # What operators do in Temporal's Web UI / CLI shows up in our events and audit
            # log (one pool's job, so a deployment of many workers does it once per worker
            # of that pool, not in every process).
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
    parser.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="NAME",
        help="run this pool of work (repeatable; default: WORKER_POOLS, else every pool): "
        + ", ".join(f"{p.value} ({POOLS[p].description})" for p in Pool),
    )
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        pools = parse_pools(args.pool or settings.worker_pools.split(","))
    except SettingsError as e:
        print("\n".join(f"error: {line}" for line in str(e).splitlines()), file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: invalid --pool: {e}", file=sys.stderr)
        return 2
    configure_logging(settings)
    serve = not settings.qdrant_url and not args.no_api and opens_index(pools)
    try:
        # Before anything starts (Temporal, schedules): a schema this version cannot use stops it.
        asyncio.run(prepare_schema(settings))
        if Pool.MAINTENANCE in pools:
            # Its backups run pg_dump / pg_restore: a missing or too old one stops start-up,
            # not every night's backup.
            asyncio.run(check_dump_tools(settings))
        return until_signal(
            lambda stop: run_worker(
                settings,
                stop,
                serve_api=serve,
                pools=pools,
                migrate=False,
                on_ready=lambda: log.info(
                    "worker ready on %s (pools: %s)%s",
                    settings.temporal_address,
                    ", ".join(p.value for p in pools),
                    f"; API on {settings.resolved_api_url}" if serve else "",
                ),
            )
        )
    except (SchemaNotAtHeadError, DumpToolMissingError) as e:
        # One line saying what to do, not a log record: nothing has started.
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (RuntimeError, ConnectionError) as e:
        log.error("worker stopped: %s", e)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
