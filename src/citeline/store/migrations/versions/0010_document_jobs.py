"""Stable document ids across versions, and ingestion as per-document jobs.

Each row of ``documents`` is one version; ``document_id`` names the document all versions of one source
share, so a document keeps its id when a new version replaces it. Existing sources get the id of
their oldest surviving version.

A version is also its ingestion job: ``pending`` (registered, not asked to index) -> ``queued`` ->
``processing`` -> ``completed`` | ``failed``. ``attempts`` counts the runs that claimed it,
``not_before`` delays a retry (exponential backoff), ``cancel_requested`` asks the run processing it
to stop, ``queued_at`` and ``started_at`` time it. The catalog is the queue: a runner claims queued
versions with ``FOR UPDATE SKIP LOCKED``, so any number of runners in any number of processes share it.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE documents ADD COLUMN document_id uuid")
    op.execute(
        "UPDATE documents d SET document_id = f.first FROM ("
        "SELECT source_uri, (array_agg(id ORDER BY version))[1] AS first FROM documents GROUP BY source_uri"
        ") f WHERE d.source_uri = f.source_uri"
    )
    op.execute("ALTER TABLE documents ALTER COLUMN document_id SET NOT NULL")
    op.execute("CREATE INDEX documents_document ON documents (document_id, version)")
    op.execute("CREATE UNIQUE INDEX documents_one_active_document ON documents (document_id) WHERE is_active")
    op.execute("ALTER TABLE documents ADD COLUMN attempts integer NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE documents ADD COLUMN queued_at timestamptz")
    op.execute("ALTER TABLE documents ADD COLUMN started_at timestamptz")
    op.execute("ALTER TABLE documents ADD COLUMN not_before timestamptz")
    op.execute("ALTER TABLE documents ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false")
    # What the runner claims: queued versions whose retry delay has passed, oldest first.
    op.execute("CREATE INDEX documents_queue ON documents (queued_at) WHERE status = 'queued'")


def downgrade() -> None:
    op.execute("DROP INDEX documents_queue")
    for column in ("cancel_requested", "not_before", "started_at", "queued_at", "attempts", "document_id"):
        op.execute(f"ALTER TABLE documents DROP COLUMN {column}")
