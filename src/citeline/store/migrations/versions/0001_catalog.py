"""Catalog: documents (one row per version), chunks with vectors, keyword postings, corpus totals.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects import postgresql as pg

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "documents",
        sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("title", sa.Text),
        sa.Column("source_uri", sa.Text, nullable=False),
        sa.Column("content_type", sa.String(100)),
        sa.Column("file_path", sa.Text),
        sa.Column("content_hash", sa.String(64)),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("is_active", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("status", sa.String(20), nullable=False, server_default="pending"),
        sa.Column("error", sa.Text),
        sa.Column("duration_ms", sa.Float),
        sa.Column("processed_at", sa.DateTime(timezone=True)),
        sa.Column("page_count", sa.Integer),
        sa.Column("vector_count", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("embedding_model", sa.Text),
        sa.Column("chunk_size", sa.Integer),
        sa.Column("chunk_overlap", sa.Integer),
        sa.Column("category", sa.Text),
        sa.Column("tags", pg.ARRAY(sa.Text), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("scopes", pg.ARRAY(sa.Text), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("metadata", pg.JSONB, nullable=False, server_default=sa.text("'{}'")),
        sa.Column("uploaded_by", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint(
            "status IN ('pending', 'queued', 'processing', 'completed', 'failed')", name="documents_status"
        ),
    )
    op.create_index(
        "documents_one_active",
        "documents",
        ["source_uri"],
        unique=True,
        postgresql_where=sa.text("is_active"),
    )
    op.create_index("documents_source_version", "documents", ["source_uri", "version"], unique=True)
    op.create_index("documents_scopes", "documents", ["scopes"], postgresql_using="gin")
    op.create_index("documents_tags", "documents", ["tags"], postgresql_using="gin")

    op.create_table(
        "chunks",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column(
            "document_id",
            pg.UUID(as_uuid=True),
            sa.ForeignKey("documents.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("chunk_index", sa.Integer, nullable=False),
        sa.Column("total_chunks", sa.Integer),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("text_hash", sa.String(64), nullable=False),
        sa.Column("page", sa.Integer, nullable=False),
        sa.Column("start_offset", sa.Integer, nullable=False),
        sa.Column("end_offset", sa.Integer, nullable=False),
        sa.Column("section", sa.Text),
        sa.Column("embedding", Vector(), nullable=False),
        sa.Column("embedding_model", sa.Text, nullable=False),
        sa.Column("token_count", sa.Integer, nullable=False),
    )
    op.create_index("chunks_document", "chunks", ["document_id", "chunk_index"])
    op.create_index("chunks_model_hash", "chunks", ["embedding_model", "text_hash"])

    op.create_table(
        "postings",
        sa.Column(
            "chunk_id", sa.BigInteger, sa.ForeignKey("chunks.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("term", sa.Text, primary_key=True),
        sa.Column("tf", sa.Integer, nullable=False),
        sa.Column("dl", sa.Integer, nullable=False),
        sa.Column("document_id", pg.UUID(as_uuid=True), nullable=False),
    )
    op.create_index(
        "postings_term", "postings", ["term"], postgresql_include=["chunk_id", "tf", "dl", "document_id"]
    )

    op.create_table(
        "corpus_stats",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("chunk_count", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("token_total", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.CheckConstraint("id = 1", name="corpus_stats_single_row"),
    )
    op.execute("INSERT INTO corpus_stats (id) VALUES (1)")


def downgrade() -> None:
    op.drop_table("corpus_stats")
    op.drop_table("postings")
    op.drop_table("chunks")
    op.drop_table("documents")
