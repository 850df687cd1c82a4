"""AI_ANALYSIS's contract: a diagnosis of a document, or a learner's answer checked against it.

- `diagnosis`: key concepts, difficulty, prerequisites and gaps (what the document leaves
  unexplained), each concept citing its chunk. With a chat model: map-reduce over chunk groups.
  Without one: key terms and a readability measure (no gaps: judging them needs a model).
- `answer`: a learner's answer to a question, judged against the document's most relevant
  chunks (correct / partly / wrong, what is missing, citations = chunk indexes). Only with a
  chat model: similarity to the document cannot tell a right answer from a wrong one, so
  without CHAT_MODEL the task fails at once, non-retryably, naming the setting.

The analysis is the task's stored output (`AnalysisOutput`, `GET /v1/tasks/{id}/output`); the
workflow result is small.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from knowledgeops.contracts.ai import GroupPlan, MethodChoice, TokenUsage
from knowledgeops.contracts.base import ActivityRef
from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN

AnalysisMode = Literal["diagnosis", "answer"]


class AiAnalysisPayload(BaseModel):
    document_id: str = Field(pattern=DOCUMENT_ID_PATTERN)
    mode: AnalysisMode = "diagnosis"
    # mode=answer: the question the learner answered, and the learner's answer.
    question: str | None = Field(default=None, max_length=4000)
    answer: str | None = Field(default=None, max_length=8000)
    method: MethodChoice = "auto"

    @model_validator(mode="after")
    def _answer_needs_both(self) -> AiAnalysisPayload:
        if self.mode == "answer" and not (self.question or "").strip():
            raise ValueError("mode=answer needs the question the learner answered")
        if self.mode == "answer" and not (self.answer or "").strip():
            raise ValueError("mode=answer needs the learner's answer")
        if self.mode == "diagnosis" and (self.question or self.answer):
            raise ValueError("question and answer belong to mode=answer; a diagnosis takes none")
        return self


# -- the validated structured results (also what the model is asked for) ---------------------
class Concept(BaseModel):
    name: str
    explanation: str
    chunk: int


class Gap(BaseModel):
    description: str  # what the document assumes or leaves unexplained
    chunk: int  # where it shows


class Diagnosis(BaseModel):
    key_concepts: list[Concept]
    difficulty: Literal["introductory", "intermediate", "advanced", "unknown"]
    difficulty_reason: str
    prerequisites: list[str]
    gaps: list[Gap]


class AnswerCheck(BaseModel):
    verdict: Literal["correct", "partly", "wrong"]
    feedback: str
    missing: list[str]  # what a complete answer has that this one lacks
    misconceptions: list[str]
    citations: list[int]  # chunk indexes the judgement rests on


class Readability(BaseModel):
    """Flesch-Kincaid grade of the document's English-like text (the local difficulty)."""

    sentences: int
    words: int
    words_per_sentence: float
    syllables_per_word: float
    grade: float


class Source(BaseModel):
    chunk: int
    heading: str | None
    score: float
    text: str  # the chunk's text as shown to the model


class AnalysisOutput(BaseModel):
    task_id: str
    document_id: str
    title: str
    mode: AnalysisMode
    method: str  # "model:<CHAT_MODEL>" or "local:<method>"
    usage: TokenUsage
    chunks: int
    groups: int
    diagnosis: Diagnosis | None = None
    readability: Readability | None = None
    question: str | None = None
    answer: str | None = None
    answer_check: AnswerCheck | None = None
    sources: list[Source] = Field(default_factory=list)
    markdown: str
    notes: list[str] = Field(default_factory=list)


# -- activities ---------------------------------------------------------------------------
class AnalysisRequest(BaseModel):
    task_id: str
    document_id: str
    mode: AnalysisMode
    method: MethodChoice
    question: str | None = None
    answer: str | None = None


class AnalysisPlan(BaseModel):
    method: str
    plan: GroupPlan


class AnalysisStep(BaseModel):
    request: AnalysisRequest
    method: str
    plan: GroupPlan


class AnalysisDone(BaseModel):
    method: str
    usage: TokenUsage
    # diagnosis: difficulty and counts; answer: the verdict.
    verdict: str | None = None
    difficulty: str | None = None
    concepts: int = 0
    gaps: int = 0
    citations: list[int] = Field(default_factory=list)


class AiAnalysisResult(BaseModel):
    document_id: str
    mode: AnalysisMode
    method: str
    usage: TokenUsage
    chunks: int
    groups: int
    verdict: str | None
    difficulty: str | None
    concepts: int
    gaps: int
    citations: list[int]
    output_url: str


PLAN_ANALYSIS: ActivityRef[AnalysisRequest, AnalysisPlan] = ActivityRef(
    "plan_analysis", AnalysisRequest, AnalysisPlan
)
DIAGNOSE_DOCUMENT: ActivityRef[AnalysisStep, AnalysisDone] = ActivityRef(
    "diagnose_document", AnalysisStep, AnalysisDone
)
CHECK_ANSWER: ActivityRef[AnalysisStep, AnalysisDone] = ActivityRef(
    "check_answer", AnalysisStep, AnalysisDone
)
DISCARD_ANALYSIS_WORK: ActivityRef[str, int] = ActivityRef("discard_analysis_work", str, int)
