"""Hybrid search: dense and BM25 candidates under the same filters, fused, thresholded, cut to top-k."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.access import FULL_ACCESS, Access
from citeline.errors import InvalidRequestError, ModelMismatchError
from citeline.retrieve.filters import Filters
from citeline.retrieve.fusion import min_max, reciprocal_rank, three_sigma, weighted
from citeline.settings import Fusion, Settings
from citeline.store.analyzer import Analyzer
from citeline.store.index import InScope, VectorIndex, VectorQuery, cosine_distances, fill_vectors
from citeline.store.keyword import KeywordIndex
from citeline.store.vectors import as_array, to_pgvector


@dataclass(frozen=True)
class SearchRequest:
    """One search. Unset numbers fall back to the settings."""

    query: str
    filters: Filters = field(default_factory=Filters)
    top_k: int | None = None
    distance_threshold: float | None = None
    fusion: Fusion | None = None
    candidates: int | None = None
    #: A reranker spec for this search (``none`` turns reranking off); unset uses the ``reranker`` setting.
    rerank: str | None = None
    #: Maximal marginal relevance in [0, 1] for this search; unset uses the ``mmr_lambda`` setting.
    mmr_lambda: float | None = None


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk, where it comes from, and how each ranking scored it."""

    chunk_id: int
    document_id: uuid.UUID
    document_name: str
    title: str | None
    version: int
    content_type: str | None
    page: int
    start: int
    end: int
    section: str | None
    chunk_index: int
    total_chunks: int | None
    text: str
    distance: float
    similarity: float
    keyword_score: float
    fused_score: float
    #: The reranker's score, when a reranker reordered this hit (its scale is the reranker's own).
    rerank_score: float | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["document_id"] = str(self.document_id)
        return out


@dataclass
class Timings:
    """Milliseconds spent per stage of the last search."""

    embed: float = 0.0
    dense: float = 0.0
    keyword: float = 0.0
    fuse: float = 0.0
    fetch: float = 0.0
    rerank: float = 0.0


def check_models(
    conn: sa.Connection, model: str, filters: Filters, vector_index: str = "pgvector"
) -> InScope | None:
    """Refuse a search whose documents were embedded by another model than the query's, or whose vectors
    another vector index holds than ``vector_index``: a query never mixes vector spaces.

    For a filtered search, the same statement also resolves its :class:`InScope`, which the dense and
    keyword stages then share instead of each reading the documents again.
    """
    where, params = filters.sql()
    bind = {**params, "m": model, "vi": vector_index}
    other = "(d.embedding_model <> :m OR d.vector_index <> :vi)"
    space = "d.embedding_model || ' (' || d.vector_index || ')'"
    if filters.is_empty:
        others = list(
            conn.execute(
                sa.text(f"SELECT DISTINCT {space} FROM documents d WHERE {where} AND {other}"), bind
            ).scalars()
        )
        scope = None
    else:
        ids, chunks, others, corpus = conn.execute(
            sa.text(
                f"SELECT coalesce(array_agg(d.id) FILTER (WHERE NOT {other}), '{{}}'), "
                f"coalesce(sum(d.vector_count) FILTER (WHERE NOT {other}), 0), "
                f"coalesce(array_agg(DISTINCT {space}) FILTER (WHERE {other}), '{{}}'), "
                "(SELECT chunk_count FROM corpus_stats WHERE id = 1) "
                f"FROM documents d WHERE {where}"
            ),
            bind,
        ).one()
        scope = InScope(list(ids), int(chunks), int(corpus))
    if others:
        raise ModelMismatchError(
            f"the query would be embedded with {model} and searched in {vector_index}, but documents in "
            f"this search were embedded with {', '.join(sorted(others))}. Set CITELINE_EMBEDDING_MODEL and "
            "CITELINE_VECTOR_BACKEND to match them, or re-ingest the documents (citeline reingest) with "
            "the current ones."
        )
    return scope


