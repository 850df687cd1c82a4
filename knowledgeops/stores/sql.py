"""What every table module shares: the declarative base and UTC time helpers."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass


def now() -> datetime:
    return datetime.now(UTC)


def aware(dt: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything we store is UTC.
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
