"""The admin task list (knowledgeops/db/task_list.py): one row per task id, projected from
the domain events, with an index per filter in list order. Built here from the events already
stored, so the list is complete right after the upgrade; new events feed it as they are stored.

Revision ID: 0006
Revises: 0005
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

from knowledgeops.contracts.events import EventType
from knowledgeops.db.task_list import row_of
from knowledgeops.db.task_list_rules import TaskState, apply_event

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_READ = 5000
_WRITE = 1000

_events = sa.table(
    "task_events",
    sa.column("seq", sa.Integer),
    sa.column("event_type", sa.String),
    sa.column("task_id", sa.String),
    sa.column("run_id", sa.String),
    sa.column("task_type", sa.String),
    sa.column("at", sa.DateTime(timezone=True)),
    sa.column("data", sa.JSON),
)


def upgrade() -> None:
    task_list = op.create_table(
        "task_list",
        sa.Column("task_id", sa.String(300), primary_key=True),
        sa.Column("task_type", sa.String(60), nullable=False),
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("picked_up_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("document_id", sa.String(300), nullable=True),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("runs", sa.JSON, nullable=False),
    )
    op.create_index("ix_task_list_newest", "task_list", ["started_at", "task_id"])
    op.create_index("ix_task_list_type", "task_list", ["task_type", "started_at", "task_id"])
    op.create_index("ix_task_list_status", "task_list", ["status", "started_at", "task_id"])
    op.create_index(
        "ix_task_list_type_status", "task_list", ["task_type", "status", "started_at", "task_id"]
    )
    _backfill(op.get_bind(), task_list)


def _backfill(conn: sa.Connection, task_list: sa.Table) -> None:
    """Every stored event through the projection's own rules, one task at a time (events in
    task id, then seq order), in bounded reads and writes."""
    columns = [c.name for c in task_list.columns]

    def row(state: TaskState) -> dict[str, Any]:
        # The columns of this revision, whatever the row gains later.
        fields = row_of(state)
        return {k: fields[k] for k in columns}

    pending: list[dict[str, Any]] = []
    current: TaskState | None = None
    last: tuple[str, int] | None = None
    while True:
        q = sa.select(_events).order_by(_events.c.task_id, _events.c.seq).limit(_READ)
        if last is not None:
            t, seq = last
            q = q.where(
                sa.or_(_events.c.task_id > t, sa.and_(_events.c.task_id == t, _events.c.seq > seq))
            )
        rows = conn.execute(q).mappings().all()
        for r in rows:
            if current is not None and current.entry.task_id != r["task_id"]:
                pending.append(row(current))
                current = None
            current = apply_event(
                current,
                task_id=r["task_id"],
                run_id=r["run_id"],
                task_type=r["task_type"],
                kind=EventType(r["event_type"]),
                at=r["at"],
                data=r["data"] or {},
            )
        if len(pending) >= _WRITE:
            conn.execute(task_list.insert(), pending)
            pending = []
        if len(rows) < _READ:
            break
        last = (rows[-1]["task_id"], rows[-1]["seq"])
    if current is not None:
        pending.append(row(current))
    if pending:
        conn.execute(task_list.insert(), pending)


def downgrade() -> None:
    op.drop_table("task_list")
