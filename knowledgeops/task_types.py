"""The one registry of task types.

Every task type of the platform is declared here with its workflow, payload model, task queue,
timeouts and retry policies. Workflows read their activity options from here and starters
read queues and workflow names from here, so no module invents its own. `tests/test_registry.py`
enforces the rules (bounded retries, heartbeats on long activities).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from pydantic import BaseModel
from temporalio.common import RetryPolicy, SearchAttributeKey

from knowledgeops import payloads
from knowledgeops.models import DocumentImportPayload

# Keyword search attribute set on every workflow we start; operators filter by it in the Web UI.
TASK_TYPE_SEARCH_ATTRIBUTE = SearchAttributeKey.for_keyword("TaskType")
# Longest heartbeat timeout the product allows: nothing runs 30 minutes unobserved.
MAX_HEARTBEAT_TIMEOUT = timedelta(minutes=30)


class TaskType(StrEnum):
    DOCUMENT_IMPORT = "DOCUMENT_IMPORT"
    OCR_PROCESS = "OCR_PROCESS"
    VISION_ANALYZE = "VISION_ANALYZE"
    EMBEDDING_GENERATE = "EMBEDDING_GENERATE"
    INDEXING_UPSERT = "INDEXING_UPSERT"
    GENERATE_ARTIFACT = "GENERATE_ARTIFACT"
    AI_ANALYSIS = "AI_ANALYSIS"
    GENERATE_REVIEW_CARD = "GENERATE_REVIEW_CARD"
    BACKUP_EXECUTE = "BACKUP_EXECUTE"
    CLEANUP_EXECUTE = "CLEANUP_EXECUTE"
    AGENT_TASK = "AGENT_TASK"
    REPORT_GENERATE = "REPORT_GENERATE"


class TaskQueue(StrEnum):
    # Split by resource profile so pools can scale separately (CPU-bound ingest vs. API-bound AI).
    INGEST = "knowledgeops-ingest"
    AI = "knowledgeops-ai"
    MAINTENANCE = "knowledgeops-maintenance"
    AGENTS = "knowledgeops-agents"


@dataclass(frozen=True)
class ActivitySpec:
    start_to_close: timedelta
    retry_policy: RetryPolicy
    heartbeat_timeout: timedelta | None = None


@dataclass(frozen=True)
class TaskSpec:
    task_type: TaskType
    payload_model: type[BaseModel]
    task_queue: TaskQueue
    # Workflow type name; None while the type has no workflow yet.
    workflow: str | None
    execution_timeout: timedelta
    activities: dict[str, ActivitySpec] = field(default_factory=dict)
    description: str = ""

    @property
    def implemented(self) -> bool:
        return self.workflow is not None


def _retry(attempts: int, *, initial: float = 1.0, maximum: float = 60.0) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=initial),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=maximum),
        maximum_attempts=attempts,
    )


# Activities every implemented workflow uses (registered on every task queue).
COMMON_ACTIVITIES = {
    # Domain events go to the app database (a local activity: see workflows/task_events.py);
    # the database may be briefly unavailable, so retry long.
    "record_task_events": ActivitySpec(
        start_to_close=timedelta(seconds=30),
        retry_policy=_retry(30, initial=1.0, maximum=60.0),
    ),
}

_IMPORT_ACTIVITIES = {
    **COMMON_ACTIVITIES,
    # Parsing runs in a subprocess and heartbeats while it waits for it.
    "parse_document": ActivitySpec(
        start_to_close=timedelta(minutes=30),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=_retry(3),
    ),
    # One activity embeds a whole document batch by batch; the heartbeat carries the checkpoint.
    "embed_and_upsert": ActivitySpec(
        start_to_close=timedelta(hours=4),
        heartbeat_timeout=timedelta(seconds=20),
        retry_policy=_retry(8, initial=2.0),
    ),
    "delete_document_points": ActivitySpec(
        start_to_close=timedelta(minutes=5),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=_retry(10),
    ),
}


def _planned(
    task_type: TaskType, model: type[BaseModel], queue: TaskQueue, description: str
) -> TaskSpec:
    return TaskSpec(
        task_type=task_type,
        payload_model=model,
        task_queue=queue,
        workflow=None,
        execution_timeout=timedelta(hours=6),
        description=description,
    )


REGISTRY: dict[TaskType, TaskSpec] = {
    spec.task_type: spec
    for spec in [
        TaskSpec(
            task_type=TaskType.DOCUMENT_IMPORT,
            payload_model=DocumentImportPayload,
            task_queue=TaskQueue.INGEST,
            workflow="DocumentImport",
            execution_timeout=timedelta(hours=12),
            activities=_IMPORT_ACTIVITIES,
            description="Parse, chunk, embed and index a stored file so it becomes searchable.",
        ),
        _planned(TaskType.OCR_PROCESS, payloads.OcrPayload, TaskQueue.INGEST, "OCR a scan."),
        _planned(
            TaskType.VISION_ANALYZE,
            payloads.VisionAnalyzePayload,
            TaskQueue.AI,
            "Describe images and figures with a vision model.",
        ),
        _planned(
            TaskType.EMBEDDING_GENERATE,
            payloads.EmbeddingGeneratePayload,
            TaskQueue.INGEST,
            "Embed a chunk range of a stored document.",
        ),
        _planned(
            TaskType.INDEXING_UPSERT,
            payloads.IndexingUpsertPayload,
            TaskQueue.INGEST,
            "Upsert embedded chunks into the vector index.",
        ),
        _planned(
            TaskType.GENERATE_ARTIFACT,
            payloads.GenerateArtifactPayload,
            TaskQueue.AI,
            "Summaries, outlines, mind maps, quizzes.",
        ),
        _planned(
            TaskType.AI_ANALYSIS, payloads.AiAnalysisPayload, TaskQueue.AI, "Answer about a doc."
        ),
        _planned(
            TaskType.GENERATE_REVIEW_CARD,
            payloads.GenerateReviewCardPayload,
            TaskQueue.AI,
            "Spaced-repetition review cards.",
        ),
        _planned(
            TaskType.BACKUP_EXECUTE,
            payloads.BackupExecutePayload,
            TaskQueue.MAINTENANCE,
            "Back up stored files, chunks and index.",
        ),
        _planned(
            TaskType.CLEANUP_EXECUTE,
            payloads.CleanupExecutePayload,
            TaskQueue.MAINTENANCE,
            "Remove orphaned files, chunks and points.",
        ),
        _planned(TaskType.AGENT_TASK, payloads.AgentTaskPayload, TaskQueue.AGENTS, "Run an agent."),
        _planned(
            TaskType.REPORT_GENERATE,
            payloads.ReportGeneratePayload,
            TaskQueue.MAINTENANCE,
            "Usage and learning reports.",
        ),
    ]
}


class TaskNotImplementedError(LookupError):
    """The task type is registered but its workflow does not exist yet."""


def spec_for(task_type: TaskType | str) -> TaskSpec:
    try:
        tt = TaskType(task_type)
    except ValueError:
        known = ", ".join(t.value for t in TaskType)
        raise LookupError(f"Unknown task type {task_type!r}; known types: {known}") from None
    return REGISTRY[tt]


def activity_spec(task_type: TaskType, activity_name: str) -> ActivitySpec:
    return REGISTRY[task_type].activities[activity_name]
