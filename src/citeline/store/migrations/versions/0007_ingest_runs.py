"""Each processing version records the ingest run that writes it.

A run holds a session-level advisory lock for as long as its connection lives. A version still
``processing`` whose run no longer holds its lock was abandoned (the process was killed, or the run
stopped on an error). The next ingest, and each process as it opens the store, mark it failed
instead of leaving it listed as processing until its source happens to be ingested again. Versions
written before this migration record no run.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE documents ADD COLUMN ingest_run bigint")


def downgrade() -> None:
    op.execute("ALTER TABLE documents DROP COLUMN ingest_run")
