"""Conversations and their messages, with the chunks each answer cited.

Cited chunk ids are a plain ordered array, not a foreign key: a chunk is retired with its version while
old answers keep their citation numbers, and whoever resolves the ids skips the missing ones.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
        sa.Column("user_id", sa.Text, nullable=False),
        sa.Column("title", sa.Text),
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("conversations_user_updated", "conversations", ["user_id", "updated_at"])
    op.create_index("conversations_expires", "conversations", ["expires_at"])

    op.create_table(
        "messages",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column(
            "conversation_id",
            pg.UUID(as_uuid=True),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("turn", sa.Integer, nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("standalone_query", sa.Text),
        sa.Column("cited_chunk_ids", pg.ARRAY(sa.BigInteger), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("provider", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("role IN ('user', 'assistant')", name="messages_role"),
        sa.UniqueConstraint("conversation_id", "turn", "role", name="messages_turn_role"),
    )


def downgrade() -> None:
    op.drop_table("messages")
    op.drop_table("conversations")
