"""When each version's source was last read at its origin (a web page fetched, a file read at its path).

``citeline refresh --older-than`` picks the sources read longest ago. A refresh that finds a source
unchanged moves the active version's ``last_fetched_at`` forward instead of building a new version; a
re-ingest from the stored original keeps it. Versions from a source read before this migration take
the time they were built; uploads have no origin, and none.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE documents ADD COLUMN last_fetched_at timestamptz")
    op.execute(
        "UPDATE documents SET last_fetched_at = processed_at "
        "WHERE source_uri LIKE 'http://%' OR source_uri LIKE 'https://%' OR source_uri LIKE 'file:%'"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE documents DROP COLUMN last_fetched_at")
