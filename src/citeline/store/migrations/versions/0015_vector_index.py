"""Each version records the vector index that holds its vectors (pgvector or chroma).

With ``CITELINE_VECTOR_BACKEND=chroma`` a chunk row carries no vector: Chroma holds it under the chunk's
id. A search compares its query only with versions of its own model held by its own backend, so a store
switched from one backend to the other refuses to search its older versions until they are re-ingested,
instead of silently missing them. Versions written before this migration are pgvector's.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE documents ADD COLUMN vector_index text NOT NULL DEFAULT 'pgvector'")
    op.execute("ALTER TABLE chunks ALTER COLUMN embedding DROP NOT NULL")


def downgrade() -> None:
    op.execute("DELETE FROM chunks WHERE embedding IS NULL")
    op.execute("ALTER TABLE chunks ALTER COLUMN embedding SET NOT NULL")
    op.execute("ALTER TABLE documents DROP COLUMN vector_index")
