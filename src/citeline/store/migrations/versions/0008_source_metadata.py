"""What the loader learnt about a source (a PDF's author and page count, a web page's final URL,
site and date) is kept with its version, apart from the user's own ``metadata`` labels, which
filters match and which re-ingesting carries over.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE documents ADD COLUMN source_metadata jsonb NOT NULL DEFAULT '{}'")


def downgrade() -> None:
    op.execute("ALTER TABLE documents DROP COLUMN source_metadata")
