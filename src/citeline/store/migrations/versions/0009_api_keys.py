"""API keys: each bound to a role (admin or reader) and, for readers, a set of scopes.

Only a key's SHA-256 is stored; the key itself is shown once, when it is created. ``scopes`` NULL
means every scope (admins, and readers created for all scopes); an empty array means universal
documents only.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("scopes", pg.ARRAY(sa.Text)),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("last_used_at", sa.DateTime(timezone=True)),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("role IN ('admin', 'reader')", name="api_keys_role"),
        sa.CheckConstraint("role = 'reader' OR scopes IS NULL", name="api_keys_admin_unscoped"),
    )


def downgrade() -> None:
    op.drop_table("api_keys")
