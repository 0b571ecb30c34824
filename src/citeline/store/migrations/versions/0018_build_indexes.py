"""Indexes for listing builds: the versions queued or being built, and those that failed recently.

``catalog.builds`` (``GET /builds``, ``citeline builds``, the admin page every 5 seconds while it is
open) selects versions by status. Without these it read the whole ``documents`` table each time, every
version of every document; the versions it wants are a handful, so both indexes are partial and small.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX documents_unfinished ON documents (status) WHERE status IN ('queued', 'processing')"
    )
    op.execute("CREATE INDEX documents_failed ON documents (processed_at) WHERE status = 'failed'")


def downgrade() -> None:
    op.execute("DROP INDEX documents_failed")
    op.execute("DROP INDEX documents_unfinished")
