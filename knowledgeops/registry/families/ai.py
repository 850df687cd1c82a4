"""Task types that use a chat or vision model (each with its local method where one exists).

Entries of the one registry (`knowledgeops.registry.task_types.REGISTRY`); see task_types.py.
"""

from __future__ import annotations

from datetime import timedelta

from knowledgeops.contracts.agent import (
    CALL_MODEL,
    CLOSE_TRANSCRIPT,
    OPEN_TRANSCRIPT,
    RECORD_TOOL_RESULT,
    RUN_TOOL,
    AgentResult,
    AgentTaskPayload,
)
from knowledgeops.contracts.analysis import (
    CHECK_ANSWER,
    DIAGNOSE_DOCUMENT,
    DISCARD_ANALYSIS_WORK,
    PLAN_ANALYSIS,
    AiAnalysisPayload,
    AiAnalysisResult,
)
from knowledgeops.contracts.artifacts import (
    DISCARD_ARTIFACT_WORK,
    MAP_ARTIFACT,
    PLAN_ARTIFACT,
    REDUCE_ARTIFACT,
    GenerateArtifactPayload,
    GenerateArtifactResult,
)
from knowledgeops.contracts.review_cards import (
    DISCARD_REVIEW_CARD_WORK,
    DRAFT_REVIEW_CARDS,
    PLAN_REVIEW_CARDS,
    STORE_REVIEW_CARDS,
    GenerateReviewCardPayload,
    ReviewCardResult,
)
from knowledgeops.contracts.vision import (
    ANALYZE_IMAGE,
    VisionAnalyzePayload,
    VisionResult,
)
from knowledgeops.registry.spec import (
    ActivityOptions,
    TaskQueue,
    TaskSpec,
    TaskType,
)
from knowledgeops.registry.spec import retry as _retry

