"""Changing a namespace's embedding model without interrupting search.

``corpus_stats.embedding_model`` is the model the namespace serves: every active version is embedded
by it and every query is. A namespace indexed before it was recorded serves the model most of its
active versions have.

``model_migrations`` records each change of model: the model served when it started, the target, and
how it ended (``running`` -> ``switched`` | ``aborted``), with the last quality check's result. At
most one runs at a time. While one runs, each document gets a second version embedded by the target,
built like any version but kept ``staged`` (complete, never visible) until the switch activates every
staged version in one transaction.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE documents DROP CONSTRAINT documents_status")
    op.execute(
        "ALTER TABLE documents ADD CONSTRAINT documents_status "
        "CHECK (status IN ('pending', 'queued', 'processing', 'completed', 'failed', 'staged'))"
    )
    op.execute("ALTER TABLE corpus_stats ADD COLUMN embedding_model text")
    op.execute(
        "UPDATE corpus_stats SET embedding_model = (SELECT embedding_model FROM documents WHERE is_active "
        "GROUP BY embedding_model ORDER BY count(*) DESC, embedding_model LIMIT 1) WHERE id = 1"
    )
    op.execute(
        "CREATE TABLE model_migrations ("
        "id bigserial PRIMARY KEY, "
        "source_model text NOT NULL, "
        "target_model text NOT NULL, "
        "status text NOT NULL DEFAULT 'running' "
        "CONSTRAINT model_migrations_status CHECK (status IN ('running', 'switched', 'aborted')), "
        "forced boolean NOT NULL DEFAULT false, "
        "check_result jsonb, "
        "started_at timestamptz NOT NULL DEFAULT now(), "
        "finished_at timestamptz)"
    )
    op.execute(
        "CREATE UNIQUE INDEX model_migrations_one_running ON model_migrations ((true)) "
        "WHERE status = 'running'"
    )


def downgrade() -> None:
    op.execute("DROP TABLE model_migrations")
    op.execute("ALTER TABLE corpus_stats DROP COLUMN embedding_model")
    op.execute("DELETE FROM documents WHERE status = 'staged'")
    op.execute("ALTER TABLE documents DROP CONSTRAINT documents_status")
    op.execute(
        "ALTER TABLE documents ADD CONSTRAINT documents_status "
        "CHECK (status IN ('pending', 'queued', 'processing', 'completed', 'failed'))"
    )
