"""A counter of label changes, so that a process may keep what a search filter kept.

Which documents a filter keeps changes when a version is swapped in, retired or deleted (each writes the
keyword log) or when a document's labels change (relabelling, or re-ingesting unchanged content with new
labels), which writes no log. A trigger counts the latter, whichever statement makes them, so a search
that finds the log and the counter where they were can reuse the scope it read then
(``retrieve/search.py``, :class:`CatalogCache`). ``epoch`` tells one namespace's life from the next: a
namespace dropped and created again starts its log and counter from zero.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE label_changes (id int PRIMARY KEY CHECK (id = 1), "
        "epoch uuid NOT NULL DEFAULT gen_random_uuid(), generation bigint NOT NULL DEFAULT 0)"
    )
    op.execute("INSERT INTO label_changes (id) VALUES (1)")
    op.execute(
        "CREATE FUNCTION count_label_change() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN UPDATE label_changes SET generation = generation + 1 WHERE id = 1; RETURN NULL; END $$"
    )
    # Per statement, and only for statements that set a label column: ingest's status and activation
    # updates never touch the counter's row.
    op.execute(
        "CREATE TRIGGER documents_label_change AFTER UPDATE OF scopes, tags, category, metadata "
        "ON documents FOR EACH STATEMENT EXECUTE FUNCTION count_label_change()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER documents_label_change ON documents")
    op.execute("DROP FUNCTION count_label_change()")
    op.execute("DROP TABLE label_changes")
