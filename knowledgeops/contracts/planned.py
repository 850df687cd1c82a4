"""Payload models of the task types whose workflows come later.

They fix the contract early so that starters validate input the same way for every type;
each one references stored content by id, never carries it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN as _ID


class OcrPayload(BaseModel):
    file_id: str
    document_id: str = Field(pattern=_ID)
    languages: list[str] = Field(default_factory=lambda: ["eng", "chi_sim"])


class VisionAnalyzePayload(BaseModel):
    file_id: str
    document_id: str = Field(pattern=_ID)
    prompt: str | None = Field(default=None, max_length=4000)


class EmbeddingGeneratePayload(BaseModel):
    document_id: str = Field(pattern=_ID)
    start_index: int = Field(default=0, ge=0)
    end_index: int | None = Field(default=None, ge=0)


class IndexingUpsertPayload(BaseModel):
    document_id: str = Field(pattern=_ID)


class GenerateArtifactPayload(BaseModel):
    document_id: str = Field(pattern=_ID)
    kind: str = Field(pattern=r"^(summary|outline|mindmap|quiz)$")


class AiAnalysisPayload(BaseModel):
    document_id: str = Field(pattern=_ID)
    question: str = Field(max_length=4000)


class GenerateReviewCardPayload(BaseModel):
    document_id: str = Field(pattern=_ID)
    max_cards: int = Field(default=20, ge=1, le=500)


class AgentTaskPayload(BaseModel):
    agent: str = Field(max_length=100)
    instruction: str = Field(max_length=8000)
