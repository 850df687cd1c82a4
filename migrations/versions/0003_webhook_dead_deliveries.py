"""Webhook deliveries given up after bounded attempts: one row per (URL, event), with the
last error, so one event a receiver always refuses no longer holds back the ones after it.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_dead_deliveries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("url", sa.String(1000), nullable=False, index=True),
        sa.Column("event_seq", sa.Integer, nullable=False),
        sa.Column("event_id", sa.String(400), nullable=False),
        sa.Column("event_type", sa.String(40), nullable=False),
        sa.Column("task_id", sa.String(300), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=False),
        sa.Column("first_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dead_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.UniqueConstraint("url", "event_id", name="uq_webhook_dead_url_event"),
    )


def downgrade() -> None:
    op.drop_table("webhook_dead_deliveries")
