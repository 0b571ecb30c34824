"""Keyword change log: which versions became visible or were retired, in commit order.

In-process keyword indexes replay it to stay in step with the catalog.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "keyword_log",
        sa.Column("seq", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("document_id", pg.UUID(as_uuid=True), nullable=False),
        sa.Column("added", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("keyword_log")
