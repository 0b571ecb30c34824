"""Evidence for a follow-up: fresh hits plus the chunks the conversation already cited.

A follow-up ("and how often should it be serviced?") is usually about the passages the last answer
cited, which a search for the new question may no longer rank. So the most recently cited chunks join
the fresh hits, each re-scored against the new query, under the same filters as the search (a
conversation never widens a request's scopes), and only while their version is still active.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

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


def as_cited(conn: sa.Connection, fresh: Sequence[Hit], cited: Collection[int]) -> list[Hit]:
    """``fresh`` with each hit that holds, word for word, a passage of its document the conversation
    cited (``cited``: its cited chunk ids) given as that cited chunk, so the answer cites it by the
    number it already has.

    A re-ingest builds a new version whose chunks are new chunks, though most say what the old ones
    did: asked again, the same passage of the new version was cited as [4] where the conversation
    had called it [1]. The cited chunk is kept while the conversation cites it (``ingesting.md``), its
    text is the fresh hit's, and it opens as the version it was cited from, saying a newer one exists.
    Only the fresh hit's place in the document changes (its version, page and offsets).
    """
    if not fresh or not cited:
        return list(fresh)
    rows = conn.execute(
        sa.text(
            "SELECT DISTINCT ON (n.id) n.id AS fresh_id, o.id, o.version, o.page, o.start_offset, "
            "o.end_offset, o.chunk_index "
            "FROM chunks n JOIN documents dn ON dn.id = n.document_id "
            "JOIN chunks o ON o.text_hash = n.text_hash AND o.id <> n.id "
            "JOIN documents do_ ON do_.id = o.document_id AND do_.document_id = dn.document_id "
            "WHERE n.id = ANY(:fresh) AND o.id = ANY(:cited) AND o.text = n.text "
            "ORDER BY n.id, o.id"
        ),
        {"fresh": [h.chunk_id for h in fresh], "cited": list(cited)},
    ).all()
    twin = {r.fresh_id: r for r in rows}
    taken = {h.chunk_id for h in fresh}
    out: list[Hit] = []
    for hit in fresh:
        old = twin.get(hit.chunk_id)
        if old is None or old.id in taken:
            out.append(hit)
            continue
        taken.add(old.id)
        out.append(
            replace(
                hit,
                chunk_id=old.id,
                version=old.version,
                page=old.page,
                start=old.start_offset,
                end=old.end_offset,
                chunk_index=old.chunk_index,
            )
        )
    return out
