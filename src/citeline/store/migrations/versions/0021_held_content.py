"""Documents by content hash, built or not yet: which of them hold a file's bytes.

``catalog.same_content`` names the documents holding an upload's bytes. It counted only active
versions, so a copy uploaded right after the original (still queued) was not told; it now counts the
versions pending, queued or being built too, and the index of 0020 (active versions only) is widened
to them, so that the question stays a lookup rather than a scan of every version.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX documents_active_content")
    op.execute(
        "CREATE INDEX documents_held_content ON documents (content_hash) "
        "WHERE is_active OR status IN ('pending', 'queued', 'processing')"
    )


def downgrade() -> None:
    op.execute("DROP INDEX documents_held_content")
    op.execute("CREATE INDEX documents_active_content ON documents (content_hash) WHERE is_active")
