"""Evidence for a follow-up: fresh hits plus the chunks the conversation already cited.

A follow-up ("and how often should it be serviced?") is usually about the passages the last answer
cited, which a search for the new question may no longer rank. So the most recently cited chunks join
the fresh hits, each re-scored against the new query, under the same filters as the search (a
conversation never widens a request's scopes), and only while their version is still active.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.retrieve.filters import Filters
from citeline.retrieve.search import Hit, fetch_hits
from citeline.store.index import VectorIndex

# Cited chunks looked at per remembered slot, so retired or out-of-scope ones can be replaced by older
# citations without reading a long conversation's whole list.
CANDIDATES_PER_SLOT = 4


def remembered_hits(
    conn: sa.Connection,
    recently_cited: Sequence[int],
    query_vector: NDArray[np.float32],
    *,
    model: str,
    filters: Filters,
    limit: int,
    vector_index: VectorIndex,
    exclude: Collection[int] = (),
    max_distance: float | None = None,
) -> list[Hit]:
    """Up to ``limit`` earlier-cited chunks, the most recently cited first, with their distance to the query.

    ``recently_cited`` lists chunk ids most recent first. Chunks in ``exclude`` (the fresh hits), whose
    version is no longer active, that ``filters`` rule out, that were embedded by another model than
    ``model``, or farther from the query than ``max_distance`` are skipped.
    """
    if limit <= 0:
        return []
    candidates = [cid for cid in dict.fromkeys(recently_cited) if cid not in exclude]
    candidates = candidates[: limit * CANDIDATES_PER_SLOT]
    if not candidates:
        return []
    where, params = filters.sql()
    allowed = set(
        conn.execute(
            sa.text(
                "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id "
                f"WHERE c.id = ANY(:cited) AND c.embedding_model = :model AND {where}"
            ),
            {**params, "cited": candidates, "model": model},
        ).scalars()
    )
    hits = fetch_hits(
        conn, [cid for cid in candidates if cid in allowed], query_vector, vector_index=vector_index
    )
    return [h for h in hits if max_distance is None or h.distance <= max_distance][:limit]


def merge(fresh: Sequence[Hit], remembered: Sequence[Hit]) -> list[Hit]:
    """Fresh hits in their ranked order, each remembered hit placed before the first less similar one.

    Fusion scores are not comparable with plain similarity, so the fresh ranking is kept as it is and
    remembered hits are slotted in by cosine similarity to the new query. A chunk appears once.
    """
    fresh_ids = {h.chunk_id for h in fresh}
    extra = sorted(
        {h.chunk_id: h for h in remembered if h.chunk_id not in fresh_ids}.values(),
        key=lambda h: -h.similarity,
    )
    out: list[Hit] = []
    i = 0
    for hit in fresh:
        while i < len(extra) and extra[i].similarity > hit.similarity:
            out.append(extra[i])
            i += 1
        out.append(hit)
    out.extend(extra[i:])
    return out