def hybrid_search(
    conn: sa.Connection,
    request: SearchRequest,
    query_vector: Callable[[], NDArray[np.float32]],
    *,
    model: str,
    analyzer: Analyzer,
    keyword_index: KeywordIndex,
    vector_index: VectorIndex,
    settings: Settings,
    timings: Timings | None = None,
) -> list[Hit]:
    """Run ``request`` and return at most top-k hits, best first.

    ``query_vector`` returns the query's embedding. It is called once the catalog has been read and
    the keyword stage has run, which need no vector, so the caller can embed the query meanwhile.
    """
    top_k = request.top_k or settings.top_k
    if top_k < 1:
        raise InvalidRequestError(f"top_k must be at least 1, got {top_k}")
    threshold = (
        request.distance_threshold if request.distance_threshold is not None else settings.distance_threshold
    )
    if threshold is not None and not 0 <= threshold <= 2:
        raise InvalidRequestError(f"distance_threshold is a cosine distance in [0, 2], got {threshold}")
    depth = max(request.candidates or settings.candidates, top_k)
    fusion = request.fusion or settings.fusion
    timings = timings or Timings()
    where, params = request.filters.sql()
    scope = check_models(conn, model, request.filters, vector_index.name)

    t0 = time.perf_counter()
    keyword = keyword_index.search(
        conn,
        analyzer.term_counts(request.query),
        where=where,
        params=params,
        document_ids=scope.document_ids if scope else None,
        limit=depth,
    )
    t1 = time.perf_counter()
    vector = query_vector()
    t2 = time.perf_counter()
    dense = vector_index.search(conn, VectorQuery(vector, model, request.filters, scope, depth))
    t3 = time.perf_counter()

    scored = _distances(conn, dict(dense), {cid for cid, _ in keyword}, vector, vector_index)
    kw_scores = dict(keyword)
    if fusion is Fusion.RECIPROCAL_RANK:
        fused = reciprocal_rank([[c for c, _ in dense], [c for c, _ in keyword]], k=settings.rrf_k)
    else:
        fused = weighted(
            {cid: 1.0 - distance for cid, (distance, _) in scored.items()},
            kw_scores,
            {cid: settings.source_boost.get(ctype or "", 0.5) for cid, (_, ctype) in scored.items()},
            w_semantic=settings.weight_semantic,
            w_keyword=settings.weight_keyword,
            w_source=settings.weight_source,
            normalise=three_sigma if fusion is Fusion.DISTRIBUTION else min_max,
        )
    ranked = [
        (cid, score)
        for cid, score in sorted(fused.items(), key=lambda item: (-item[1], item[0]))
        # A chunk missing from ``scored`` was retired between the index queries and now.
        if cid in scored and (threshold is None or scored[cid][0] <= threshold)
    ][:top_k]
    t4 = time.perf_counter()
    rows = _fetch(conn, [cid for cid, _ in ranked])
    hits = [
        Hit(
            **rows[cid],
            distance=scored[cid][0],
            similarity=1.0 - scored[cid][0],
            keyword_score=kw_scores.get(cid, 0.0),
            fused_score=score,
        )
        for cid, score in ranked
        if cid in rows
    ]
    t5 = time.perf_counter()
    # Waiting for the query vector (t1 to t2) is the embedding's time, which the caller measures.
    timings.keyword, timings.dense = (t1 - t0) * 1e3, (t3 - t2) * 1e3
    timings.fuse, timings.fetch = (t4 - t3) * 1e3, (t5 - t4) * 1e3
    return hits


def _distances(
    conn: sa.Connection,
    dense: dict[int, float],
    keyword: set[int],
    query: NDArray[np.float32],
    vector_index: VectorIndex,
) -> dict[int, tuple[float, str | None]]:
    """Cosine distance and content type of every candidate still active.

    Dense hits bring their distance; only keyword-only hits need it computed (from the chunk row, or
    from the vector index when the row holds no vector).
    """
    ids = set(dense) | keyword
    if not ids:
        return {}
    result = conn.execute(
        sa.text(
            "SELECT c.id, CASE WHEN c.id = ANY(:todo) THEN c.embedding <=> CAST(:q AS vector) END, "
            "d.content_type, c.embedding IS NULL FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE c.id = ANY(:ids) AND d.is_active"
        ),
        {"ids": list(ids), "todo": list(keyword - dense.keys()), "q": to_pgvector(query)},
    ).all()
    elsewhere = [int(r[0]) for r in result if r[3] and r[0] not in dense]
    held = cosine_distances(vector_index.vectors(conn, elsewhere), query) if elsewhere else {}
    out: dict[int, tuple[float, str | None]] = {}
    for cid, distance, ctype, _ in result:
        if cid in dense:
            out[int(cid)] = (dense[cid], ctype)
        elif distance is not None or cid in held:
            out[int(cid)] = (float(distance) if distance is not None else held[cid], ctype)
    return out


def fetch_hits(
    conn: sa.Connection,
    chunk_ids: Sequence[int],
    query_vector: NDArray[np.float32] | None = None,
    *,
    vector_index: VectorIndex,
    access: Access = FULL_ACCESS,
) -> list[Hit]:
    """Chunks by id, in the order given, as hits; ids of chunks no longer active, or outside
    ``access``, are skipped.

    With ``query_vector`` each hit carries its cosine distance to it (otherwise distance 1.0, similarity 0);
    keyword and fused scores are 0: these hits were not ranked by a search.
    """
    ids = list(dict.fromkeys(chunk_ids))
    rows = _fetch(conn, ids, access)
    distances: dict[int, float] = {}
    if query_vector is not None and rows:
        result = conn.execute(
            sa.text("SELECT id, embedding FROM chunks WHERE id = ANY(:ids)"), {"ids": list(rows)}
        )
        found = {int(r[0]): None if r[1] is None else as_array(r[1]) for r in result}
        distances = cosine_distances(fill_vectors(conn, vector_index, found), query_vector)
    return [
        Hit(
            **rows[cid],
            distance=distances.get(cid, 1.0),
            similarity=1.0 - distances.get(cid, 1.0),
            keyword_score=0.0,
            fused_score=0.0,
        )
        for cid in ids
        if cid in rows
    ]


def _fetch(conn: sa.Connection, ids: list[int], access: Access = FULL_ACCESS) -> dict[int, dict[str, Any]]:
    """The stored fields of the chunks that made the cut (and that ``access`` sees)."""
    if not ids:
        return {}
    visible, params = access.sql("d")
    result = conn.execute(
        sa.text(
            "SELECT c.id AS chunk_id, d.document_id, d.name AS document_name, d.title, c.version, "
            "d.content_type, c.page, c.start_offset AS start, c.end_offset AS end, c.section, c.chunk_index, "
            "d.vector_count AS total_chunks, c.text "
            "FROM chunks c JOIN documents d ON d.id = c.document_id "
            f"WHERE c.id = ANY(:ids) AND d.is_active AND {visible}"
        ),
        {"ids": ids, **params},
    )
    return {row.chunk_id: dict(row._mapping) for row in result}
