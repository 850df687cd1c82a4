"""What every table module shares: the declarative base, UTC time helpers, and the lock the
writers of events and their projections take."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass


def now() -> datetime:
    return datetime.now(UTC)


def aware(dt: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything we store is UTC.
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


# PostgreSQL advisory lock key of everything written with the events (see `record`).
_EVENT_WRITERS_LOCK = 727001


async def lock_event_writers(s: AsyncSession) -> None:
    """On PostgreSQL, wait for the other writers of events and of their projections (until
    this transaction ends); SQLite has one writer at a time anyway."""
    if s.get_bind().dialect.name == "postgresql":
        await s.execute(text(f"SELECT pg_advisory_xact_lock({_EVENT_WRITERS_LOCK})"))
