"""BM25 over the postings table, scored in SQL so it is always consistent with the catalog.

Scores follow Lucene's BM25: ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` and
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``, with N, avgdl and df taken over active
chunks, whatever the filters (filters choose which chunks are returned, not how terms weigh).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import sqlalchemy as sa

K1 = 1.2
B = 0.75


def keyword_search(
    conn: sa.Connection,
    terms: Counter[str],
    *,
    where: str,
    params: dict[str, Any],
    limit: int,
    k1: float = K1,
    b: float = B,
) -> list[tuple[int, float]]:
    """The ``limit`` best BM25 matches among chunks that satisfy ``where``, as ``(chunk_id, score)``.

    A query term repeated in the query counts once per repetition, as in Lucene.
    """
    if not terms:
        return []
    n, total = conn.execute(sa.text("SELECT chunk_count, token_total FROM corpus_stats WHERE id = 1")).one()
    if not n:
        return []
    avgdl = float(total) / float(n)
    rows = conn.execute(
        sa.text(
            f"""
            WITH q AS (SELECT * FROM unnest(CAST(:terms AS text[]), CAST(:qtf AS int[])) AS q(term, qtf)),
            hits AS (
                SELECT p.chunk_id, p.term, p.tf, p.dl, q.qtf, d.id, d.is_active, d.scopes, d.category,
                       d.tags, d.content_type, d.metadata
                FROM q JOIN postings p ON p.term = q.term
                JOIN documents d ON d.id = p.document_id AND d.is_active
            ),
            df AS (SELECT term, count(*) AS df FROM hits GROUP BY term)
            SELECT d.chunk_id, sum(
                d.qtf * ln(1 + (:n - df.df + 0.5) / (df.df + 0.5))
                * d.tf * (:k1 + 1) / (d.tf + :k1 * (1 - :b + :b * d.dl / :avgdl))
            ) AS score
            FROM hits d JOIN df USING (term)
            WHERE {where}
            GROUP BY d.chunk_id
            ORDER BY score DESC, d.chunk_id
            LIMIT :lim
            """
        ),
        {
            **params,
            "terms": list(terms.keys()),
            "qtf": list(terms.values()),
            "n": float(n),
            "avgdl": avgdl,
            "k1": k1,
            "b": b,
            "lim": limit,
        },
    ).all()
    return [(int(r[0]), float(r[1])) for r in rows]
