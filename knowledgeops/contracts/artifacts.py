"""GENERATE_ARTIFACT's contract: learning artifacts made from one imported document.

Kinds: a summary, an outline, a glossary, a quiz (questions with answers and the chunk each
comes from) and a mind map (Markdown and Mermaid). The artifact is stored as the task's output
(`GET /v1/tasks/{task_id}/output`, an `ArtifactOutput`); the workflow result only names it,
with the method that made it ("model:<CHAT_MODEL>" or "local:<method>"), the tokens used and
a few counts. Only ids, counts and chunk-group bounds cross Temporal.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from knowledgeops.contracts.ai import GroupPlan, MethodChoice, TokenUsage
from knowledgeops.contracts.base import ActivityRef
from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN

ArtifactKind = Literal["summary", "outline", "glossary", "quiz", "mindmap"]


class GenerateArtifactPayload(BaseModel):
    document_id: str = Field(pattern=DOCUMENT_ID_PATTERN)
    kind: ArtifactKind
    # auto: CHAT_MODEL when set, else the local method; model fails at once without one.
    method: MethodChoice = "auto"
    # At most this many summary key points, glossary terms, quiz questions, mind-map branches
    # (and outline entries when a document without headings is outlined by leading sentences).
    max_items: int = Field(default=10, ge=1, le=100)


# -- the stored output ------------------------------------------------------------------------
class KeyPoint(BaseModel):
    text: str
    chunk: int


class Summary(BaseModel):
    summary: str
    key_points: list[KeyPoint]


class OutlineItem(BaseModel):
    title: str
    level: int
    chunk: int


class GlossaryEntry(BaseModel):
    term: str
    definition: str
    chunk: int


class QuizQuestion(BaseModel):
    question: str
    answer: str
    chunk: int


class MindBranch(BaseModel):
    topic: str
    points: list[str]
    chunk: int


class MindMap(BaseModel):
    central_topic: str
    branches: list[MindBranch]


class ArtifactOutput(BaseModel):
    """What the task stores: the artifact of its kind (the other kinds' fields are None), the
    same as readable Markdown, and how it was made."""

    task_id: str
    document_id: str
    title: str  # the document's title (or file name)
    kind: ArtifactKind
    method: str
    usage: TokenUsage
    chunks: int
    groups: int
    summary: Summary | None = None
    outline: list[OutlineItem] | None = None
    glossary: list[GlossaryEntry] | None = None
    quiz: list[QuizQuestion] | None = None
    mindmap: MindMap | None = None
    mermaid: str | None = None
    markdown: str
    # What the reader should know about how it was made (e.g. a local method's limits).
    notes: list[str] = Field(default_factory=list)


# -- activities ---------------------------------------------------------------------------
class ArtifactRequest(BaseModel):
    task_id: str
    document_id: str
    kind: ArtifactKind
    method: MethodChoice
    max_items: int


class ArtifactPlan(BaseModel):
    method: str  # "model:<id>" or "local:<name>"
    plan: GroupPlan


class ArtifactStep(BaseModel):
    request: ArtifactRequest
    method: str
    plan: GroupPlan


class MapResult(BaseModel):
    groups: int
    reused: int  # groups whose stored partial result a retry read back
    usage: TokenUsage


class ArtifactDone(BaseModel):
    method: str  # as planned, or the local fallback the document needed
    items: int
    usage: TokenUsage  # the whole task's, map and reduce
    output_bytes: int


class GenerateArtifactResult(BaseModel):
    document_id: str
    kind: ArtifactKind
    method: str
    usage: TokenUsage
    chunks: int
    groups: int
    items: int
    output_url: str


PLAN_ARTIFACT: ActivityRef[ArtifactRequest, ArtifactPlan] = ActivityRef(
    "plan_artifact", ArtifactRequest, ArtifactPlan
)
MAP_ARTIFACT: ActivityRef[ArtifactStep, MapResult] = ActivityRef(
    "map_artifact", ArtifactStep, MapResult
)
REDUCE_ARTIFACT: ActivityRef[ArtifactStep, ArtifactDone] = ActivityRef(
    "reduce_artifact", ArtifactStep, ArtifactDone
)
DISCARD_ARTIFACT_WORK: ActivityRef[str, int] = ActivityRef("discard_artifact_work", str, int)
