"""The active documents by content hash: which of them hold a file's bytes already.

An upload's answer and each ``citeline ingest`` result name the documents holding the same bytes under
another name (``catalog.same_content``). Asked once per ingested file, the question must not scan every
document: at 50,000 documents that is 50,000 rows read per file of a bulk ingest.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX documents_active_content ON documents (content_hash) WHERE is_active")


def downgrade() -> None:
    op.execute("DROP INDEX documents_active_content")
