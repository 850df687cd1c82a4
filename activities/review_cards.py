"""Activities of GENERATE_REVIEW_CARD: plan, draft per chunk group, de-duplicate and store.

Drafting maps the chunk groups with `activities/map_reduce.py`: each group's cards go to the
task's work directory as soon as they exist and the heartbeat carries the groups done, so a
retry after a crash never pays the model for a finished group again. Storing embeds the card
texts, drops near-duplicates (cosine similarity >= the payload's `dedup_threshold`, default
0.9, against the document's stored cards and the cards kept before it), gives each new card a
fresh FSRS state and inserts it under an id derived from its content; then it saves the task's
output and removes the work directory.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
from fsrs import Card
from pydantic import BaseModel
from temporalio import activity

from activities.map_reduce import WorkDir, map_groups, plan_groups, read_chunks
from activities.model_errors import model_failures
from activities.support import Heartbeater
from knowledgeops.contracts.ai import GroupPlan, TokenUsage
from knowledgeops.contracts.base import Checkpoint
from knowledgeops.contracts.review_cards import (
    CLOZE_BLANK,
    DISCARD_REVIEW_CARD_WORK,
    DRAFT_REVIEW_CARDS,
    PLAN_REVIEW_CARDS,
    STORE_REVIEW_CARDS,
    CardPlan,
    DraftCardsRequest,
    DraftCardsResult,
    PlanCardsRequest,
    StoreCardsRequest,
    StoreCardsResult,
    WorkRequest,
)
from knowledgeops.db.review_cards import ReviewCards, card_id_for, fsrs_card_id
from knowledgeops.errors import bad_input
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.files.outputs import OutputNotFoundError, OutputStore
from knowledgeops.learning import review_cards_local as local
from knowledgeops.learning.review_cards_model import DraftCard, DraftGroup, ask_model, source_of
from knowledgeops.runtime.resources import Resources

# Cards a group is asked for at most, whatever max_cards is (a longer answer risks the cut-off).
MAX_CARDS_PER_GROUP = 20
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


class ReviewCardActivities:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings
        self.cards = ReviewCards(resources.db)
        self.outputs = OutputStore(resources.storage)

    def _work(self, work_id: str) -> WorkDir:
        return WorkDir(self.resources.storage, self.settings.outputs_dir, work_id)

    def _method(self, kinds: Sequence[str]) -> str:
        chat = self.resources.chat
        if chat is not None:
            return f"model:{chat.model_id}"
        if "cloze" not in kinds:
            raise bad_input(
                "ChatModelMissing",
                "question/answer cards need a chat model: set CHAT_MODEL (and OPENAI_BASE_URL "
                "/ OPENAI_API_KEY), or ask for cloze cards, which the local method makes",
            )
        return local.METHOD

    @activity.defn(name=PLAN_REVIEW_CARDS.name)
    async def plan_review_cards(self, req: PlanCardsRequest) -> CardPlan:
        method = self._method(req.kinds)
        async with Heartbeater():
            version = await self.resources.live_versions.get(req.document_id)
            reader = await read_chunks(self.resources.files, req.document_id, version)
            try:
                count = reader.count
                end = count if req.end_index is None else req.end_index
                if req.start_index >= count or end > count:
                    raise bad_input(
                        "ChunkRangeOutOfRange",
                        f"document {req.document_id!r} has {count} chunks (0..{count - 1}); "
                        f"chunks {req.start_index}..{end - 1} were asked for: choose a range "
                        "inside it",
                    )
                budget = self.settings.chat_input_tokens
                full = await asyncio.to_thread(plan_groups, reader, req.document_id, budget)
            finally:
                reader.close()
        # The document's groups, cut to the range: `chunks` (where the last group ends) is
        # the range's end.
        starts = [req.start_index] + [s for s in full.starts if req.start_index < s < end]
        groups = GroupPlan(
            document_id=req.document_id, version=full.version, chunks=end, starts=starts
        )
        # A quarter more than needed, so de-duplication still leaves max_cards.
        per_group = math.ceil(req.max_cards * 1.25 / len(starts))
        return CardPlan(
            start_index=req.start_index,
            end_index=end,
            groups=groups,
            cards_per_group=min(MAX_CARDS_PER_GROUP, max(1, per_group)),
            method=method,
        )

    @activity.defn(name=DRAFT_REVIEW_CARDS.name)
    async def draft_review_cards(self, req: DraftCardsRequest) -> DraftCardsResult:
        chat = self.resources.chat
        if req.method != (f"model:{chat.model_id}" if chat else local.METHOD):
            raise bad_input(
                "ChatModelChanged",
                f"the task was planned for {req.method}, but this worker's CHAT_MODEL says "
                "otherwise: give every AI worker the same settings and start the task again",
            )
        plan = req.groups
        reader = await read_chunks(self.resources.files, req.document_id, plan.version)

        async def draft(chunks: list[Chunk]) -> tuple[DraftGroup, TokenUsage]:
            with model_failures():
                if chat is not None:
                    drafted, cost = await ask_model(chat, chunks, req.cards_per_group, req.kinds)
                    if drafted.rejected:
                        activity.logger.warning(
                            "dropped %d cards the model wrote wrongly", drafted.rejected
                        )
                    return drafted, cost
                return DraftGroup(
                    cards=await self._local(chunks, req.cards_per_group)
                ), TokenUsage()

        try:
            work = self._work(req.work_id)
            groups, reused, usage = await map_groups(work, reader, plan, DraftGroup, draft)
        finally:
            reader.close()
        return DraftCardsResult(
            groups=len(groups),
            reused_groups=reused,
            drafted=sum(len(g.cards) for g in groups),
            rejected=sum(g.rejected for g in groups),
            usage=usage,
        )

    async def _local(self, chunks: list[Chunk], k: int) -> list[DraftCard]:
        cards = await local.key_sentence_cards(self.resources.embedder, chunks, k)
        return [
            DraftCard(kind="cloze", front=made.front, back=made.answer, **source_of(s.chunk))
            for s, made in cards
        ]

    @activity.defn(name=STORE_REVIEW_CARDS.name)
    async def store_review_cards(self, req: StoreCardsRequest) -> StoreCardsResult:
        work = self._work(req.work_id)
        drafted = [await work.load(g) for g in range(req.groups)]
        if any(d is None for d in drafted):
            return await self._stored_before(req)
        groups = [DraftGroup.model_validate_json(d.value).cards for d in drafted if d]
        async with Heartbeater(Checkpoint(total=req.groups).model_dump()):
            with model_failures():
                output = await self._dedup_and_store(req, _round_robin(groups))
            await self.outputs.save(req.work_id, output)
            await work.discard()
        return output.result

    async def _stored_before(self, req: StoreCardsRequest) -> StoreCardsResult:
        """The result of an attempt that stored everything but whose completion never reached
        the server (its work files are gone, its output is saved)."""
        try:
            output = ReviewCardsOutput.model_validate(await self.outputs.load(req.work_id))
        except OutputNotFoundError:
            raise bad_input(
                "ReviewCardWorkMissing",
                f"the drafted cards of {req.work_id} are gone from the work directory; "
                "start the task again",
            ) from None
        return output.result

    async def _dedup_and_store(
        self, req: StoreCardsRequest, drafts: list[DraftCard]
    ) -> ReviewCardsOutput:
        ids = [
            card_id_for(req.document_id, d.source_chunk, d.kind, d.front, d.back) for d in drafts
        ]
        known = await self.cards.known_ids(ids)
        drafted_ids = set(ids)
        stored = [
            (cid, front, back)
            for cid, front, back in await self.cards.texts(req.document_id, MAX_COMPARED)
            if cid not in drafted_ids
        ]
        vectors = await self._embed(
            [_text(d.front, d.back) for d in drafts] + [_text(f, b) for _, f, b in stored]
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
        made = await self.cards.insert_new(_rows(req, new))
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

    async def _embed(self, texts: list[str]) -> list[np.ndarray[Any, Any]]:
        out: list[np.ndarray[Any, Any]] = []
        for i in range(0, len(texts), EMBED_BATCH):
            for v in await self.resources.embedder.embed(texts[i : i + EMBED_BATCH]):
                a = np.asarray(v, dtype=np.float64)
                out.append(a / max(float(np.linalg.norm(a)), 1e-12))
        return out

    @activity.defn(name=DISCARD_REVIEW_CARD_WORK.name)
    async def discard_review_card_work(self, req: WorkRequest) -> int:
        """Remove a failed or cancelled task's drafts (stored cards stay: each is complete)."""
        return await self._work(req.work_id).discard()


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


def _round_robin(groups: list[list[DraftCard]]) -> list[DraftCard]:
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