SPECS: list[TaskSpec] = [
    TaskSpec(
        TaskType.VISION_ANALYZE,
        VisionAnalyzePayload,
        TaskQueue.AI,
        "Describe / analyse a stored image or PDF page for an instruction (a vision model, "
        "or the image's properties and OCR text without one).",
        execution_timeout=timedelta(hours=1),
        workflow_name="VisionAnalyze",
        workflow_class="workflows.vision:VisionAnalyzeWorkflow",
        result_model=VisionResult,
        activities={
            # One model call (Retry-After waits included); heartbeats while it waits.
            ANALYZE_IMAGE.name: ActivityOptions(
                start_to_close=timedelta(minutes=15),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=_retry(4, initial=2.0),
            ),
        },
        activity_classes=("activities.vision:VisionActivities",),
        progress_unit="images",
    ),
    TaskSpec(
        TaskType.GENERATE_ARTIFACT,
        GenerateArtifactPayload,
        TaskQueue.AI,
        "A summary, outline, glossary, quiz or mind map of a document, by the chat model "
        "(map-reduce over chunk groups) or, without one, by a local method.",
        execution_timeout=timedelta(hours=12),
        workflow_name="GenerateArtifact",
        workflow_class="workflows.artifacts:GenerateArtifactWorkflow",
        result_model=GenerateArtifactResult,
        activities={
            # Reads the chunk index once to cut the groups.
            PLAN_ARTIFACT.name: ActivityOptions(
                start_to_close=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_retry(5),
            ),
            # One model call (or local pass) per group; each group's result is stored and
            # the heartbeat carries the groups done, so a retry pays only for the rest.
            MAP_ARTIFACT.name: ActivityOptions(
                start_to_close=timedelta(hours=6),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_retry(6, initial=2.0),
            ),
            REDUCE_ARTIFACT.name: ActivityOptions(
                start_to_close=timedelta(hours=1),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=_retry(5, initial=2.0),
            ),
            DISCARD_ARTIFACT_WORK.name: ActivityOptions(
                start_to_close=timedelta(seconds=30), retry_policy=_retry(5)
            ),
        },
        activity_classes=("activities.artifacts:ArtifactActivities",),
        progress_unit="chunk groups",
    ),
    TaskSpec(
        TaskType.AI_ANALYSIS,
        AiAnalysisPayload,
        TaskQueue.AI,
        "A document's diagnosis (key concepts, difficulty, gaps) or a learner's answer "
        "checked against the document (verdict, what is missing, cited chunks).",
        execution_timeout=timedelta(hours=6),
        workflow_name="AiAnalysis",
        workflow_class="workflows.analysis:AiAnalysisWorkflow",
        result_model=AiAnalysisResult,
        activities={
            # Reads the chunk index once to cut the groups.
            PLAN_ANALYSIS.name: ActivityOptions(
                start_to_close=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_retry(5),
            ),
            # Map-reduce over chunk groups; each group's diagnosis is stored and the
            # heartbeat carries the groups done, so a retry pays only for the rest.
            DIAGNOSE_DOCUMENT.name: ActivityOptions(
                start_to_close=timedelta(hours=4),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_retry(6, initial=2.0),
            ),
            # One retrieval and one model call.
            CHECK_ANSWER.name: ActivityOptions(
                start_to_close=timedelta(minutes=20),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=_retry(5, initial=2.0),
            ),
            DISCARD_ANALYSIS_WORK.name: ActivityOptions(
                start_to_close=timedelta(seconds=30), retry_policy=_retry(5)
            ),
        },
        activity_classes=("activities.analysis:AnalysisActivities",),
        progress_unit="chunk groups",
    ),
    TaskSpec(
        TaskType.GENERATE_REVIEW_CARD,
        GenerateReviewCardPayload,
        TaskQueue.AI,
        "Question/answer and cloze review cards from a document or a chunk range, each "
        "citing its chunk, near-duplicates removed, stored with their FSRS state.",
        execution_timeout=timedelta(hours=6),
        workflow_name="GenerateReviewCards",
        workflow_class="workflows.review_cards:GenerateReviewCardsWorkflow",
        result_model=ReviewCardResult,
        activities={
            # Packs the document's chunks into groups (reads every chunk once).
            PLAN_REVIEW_CARDS.name: ActivityOptions(
                start_to_close=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_retry(5),
            ),
            # One model call (or key-sentence pass) per chunk group; the heartbeat carries
            # the groups drafted, so a retry never pays for a finished group again.
            DRAFT_REVIEW_CARDS.name: ActivityOptions(
                start_to_close=timedelta(hours=4),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=_retry(5, initial=2.0),
            ),
            # Embeds the card texts for de-duplication, then inserts; redone on retry
            # (inserts are keyed by content).
            STORE_REVIEW_CARDS.name: ActivityOptions(
                start_to_close=timedelta(minutes=30),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=_retry(5, initial=2.0),
            ),
            DISCARD_REVIEW_CARD_WORK.name: ActivityOptions(
                start_to_close=timedelta(seconds=30), retry_policy=_retry(5)
            ),
        },
        activity_classes=("activities.review_cards:ReviewCardActivities",),
        progress_unit="chunk groups",
    ),
    TaskSpec(
        TaskType.AGENT_TASK,
        AgentTaskPayload,
        TaskQueue.AGENTS,
        "A durable tool-using agent over the knowledge base (search, read, list documents, "
        "start other tasks), with follow-up messages through an update.",
        # A conversation waits for follow-ups (at most a day each); the chain ends by then.
        execution_timeout=timedelta(days=7),
        workflow_name="AgentTask",
        workflow_class="workflows.agent:AgentTaskWorkflow",
        result_model=AgentResult,
        activities={
            OPEN_TRANSCRIPT.name: ActivityOptions(
                start_to_close=timedelta(seconds=30), retry_policy=_retry(5)
            ),
            # One model call; the chat client's own Retry-After waits happen inside it.
            # Heartbeats every second, so a crash is noticed (and a cancel arrives) quickly.
            CALL_MODEL.name: ActivityOptions(
                start_to_close=timedelta(minutes=15),
                heartbeat_timeout=timedelta(seconds=20),
                retry_policy=_retry(5, initial=2.0),
            ),
            # One tool call (a search embeds its query; a read reads chunk files).
            RUN_TOOL.name: ActivityOptions(
                start_to_close=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=_retry(5),
            ),
            RECORD_TOOL_RESULT.name: ActivityOptions(
                start_to_close=timedelta(seconds=30), retry_policy=_retry(5)
            ),
            CLOSE_TRANSCRIPT.name: ActivityOptions(
                start_to_close=timedelta(seconds=30), retry_policy=_retry(5)
            ),
        },
        activity_classes=("activities.agent:AgentActivities",),
        # Model calls used of max_steps (the task's budget, follow-ups included).
        progress_unit="steps",
    ),
]
