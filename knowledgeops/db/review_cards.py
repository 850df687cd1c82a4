"""Review cards (GENERATE_REVIEW_CARD) in the app database, with their FSRS card state.

A card's id is derived from its document, source chunk, kind and text (`card_id_for`), so a
re-run, a retried activity or a second task over the same chunks inserts nothing twice, and an
existing card keeps its review state: an insert of a known id does nothing. The FSRS fields are
the `fsrs` package's `Card` (due, stability, difficulty, state, step, last_review); `fsrs_card`
gives the dict `fsrs.Card.from_dict` takes, so a scheduler can review a card directly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from sqlalchemy import DateTime, Float, Integer, String, Text, func, select
from sqlalchemy.orm import Mapped, mapped_column

from knowledgeops.db.sql import Base, aware

if TYPE_CHECKING:
    from knowledgeops.db.database import Database

# FSRS `State` values (fsrs.state.State), named for readers of the API.
FSRS_STATES = {1: "learning", 2: "review", 3: "relearning"}


class ReviewCardRow(Base):
    __tablename__ = "review_cards"
    card_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    document_id: Mapped[str] = mapped_column(String(128), index=True)
    kind: Mapped[str] = mapped_column(String(10))
    front: Mapped[str] = mapped_column(Text)
    back: Mapped[str] = mapped_column(Text)
    source_chunk: Mapped[int] = mapped_column(Integer)
    source_page: Mapped[int | None] = mapped_column(Integer, nullable=True)
    method: Mapped[str] = mapped_column(String(200))
    task_id: Mapped[str] = mapped_column(String(300))
    fsrs_state: Mapped[int] = mapped_column(Integer)
    fsrs_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stability: Mapped[float | None] = mapped_column(Float, nullable=True)
    difficulty: Mapped[float | None] = mapped_column(Float, nullable=True)
    due: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    last_review: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


def card_id_for(document_id: str, source_chunk: int, kind: str, front: str, back: str) -> str:
    key = "\x00".join((document_id, str(source_chunk), kind, front.strip(), back.strip()))
    return hashlib.sha256(key.encode()).hexdigest()[:40]


def fsrs_card_id(card_id: str) -> int:
    """The integer id `fsrs.Card` wants, derived from ours (60 bits: fits every database)."""
    return int(card_id[:15], 16)


class ReviewCard(BaseModel):
    """A card as the API lists it."""

    card_id: str
    document_id: str
    kind: str
    front: str
    back: str
    source_chunk: int
    source_page: int | None
    method: str
    task_id: str
    created_at: datetime
    due: datetime
    state: str
    stability: float | None
    difficulty: float | None
    # `fsrs.Card.to_dict()` of the card: `fsrs.Card.from_dict(card.fsrs_card)` schedules it.
    fsrs_card: dict[str, Any]

    @classmethod
    def of(cls, row: ReviewCardRow) -> ReviewCard:
        due = aware(row.due)
        last = aware(row.last_review) if row.last_review else None
        return cls(
            card_id=row.card_id,
            document_id=row.document_id,
            kind=row.kind,
            front=row.front,
            back=row.back,
            source_chunk=row.source_chunk,
            source_page=row.source_page,
            method=row.method,
            task_id=row.task_id,
            created_at=aware(row.created_at),
            due=due,
            state=FSRS_STATES.get(row.fsrs_state, str(row.fsrs_state)),
            stability=row.stability,
            difficulty=row.difficulty,
            fsrs_card={
                "card_id": fsrs_card_id(row.card_id),
                "state": row.fsrs_state,
                "step": row.fsrs_step,
                "stability": row.stability,
                "difficulty": row.difficulty,
                "due": due.isoformat(),
                "last_review": last.isoformat() if last else None,
            },
        )


class CardPage(BaseModel):
    items: list[ReviewCard]
    total: int


class ReviewCards:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def known_ids(self, card_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        async with self.db.sessions() as s:
            # In slices: SQLite limits the number of bound parameters of one statement.
            for i in range(0, len(card_ids), 500):
                q = select(ReviewCardRow.card_id).where(
                    ReviewCardRow.card_id.in_(card_ids[i : i + 500])
                )
                found.update((await s.execute(q)).scalars())
        return found

    async def texts(self, document_id: str, limit: int) -> list[tuple[str, str, str]]:
        """(card_id, front, back) of up to `limit` of the document's cards, oldest first."""
        q = (
            select(ReviewCardRow.card_id, ReviewCardRow.front, ReviewCardRow.back)
            .where(ReviewCardRow.document_id == document_id)
            .order_by(ReviewCardRow.created_at, ReviewCardRow.card_id)
            .limit(limit)
        )
        async with self.db.sessions() as s:
            return [(r[0], r[1], r[2]) for r in (await s.execute(q)).all()]

    async def insert_new(self, rows: Sequence[dict[str, Any]]) -> int:
        """Insert the cards whose id is not stored yet; returns how many were inserted. A
        stored card is left as it is (its review state is the learner's, not ours)."""
        if not rows:
            return 0
        known = await self.known_ids([r["card_id"] for r in rows])
        fresh = [r for r in rows if r["card_id"] not in known]
        if fresh:
            async with self.db.write() as s:
                for i in range(0, len(fresh), 200):
                    stmt = self.db.insert(ReviewCardRow).values(fresh[i : i + 200])
                    # A concurrent task over the same chunks may have inserted one meanwhile.
                    await s.execute(stmt.on_conflict_do_nothing(index_elements=["card_id"]))
        return len(fresh)

    async def list(self, document_id: str, *, limit: int, offset: int) -> CardPage:
        """The document's cards, in document order (source chunk, then creation)."""
        where = ReviewCardRow.document_id == document_id
        q = (
            select(ReviewCardRow)
            .where(where)
            .order_by(ReviewCardRow.source_chunk, ReviewCardRow.created_at, ReviewCardRow.card_id)
            .limit(limit)
            .offset(offset)
        )
        async with self.db.sessions() as s:
            rows = (await s.execute(q)).scalars().all()
            total = (
                await s.execute(select(func.count()).select_from(ReviewCardRow).where(where))
            ).scalar_one()
        return CardPage(items=[ReviewCard.of(r) for r in rows], total=int(total))
