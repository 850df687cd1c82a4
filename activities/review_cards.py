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

from temporalio import activity

from activities.map_reduce import WorkDir, map_groups, plan_groups, read_chunks
from activities.model_errors import model_failures
from activities.support import Heartbeater
from knowledgeops.contracts.ai import GroupPlan, TokenUsage
from knowledgeops.contracts.base import Checkpoint
from knowledgeops.contracts.review_cards import (
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
from knowledgeops.db.review_cards import ReviewCards
from knowledgeops.errors import bad_input
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.files.outputs import OutputNotFoundError, OutputStore
from knowledgeops.learning import review_cards_local as local
from knowledgeops.learning.review_cards_merge import ReviewCardsOutput, dedup_and_store, round_robin
from knowledgeops.learning.review_cards_model import DraftCard, DraftGroup, ask_model, source_of
from knowledgeops.runtime.resources import Resources

# Cards a group is asked for at most, whatever max_cards is (a longer answer risks the cut-off).
MAX_CARDS_PER_GROUP = 20


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
                output = await dedup_and_store(
                    self.cards, self.resources.embedder, req, round_robin(groups)
                )
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

    @activity.defn(name=DISCARD_REVIEW_CARD_WORK.name)
    async def discard_review_card_work(self, req: WorkRequest) -> int:
        """Remove a failed or cancelled task's drafts (stored cards stay: each is complete)."""
        return await self._work(req.work_id).discard()
