"""The rows of its source file a chunk holds: ``rows`` is ``{first, last}`` for a CSV's chunk.

A CSV's text is one page, and a character span on "page 1" finds nothing in a spreadsheet; the row
does. It cannot be told from what was stored before: the loader leaves out blank rows and Excel's
``sep=`` line, which the file's row numbers count, and keeps no copy of them.

Chunks written before this migration have NULL (shown by their page, as before) until their document
is re-ingested (``citeline reingest``).

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE chunks ADD COLUMN rows integer[]")


def downgrade() -> None:
    op.execute("ALTER TABLE chunks DROP COLUMN rows")
