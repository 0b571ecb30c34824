"""Record the keyword analyzer a namespace was indexed with.

Terms written by one analyzer cannot be searched with another (a stemmed index never matches
unstemmed query terms), so the first ingest fixes it and later opens check it.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("corpus_stats", sa.Column("analyzer", pg.JSONB))


def downgrade() -> None:
    op.drop_column("corpus_stats", "analyzer")
