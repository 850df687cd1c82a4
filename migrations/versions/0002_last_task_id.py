"""One word for one started unit of work ("task"): documents.last_job_id -> last_task_id.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Batch mode: SQLite rebuilds the table, PostgreSQL renames in place.
    with op.batch_alter_table("documents") as batch:
        batch.alter_column("last_job_id", new_column_name="last_task_id")


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.alter_column("last_task_id", new_column_name="last_job_id")
