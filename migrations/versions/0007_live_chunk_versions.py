"""Which chunk version of each document is live (knowledgeops/db/live_versions.py): a row
per document in the app database instead of a `<document>.live` file beside the chunks, so
the pointer is changed atomically for every machine sharing the database. Existing `.live`
files are read while a document has no row, and removed by its next publish or delete.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "live_chunk_versions",
        sa.Column("document_id", sa.String(200), primary_key=True),
        sa.Column("version", sa.String(100), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("live_chunk_versions")
