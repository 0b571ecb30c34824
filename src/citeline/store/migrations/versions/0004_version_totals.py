"""A version's chunk count lives on the version only (documents.vector_count).

Copying it onto every chunk row meant rewriting each chunk, and so re-inserting it into every index
(HNSW included), at swap time: the largest single cost of ingesting a document. Readers take
``total_chunks`` from the version instead.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_column("chunks", "total_chunks")


def downgrade() -> None:
    op.add_column("chunks", sa.Column("total_chunks", sa.Integer))
    op.execute(
        "UPDATE chunks c SET total_chunks = d.vector_count FROM documents d WHERE d.id = c.document_id"
    )
