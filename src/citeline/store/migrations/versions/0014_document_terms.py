"""Keyword terms of whole documents, for BM25 with document-level statistics beside the chunks'.

``document_terms`` holds each version's term frequencies over its whole text, ``documents.keyword_length``
its length in terms, and ``corpus_stats`` the number and total length of the active versions (BM25's N
and avgdl at the document level). Versions stored before this revision get their terms from their
stored chunks, with the analyzer the namespace was indexed with.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from citeline.store.analyzer import Analyzer, DocumentTerms

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE document_terms ("
        "document_id uuid NOT NULL REFERENCES documents(id) ON DELETE CASCADE, "
        "term text NOT NULL, tf integer NOT NULL, PRIMARY KEY (document_id, term))"
    )
    op.execute("CREATE INDEX document_terms_term ON document_terms (term) INCLUDE (document_id, tf)")
    op.execute("ALTER TABLE documents ADD COLUMN keyword_length integer")
    op.execute("ALTER TABLE corpus_stats ADD COLUMN document_count bigint NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE corpus_stats ADD COLUMN document_token_total bigint NOT NULL DEFAULT 0")
    _backfill(op.get_bind())


def _backfill(conn: sa.Connection) -> None:
    """Terms of every active version, from its chunks in order, in batches of versions."""
    stored = conn.execute(sa.text("SELECT analyzer FROM corpus_stats WHERE id = 1")).scalar()
    config = dict(stored or {})
    config["extra_stop_words"] = frozenset(config.get("extra_stop_words", ()))
    analyzer = Analyzer(**config)
    versions = list(conn.execute(sa.text("SELECT id FROM documents WHERE is_active")).scalars())
    for at in range(0, len(versions), 500):
        batch = versions[at : at + 500]
        gathered: dict[object, DocumentTerms] = {}
        for doc_id, page, start, end, text in conn.execute(
            sa.text(
                "SELECT document_id, page, start_offset, end_offset, text FROM chunks "
                "WHERE document_id = ANY(:ids) ORDER BY document_id, chunk_index"
            ),
            {"ids": batch},
        ):
            gathered.setdefault(doc_id, DocumentTerms(analyzer)).add(page, start, end, text)
        ids, terms, tfs = [], [], []
        for doc_id, doc_terms in gathered.items():
            for term, tf in doc_terms.counts().items():
                ids.append(doc_id)
                terms.append(term)
                tfs.append(tf)
        conn.execute(
            sa.text(
                "INSERT INTO document_terms (document_id, term, tf) "
                "SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:terms AS text[]), CAST(:tfs AS int[]))"
            ),
            {"ids": ids, "terms": terms, "tfs": tfs},
        )
    conn.execute(
        sa.text(
            "UPDATE documents d SET keyword_length = t.n FROM "
            "(SELECT document_id, sum(tf) AS n FROM document_terms GROUP BY document_id) t "
            "WHERE d.id = t.document_id"
        )
    )
    conn.execute(
        sa.text(
            "UPDATE corpus_stats SET document_count = t.n, document_token_total = t.total FROM "
            "(SELECT count(*) AS n, coalesce(sum(keyword_length), 0) AS total FROM documents "
            "WHERE is_active AND keyword_length IS NOT NULL) t WHERE id = 1"
        )
    )


def downgrade() -> None:
    op.drop_column("corpus_stats", "document_token_total")
    op.drop_column("corpus_stats", "document_count")
    op.drop_column("documents", "keyword_length")
    op.drop_table("document_terms")
