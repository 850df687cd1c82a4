"""Initial schema: domain events, audit log, documents, webhook cursors.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(400), nullable=False, unique=True),
        sa.Column("event_type", sa.String(40), nullable=False),
        sa.Column("task_id", sa.String(300), nullable=False, index=True),
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("task_type", sa.String(60), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("actor", sa.String(200), nullable=False, index=True),
        sa.Column("action", sa.String(60), nullable=False, index=True),
        sa.Column("task_ids", sa.JSON, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("outcome", sa.String(40), nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
    )
    op.create_table(
        "documents",
        sa.Column("document_id", sa.String(128), primary_key=True),
        sa.Column("title", sa.String(500), nullable=True),
        sa.Column("filename", sa.String(500), nullable=False),
        sa.Column("file_id", sa.String(100), nullable=False, index=True),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("indexed_chunks", sa.Integer, nullable=False),
        sa.Column("last_job_id", sa.String(300), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "webhook_cursors",
        sa.Column("url", sa.String(1000), primary_key=True),
        sa.Column("last_seq", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    for table in ("webhook_cursors", "documents", "audit_log", "task_events"):
        op.drop_table(table)
