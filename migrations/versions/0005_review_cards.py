"""Review cards (GENERATE_REVIEW_CARD): one row per card, with the FSRS card state that
schedules it. The id is derived from the document, the source chunk and the card's text, so a
re-run inserts nothing twice and never resets a card's review state.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "review_cards",
        sa.Column("card_id", sa.String(64), primary_key=True),
        sa.Column("document_id", sa.String(128), nullable=False, index=True),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("front", sa.Text, nullable=False),
        sa.Column("back", sa.Text, nullable=False),
        sa.Column("source_chunk", sa.Integer, nullable=False),
        sa.Column("source_page", sa.Integer, nullable=True),
        sa.Column("method", sa.String(200), nullable=False),
        sa.Column("task_id", sa.String(300), nullable=False),
        sa.Column("fsrs_state", sa.Integer, nullable=False),
        sa.Column("fsrs_step", sa.Integer, nullable=True),
        sa.Column("stability", sa.Float, nullable=True),
        sa.Column("difficulty", sa.Float, nullable=True),
        sa.Column("due", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("last_review", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("review_cards")
