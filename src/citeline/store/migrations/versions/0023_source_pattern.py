"""An index for listing documents by the start of their source key (``GET /documents?source_prefix=``).

``source_uri = ...`` already has an index (``documents_source_version``), but ``LIKE 'prefix%'`` can
use a plain b-tree index only when the database's collation is ``C``; the embedded server's is
``C.UTF-8`` and a server of one's own is often ``en_US.UTF-8``. ``text_pattern_ops`` compares bytes,
which is what a literal prefix needs, whatever the collation.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX documents_source_pattern ON documents (source_uri text_pattern_ops)")


def downgrade() -> None:
    op.execute("DROP INDEX documents_source_pattern")
