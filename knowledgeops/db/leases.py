"""Leases: a job that one process at a time may do (webhook delivery), held by the process
named in its row until `expires_at`, unless that process renews it first.

Taking and renewing are one conditional UPDATE (`WHERE name = ? AND (holder = me OR
expires_at < now)`), plus an INSERT ... ON CONFLICT DO NOTHING the first time (of two first
inserts one wins, the other finds the row taken): atomic on both databases, no lock held
between statements. Times are the database's clock: PostgreSQL's `clock_timestamp()` (replicas
on several machines may disagree; the server is one clock), and for SQLite, a file on this
machine, this machine's. A holder's writes that must not outlive its hold are fenced (`fence`):
the check is the transaction's first statement and locks the lease's row until commit, so a
holder paused past its expiry cannot write once another process has taken over.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import DateTime, String, case, delete, func, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement

from knowledgeops.db.sql import Base, aware, now

if TYPE_CHECKING:
    from knowledgeops.db.database import Database

_AT = DateTime(timezone=True)


class LeaseRow(Base):
    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    holder: Mapped[str] = mapped_column(String(300))
    # Since when this holder has held it (renewals keep it), and when it lapses unless renewed.
    acquired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class LeaseLost(Exception):
    """This process no longer holds a lease it acted under (another process took it over, or
    its hold lapsed): what it was doing stops, and a fenced write is rolled back."""


@dataclass(frozen=True)
class Lease:
    """One process's claim on the lease `name`; `holder` names that process."""

    name: str
    holder: str

    @classmethod
    def for_this_process(cls, name: str) -> Lease:
        # host:pid says where to look; the random part tells two claims of one process apart.
        return cls(name, f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}")


@dataclass(frozen=True)
class Hold:
    """Who holds a lease now, since when and until when (unless renewed)."""

    holder: str
    acquired_at: datetime
    expires_at: datetime


class Leases:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def acquire(self, lease: Lease, seconds: float) -> bool:
        """Take `lease` if nobody holds it (or the hold lapsed), or renew it if this claim
        does, until `seconds` from now; whether this claim holds it now."""
        dialect = self.db.engine.dialect.name
        clock, until = _clock(dialect), _clock(dialect, seconds)
        mine = LeaseRow.holder == lease.holder
        async with self.db.write() as s:
            taken: Any = await s.execute(
                update(LeaseRow)
                .where(LeaseRow.name == lease.name, or_(mine, LeaseRow.expires_at < clock))
                .values(
                    holder=lease.holder,
                    expires_at=until,
                    acquired_at=case((mine, LeaseRow.acquired_at), else_=clock),
                )
                .execution_options(synchronize_session=False)
            )
            if taken.rowcount == 1:
                return True
            inserted: Any = await s.execute(
                self.db.insert(LeaseRow)
                .values(name=lease.name, holder=lease.holder, acquired_at=clock, expires_at=until)
                .on_conflict_do_nothing(index_elements=["name"])
            )
            return bool(inserted.rowcount == 1)

    async def release(self, lease: Lease) -> bool:
        """Give `lease` up if this claim holds it, so another process takes it at its next
        try rather than once the hold lapses; whether it was held."""
        async with self.db.write() as s:
            gone: Any = await s.execute(
                delete(LeaseRow)
                .where(LeaseRow.name == lease.name, LeaseRow.holder == lease.holder)
                .execution_options(synchronize_session=False)
            )
        return bool(gone.rowcount == 1)

    async def current(self, name: str) -> Hold | None:
        """The lease's hold now; None when nobody holds it (never taken, released, lapsed)."""
        q = select(LeaseRow).where(
            LeaseRow.name == name, LeaseRow.expires_at > _clock(self.db.engine.dialect.name)
        )
        async with self.db.sessions() as s:
            row = (await s.execute(q)).scalar_one_or_none()
        if row is None:
            return None
        return Hold(row.holder, aware(row.acquired_at), aware(row.expires_at))


async def fence(s: AsyncSession, lease: Lease) -> None:
    """Run first in a write transaction: LeaseLost unless `lease` is held, and the lease
    cannot change hands until `s` commits (the UPDATE locks its row on PostgreSQL; SQLite
    has one writer at a time), so nothing this transaction writes lands after a takeover."""
    held: Any = await s.execute(
        update(LeaseRow)
        .where(
            LeaseRow.name == lease.name,
            LeaseRow.holder == lease.holder,
            LeaseRow.expires_at > _clock(s.get_bind().dialect.name),
        )
        .values(holder=LeaseRow.holder)
        .execution_options(synchronize_session=False)
    )
    if held.rowcount != 1:
        raise LeaseLost(
            f"this process ({lease.holder}) no longer holds the lease {lease.name!r}: another "
            "process took it over, or it lapsed unrenewed"
        )


def _clock(dialect: str, ahead: float = 0.0) -> ColumnElement[datetime]:
    """The database's time, plus `ahead` seconds."""
    if dialect == "postgresql":
        return func.clock_timestamp(type_=_AT) + timedelta(seconds=ahead)
    return literal(now() + timedelta(seconds=ahead), _AT)
