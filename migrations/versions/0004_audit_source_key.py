"""Audit records of actions found in Temporal's history carry a unique source key.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.add_column(sa.Column("source_key", sa.String(300), nullable=True))
        batch.create_unique_constraint("uq_audit_log_source_key", ["source_key"])


def downgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.drop_constraint("uq_audit_log_source_key", type_="unique")
        batch.drop_column("source_key")
