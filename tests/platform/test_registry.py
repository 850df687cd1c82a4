"""The registry's rules: every type declared, bounded retries, heartbeats on long activities,
and every workflow and activity implementation registered exactly once, with the types its
contract promises."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from types import MethodType, ModuleType
from typing import Any, cast

import pytest

import activities
import knowledgeops.contracts
import workflows
from knowledgeops.contracts.base import ActivityRef
from knowledgeops.registry.task_types import (
    COMMON_ACTIVITIES,
    COMMON_ACTIVITY_CLASSES,
    MAX_HEARTBEAT_TIMEOUT,
    REGISTRY,
    Pool,
    TaskType,
    load,
    spec_for,
)
from knowledgeops.runtime.resources import Resources
from tests.helpers.environment import Env
from worker import plan_queues

# An activity allowed to run longer than this must heartbeat.
SHORT_ACTIVITY = timedelta(seconds=30)


def _modules(package: ModuleType) -> list[ModuleType]:
    return [
        importlib.import_module(m.name)
        for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
    ]


def _activity_defs(cls: type) -> dict[str, Any]:
    """Activity name -> function, for the @activity.defn methods a class defines."""
    return {
        fn.__temporal_activity_definition.name: fn
        for fn in vars(cls).values()
        if hasattr(fn, "__temporal_activity_definition")
    }


def _defined(package: ModuleType, is_implementation: Callable[[type], bool]) -> set[str]:
    """Import paths of the implementation classes a package defines."""
    return {
        f"{module.__name__}:{name}"
        for module in _modules(package)
        for name, obj in vars(module).items()
        if inspect.isclass(obj) and obj.__module__ == module.__name__ and is_implementation(obj)
    }


def _is_workflow(cls: type) -> bool:
    return "__temporal_workflow_definition" in vars(cls)


def test_every_task_type_is_registered() -> None:
    assert set(REGISTRY) == set(TaskType)
    # The product's twelve, the document delete and the batch import (a folder).
    assert len(REGISTRY) == 14


@pytest.mark.parametrize("task_type", list(TaskType))
def test_activity_rules(task_type: TaskType) -> None:
    spec = REGISTRY[task_type]
    assert spec.execution_timeout > timedelta(0)
    for name, act in {**spec.activities, **COMMON_ACTIVITIES}.items():
        assert act.retry_policy.maximum_attempts > 0, f"{task_type}.{name}: unbounded retries"
        if act.start_to_close > SHORT_ACTIVITY:
            assert act.heartbeat_timeout is not None, f"{task_type}.{name} must heartbeat"
        if act.heartbeat_timeout is not None:
            assert act.heartbeat_timeout <= MAX_HEARTBEAT_TIMEOUT, f"{task_type}.{name}"
            assert act.heartbeat_timeout < act.start_to_close


def test_every_workflow_is_registered_exactly_once() -> None:
    named = Counter(s.workflow_class for s in REGISTRY.values() if s.workflow_class)
    assert set(named) == _defined(workflows, _is_workflow)
    assert max(named.values()) == 1, f"a workflow serves two task types: {named}"
    for spec in REGISTRY.values():
        definition = load(spec.workflow_class).__temporal_workflow_definition
        assert definition.name == spec.workflow_name, spec.task_type
        assert spec.result_model is not None, spec.task_type


def test_every_activity_is_registered_exactly_once_with_its_options() -> None:
    classes = set(COMMON_ACTIVITY_CLASSES) | {
        path for spec in REGISTRY.values() for path in spec.activity_classes
    }
    defined = _defined(activities, lambda c: bool(_activity_defs(c)))
    assert classes == defined, "an activity class nobody registers (or a path to nothing)"
    names = Counter(name for path in classes for name in _activity_defs(load(path)))
    assert max(names.values()) == 1, f"an activity name is implemented twice: {names}"
    common = {n for p in COMMON_ACTIVITY_CLASSES for n in _activity_defs(load(p))}
    assert common == set(COMMON_ACTIVITIES)
    for spec in REGISTRY.values():
        implemented = {n for p in spec.activity_classes for n in _activity_defs(load(p))}
        assert implemented == set(spec.activities), f"{spec.task_type}: options vs. classes"


def test_activity_refs_match_their_implementations() -> None:
    implementations = {
        name: fn
        for path in {p for s in REGISTRY.values() for p in s.activity_classes}
        | set(COMMON_ACTIVITY_CLASSES)
        for name, fn in _activity_defs(load(path)).items()
    }
    refs = [
        obj
        for module in _modules(knowledgeops.contracts)
        for obj in vars(module).values()
        if isinstance(obj, ActivityRef)
    ]
    assert {r.name for r in refs} == set(implementations)
    for ref in refs:
        hints = typing.get_type_hints(implementations[ref.name])
        [arg] = [v for k, v in hints.items() if k != "return"]
        assert (arg, hints["return"]) == (ref.input, ref.output), ref.name


# Where each workflow type runs and which queues each pool serves, as the product documents
# them (docs/task-types.md, docs/deployment.md), written out: the worker's rule
# (worker.plan_queues) is what is tested, so it must not also produce what is expected.
WORKFLOW_QUEUES = {
    "DocumentImport": "knowledgeops-ingest",
    "DocumentDelete": "knowledgeops-ingest",
    "DocumentBatchImport": "knowledgeops-ingest",
    "OcrProcess": "knowledgeops-ingest",
    "EmbeddingGenerate": "knowledgeops-ingest",
    "IndexingUpsert": "knowledgeops-ingest",
    "GenerateArtifact": "knowledgeops-ai",
    "AiAnalysis": "knowledgeops-ai",
    "GenerateReviewCards": "knowledgeops-ai",
    "VisionAnalyze": "knowledgeops-ai",
    "AgentTask": "knowledgeops-agents",
    "BackupExecute": "knowledgeops-maintenance",
    "CleanupExecute": "knowledgeops-maintenance",
    "ReportGenerate": "knowledgeops-maintenance",
}
# Parsing's queue of its own: no workflow, only the parse and chunk steps, PARSER_CONCURRENCY
# at once.
PARSE_QUEUE = "knowledgeops-parse"
PARSE_STEPS = {"parse_document", "chunk_document"}
POOL_QUEUES = {
    Pool.PARSE: {"knowledgeops-parse"},
    Pool.INGEST: {"knowledgeops-ingest"},
    Pool.AI: {"knowledgeops-ai", "knowledgeops-agents"},
    Pool.MAINTENANCE: {"knowledgeops-maintenance"},
}


async def test_worker_registers_each_queue_once(env: Env) -> None:
    cfg = env.settings.model_copy(update={"parser_concurrency": 3})
    resources = Resources(cfg, env.db, env.store, env.embedder)
    plans = plan_queues(resources)
    q = cfg.queue  # the name with this deployment's prefix
    assert set(plans) == {q(name) for name in {*WORKFLOW_QUEUES.values(), PARSE_QUEUE}}
    # Each workflow type on the one queue it is documented on (none on the parse queue).
    registered = [
        (cast(Any, wf).__temporal_workflow_definition.name, queue)
        for queue, plan in plans.items()
        for wf in plan.workflows
    ]
    assert sorted(registered) == sorted((wf, q(queue)) for wf, queue in WORKFLOW_QUEUES.items())
    # A queue's worker runs what its workflows run, queued or as local activities (a small
    # document's parse and chunk steps run on the import's queue), and nothing else.
    for queue, plan in plans.items():
        if queue == q(PARSE_QUEUE):
            assert set(plan.activities) == PARSE_STEPS and plan.max_activities == 3
            continue
        runs = set(COMMON_ACTIVITIES) | {
            name
            for spec in REGISTRY.values()
            if q(WORKFLOW_QUEUES[spec.workflow_name]) == queue
            for name in spec.activities
        }
        assert set(plan.activities) == runs, queue
        assert plan.max_activities is None, queue  # WORKER_MAX_ACTIVITIES
    assert set(plans[q("knowledgeops-ingest")].activities) >= PARSE_STEPS
    # One instance per activity class in a worker, whatever queues it serves (one express
    # parser for the small documents of every type).
    owners: dict[type, set[int]] = {}
    for plan in plans.values():
        for method in plan.activities.values():
            owner = cast(MethodType, method).__self__
            owners.setdefault(type(owner), set()).add(id(owner))
    assert all(len(ids) == 1 for ids in owners.values()), owners
    # A worker started for some pools serves their queues only; a parse worker still runs
    # both steps, PARSER_CONCURRENCY at once.
    for pool, names in POOL_QUEUES.items():
        assert set(plan_queues(resources, [pool])) == {q(name) for name in names}, pool
    parse_only = plan_queues(resources, [Pool.PARSE])[q(PARSE_QUEUE)]
    assert set(parse_only.activities) == PARSE_STEPS and parse_only.max_activities == 3


def test_unknown_type_is_a_clear_error() -> None:
    with pytest.raises(LookupError, match="Unknown task type 'NOPE'"):
        spec_for("NOPE")


def test_every_task_type_has_its_workflow() -> None:
    for spec in REGISTRY.values():
        assert load(spec.workflow_class).__temporal_workflow_definition.name == spec.workflow_name
