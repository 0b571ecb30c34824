"""Auto-metadata per chunk: the model numbers it names and the kind of section it belongs to.

``model_numbers`` holds canonical keys (upper case, letters and digits only: ``XR-200`` is ``XR200``),
so a filter matches however the text spelt the number; ``section_type`` is one of the types of
:mod:`citeline.annotate`, or NULL when no rule fired. A search filtered on either first resolves its
chunks through these indexes.

Chunks written before this migration have neither until their document is re-ingested
(``citeline reingest``): filling them in place would rewrite every chunk row and its vector index
entry.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE chunks ADD COLUMN model_numbers text[] NOT NULL DEFAULT '{}'")
    op.execute("ALTER TABLE chunks ADD COLUMN section_type text")
    op.execute("CREATE INDEX chunks_model_numbers ON chunks USING gin (model_numbers)")
    op.execute("CREATE INDEX chunks_section_type ON chunks (section_type) WHERE section_type IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX chunks_section_type")
    op.execute("DROP INDEX chunks_model_numbers")
    op.execute("ALTER TABLE chunks DROP COLUMN section_type")
    op.execute("ALTER TABLE chunks DROP COLUMN model_numbers")
