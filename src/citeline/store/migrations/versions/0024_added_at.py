"""When each document was first added: ``added_at``, the same on every version of a document.

A version's ``created_at`` is when that version was made, and the listing shows the current version,
so a document replaced yesterday looked added yesterday. The oldest surviving version is no answer:
a replaced version is deleted once the new one serves (or later, when no conversation cites it any
more), taking its time with it. Each new version copies the time from the document's others
(catalog._insert_versions); documents stored before this migration take their oldest version's
``created_at``, the best there is (earlier versions already pruned are gone).

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE documents ADD COLUMN added_at timestamptz")
    op.execute(
        "UPDATE documents d SET added_at = f.first FROM "
        "(SELECT document_id, min(created_at) AS first FROM documents GROUP BY document_id) f "
        "WHERE d.document_id = f.document_id"
    )
    op.execute("ALTER TABLE documents ALTER COLUMN added_at SET DEFAULT now()")
    op.execute("ALTER TABLE documents ALTER COLUMN added_at SET NOT NULL")


def downgrade() -> None:
    op.execute("ALTER TABLE documents DROP COLUMN added_at")
