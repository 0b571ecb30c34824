"""A chunk's context: text it is embedded and indexed with but does not hold.

For now the header row of the Markdown table whose rows the chunk continues (``split.py``): without it
the cells of a table's second and later chunks are values under no names, to the embedder and to
BM25 alike. Vector repair (Chroma) re-embeds stored chunks, so the context is stored beside the text
rather than derived again.

Chunks written before this migration have none until their document is re-ingested (``citeline
reingest``): their vectors were made without it, and a context filled in place would disagree with
them.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE chunks ADD COLUMN context text")


def downgrade() -> None:
    op.execute("ALTER TABLE chunks DROP COLUMN context")
