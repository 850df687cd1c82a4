"""Review cards merged and stored: the drafted cards of all groups in one order, near-
duplicates dropped (cosine similarity of the card texts' embeddings >= the request's
`dedup_threshold`, against the document's stored cards and the cards kept before), each new
card given a fresh FSRS state and inserted under an id derived from its content; and the
task's output, which names what was kept and what was dropped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from fsrs import Card
from pydantic import BaseModel

from knowledgeops.contracts.review_cards import CLOZE_BLANK, StoreCardsRequest, StoreCardsResult
from knowledgeops.db.review_cards import ReviewCards, card_id_for, fsrs_card_id
from knowledgeops.learning.review_cards_model import DraftCard

if TYPE_CHECKING:  # only a type here: the embedder module stays unimported
    from knowledgeops.models.embedding import Embedder

# Stored cards of the document a new card is compared with (the oldest ones).
MAX_COMPARED = 5000
EMBED_BATCH = 64


class StoredOutputCard(DraftCard):
    card_id: str
    status: Literal["new", "already_stored"]


class DroppedCard(DraftCard):
    duplicate_of: str | None
    similarity: float


class ReviewCardsOutput(BaseModel):
    """What `GET /v1/tasks/{task_id}/output` serves for this type."""

    document_id: str
    method: str
    dedup_threshold: float
    cards: list[StoredOutputCard]
    duplicates: list[DroppedCard]
    result: StoreCardsResult


async def dedup_and_store(
    cards: ReviewCards, embedder: Embedder, req: StoreCardsRequest, drafts: list[DraftCard]
) -> ReviewCardsOutput:
    ids = [card_id_for(req.document_id, d.source_chunk, d.kind, d.front, d.back) for d in drafts]
    known = await cards.known_ids(ids)
    drafted_ids = set(ids)
    stored = [
        (cid, front, back)
        for cid, front, back in await cards.texts(req.document_id, MAX_COMPARED)
        if cid not in drafted_ids
    ]
    vectors = await _embed(
        embedder, [_text(d.front, d.back) for d in drafts] + [_text(f, b) for _, f, b in stored]
    )
    kept_vecs = list(vectors[len(drafts) :])
    kept_ids = [cid for cid, _, _ in stored]
    kept: list[StoredOutputCard] = []
    dropped: list[DroppedCard] = []
    over_limit = 0
    seen: set[str] = set()
    for d, cid, vec in zip(drafts, ids, vectors[: len(drafts)], strict=True):
        if cid in seen:
            dropped.append(DroppedCard(**d.model_dump(), duplicate_of=cid, similarity=1.0))
            continue
        if len(kept) >= req.max_cards:
            over_limit += 1
            continue
        if cid not in known:
            best, similarity = _nearest(vec, kept_vecs)
            if best is not None and similarity >= req.dedup_threshold:
                dropped.append(
                    DroppedCard(
                        **d.model_dump(),
                        duplicate_of=kept_ids[best],
                        similarity=round(similarity, 4),
                    )
                )
                continue
        seen.add(cid)
        kept_vecs.append(vec)
        kept_ids.append(cid)
        status: Literal["new", "already_stored"] = "already_stored" if cid in known else "new"
        kept.append(StoredOutputCard(**d.model_dump(), card_id=cid, status=status))
    new = [c for c in kept if c.status == "new"]
    made = await cards.insert_new(_rows(req, new))
    result = StoreCardsResult(
        made=made,
        already_stored=len(kept) - made,
        duplicates_removed=len(dropped),
        over_limit=over_limit,
        output_id=req.work_id,
    )
    return ReviewCardsOutput(
        document_id=req.document_id,
        method=req.method,
        dedup_threshold=req.dedup_threshold,
        cards=kept,
        duplicates=dropped,
        result=result,
    )


async def _embed(embedder: Embedder, texts: list[str]) -> list[np.ndarray[Any, Any]]:
    out: list[np.ndarray[Any, Any]] = []
    for i in range(0, len(texts), EMBED_BATCH):
        for v in await embedder.embed(texts[i : i + EMBED_BATCH]):
            a = np.asarray(v, dtype=np.float64)
            out.append(a / max(float(np.linalg.norm(a)), 1e-12))
    return out


def _text(front: str, back: str) -> str:
    """What two cards are compared by: a cloze with its term filled in, a question with its
    answer (the same question with another answer is another card)."""
    if CLOZE_BLANK in front:
        return front.replace(CLOZE_BLANK, back)
    return f"{front}\n{back}"


def _nearest(
    vec: np.ndarray[Any, Any], kept: list[np.ndarray[Any, Any]]
) -> tuple[int | None, float]:
    if not kept:
        return None, 0.0
    sims = np.stack(kept) @ vec
    best = int(np.argmax(sims))
    return best, float(sims[best])


def round_robin(groups: list[list[DraftCard]]) -> list[DraftCard]:
    """Each group's first card, then each group's second...: a `max_cards` cut keeps cards
    from the whole range, not only from its beginning."""
    out: list[DraftCard] = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.extend(g[i] for g in groups if i < len(g))
    return out


def _rows(req: StoreCardsRequest, cards: list[StoredOutputCard]) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    rows = []
    for c in cards:
        # A new FSRS card: learning, step 0, due now; stability and difficulty stay empty
        # until the first review sets them (FSRS derives them from that first rating).
        fsrs = Card(card_id=fsrs_card_id(c.card_id), due=now)
        rows.append(
            {
                "card_id": c.card_id,
                "document_id": req.document_id,
                "kind": c.kind,
                "front": c.front,
                "back": c.back,
                "source_chunk": c.source_chunk,
                "source_page": c.source_page,
                "method": req.method,
                "task_id": req.work_id,
                "fsrs_state": fsrs.state.value,
                "fsrs_step": fsrs.step,
                "stability": fsrs.stability,
                "difficulty": fsrs.difficulty,
                "due": fsrs.due,
                "last_review": fsrs.last_review,
                "created_at": now,
            }
        )
    return rows
