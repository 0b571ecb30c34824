"""Cited versions outlive a re-ingest; answers keep what citeline checked of their citations.

A version that a live conversation cites is kept, when a newer version replaces it, as ``superseded``:
invisible to search, without vectors or keyword postings, holding only the chunks of its cited pages
and its stored original (see ``catalog.activate``). The GIN index finds the messages citing a chunk.
``messages.checks`` keeps, for an answer, its checked citations, unsupported sentences and whether
evidence was missing, so a conversation read back shows its citations as they were shown live.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_STATUSES = "'pending', 'queued', 'processing', 'completed', 'failed', 'staged'"


def upgrade() -> None:
    op.execute("ALTER TABLE documents DROP CONSTRAINT documents_status")
    op.execute(
        f"ALTER TABLE documents ADD CONSTRAINT documents_status CHECK (status IN ({_STATUSES}, 'superseded'))"
    )
    op.execute("CREATE INDEX messages_cited_chunks ON messages USING gin (cited_chunk_ids)")
    op.execute("ALTER TABLE messages ADD COLUMN checks jsonb")


def downgrade() -> None:
    op.execute("ALTER TABLE messages DROP COLUMN checks")
    op.execute("DROP INDEX messages_cited_chunks")
    op.execute("DELETE FROM documents WHERE status = 'superseded'")
    op.execute("ALTER TABLE documents DROP CONSTRAINT documents_status")
    op.execute(f"ALTER TABLE documents ADD CONSTRAINT documents_status CHECK (status IN ({_STATUSES}))")
