"""Hybrid search: dense and BM25 candidates under the same filters, fused, thresholded, cut to top-k."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
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
from citeline.store.keyword import DocumentMatch, KeywordIndex
from citeline.store.vectors import dense_search, to_pgvector


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
    #: Auto-metadata of the chunk (citeline.annotate): model-number keys and section type.
    model_numbers: tuple[str, ...] = ()
    section_type: str | None = None

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


@dataclass(frozen=True)
class InScope:
    """What a filtered search may see, read once per search: the active documents of the query's model
    that pass the filter, how many chunks they hold, and how many the whole corpus holds."""

    document_ids: list[uuid.UUID]
    chunks: int
    corpus_chunks: int
    #: With chunk-level filters (model number, section type): the chunks of those documents that
    #: pass them, found through their indexes; ``chunks`` then counts these.
    chunk_ids: list[int] | None = None


def check_models(conn: sa.Connection, model: str, filters: Filters) -> InScope | None:
    """Refuse a search whose documents were embedded by another model than the query's.

    For a filtered search, the same statement also resolves its :class:`InScope`, which the dense and
    keyword stages then share instead of each reading the documents again.
    """
    where, params = filters.sql()
    if filters.is_empty:
        others = list(
            conn.execute(
                sa.text(
                    "SELECT DISTINCT d.embedding_model FROM documents d "
                    f"WHERE {where} AND d.embedding_model <> :m"
                ),
                {**params, "m": model},
            ).scalars()
        )
        scope = None
    else:
        ids, chunks, others, corpus = conn.execute(
            sa.text(
                "SELECT coalesce(array_agg(d.id) FILTER (WHERE d.embedding_model = :m), '{}'), "
                "coalesce(sum(d.vector_count) FILTER (WHERE d.embedding_model = :m), 0), "
                "coalesce(array_agg(DISTINCT d.embedding_model) FILTER (WHERE d.embedding_model <> :m), "
                "'{}'), (SELECT chunk_count FROM corpus_stats WHERE id = 1) "
                f"FROM documents d WHERE {where}"
            ),
            {**params, "m": model},
        ).one()
        scope = InScope(list(ids), int(chunks), int(corpus))
        if filters.on_chunks:
            condition, bound = filters.chunk_sql("c")
            chunk_ids = list(
                conn.execute(
                    sa.text(
                        "SELECT c.id FROM chunks c WHERE c.document_id = ANY(CAST(:ids AS uuid[])) "
                        f"AND c.embedding_model = :m AND {condition}"
                    ),
                    {**bound, "ids": scope.document_ids, "m": model},
                ).scalars()
            )
            scope = InScope(scope.document_ids, len(chunk_ids), scope.corpus_chunks, chunk_ids)
    if others:
        raise ModelMismatchError(
            f"the query would be embedded with {model}, but documents in this search were embedded with "
            f"{', '.join(sorted(others))}. Set CITELINE_EMBEDDING_MODEL to that model, or re-ingest the "
            "documents with the current one."
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
    scope = check_models(conn, model, request.filters)

    t0 = time.perf_counter()
    terms = analyzer.term_counts(request.query)
    stage: dict[str, Any] = {
        "where": where,
        "params": params,
        "document_ids": scope.document_ids if scope else None,
        "limit": depth,
    }
    chunk_ids = scope.chunk_ids if scope else None
    documents: list[DocumentMatch] = []
    # Reciprocal rank fusion has no weights, so whole-document BM25 enters the weighted modes only;
    # a filter on chunks (not documents) leaves it out too.
    if settings.weight_document > 0 and fusion is not Fusion.RECIPROCAL_RANK and chunk_ids is None:
        keyword, documents = keyword_index.search_with_documents(conn, terms, **stage)
    else:
        keyword = keyword_index.search(conn, terms, **stage, chunk_ids=chunk_ids)
    t1 = time.perf_counter()
    vector = query_vector()
    t2 = time.perf_counter()
    dense = dense_search(
        conn,
        vector,
        model=model,
        where=where,
        params=params,
        limit=depth,
        ef_search=settings.hnsw_ef_search,
        exact_below=settings.exact_search_below,
        scope=(scope.document_ids, scope.chunks, scope.corpus_chunks) if scope else None,
        chunk_ids=scope.chunk_ids if scope else None,
    )
    t3 = time.perf_counter()

    # Each of the best documents brings its best keyword chunk, so its score reaches one chunk at least.
    scored = _distances(
        conn, dict(dense), {cid for cid, _ in keyword} | {m.best_chunk for m in documents}, vector
    )
    kw_scores = dict(keyword)
    if fusion is Fusion.RECIPROCAL_RANK:
        fused = reciprocal_rank([[c for c, _ in dense], [c for c, _ in keyword]], k=settings.rrf_k)
    else:
        fused = weighted(
            {cid: 1.0 - distance for cid, (distance, _, _) in scored.items()},
            kw_scores,
            {cid: settings.source_boost.get(ctype or "", 0.5) for cid, (_, ctype, _) in scored.items()},
            w_semantic=settings.weight_semantic,
            w_keyword=settings.weight_keyword,
            w_source=settings.weight_source,
            normalise=three_sigma if fusion is Fusion.DISTRIBUTION else min_max,
            document=document_evidence(documents, {cid: version for cid, (_, _, version) in scored.items()}),
            w_document=settings.weight_document,
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


def document_evidence(
    documents: Sequence[DocumentMatch], version_of: Mapping[int, uuid.UUID]
) -> dict[int, float]:
    """Whole-document BM25 as a list over chunks: every candidate chunk (``version_of``: candidate chunk
    id to its version) of one of the best ``documents`` gets that document's score."""
    by_version = {m.version_id: m.score for m in documents}
    return {cid: by_version[v] for cid, v in version_of.items() if v in by_version}


def _distances(
    conn: sa.Connection, dense: dict[int, float], keyword: set[int], query: NDArray[np.float32]
) -> dict[int, tuple[float, str | None, uuid.UUID]]:
    """Cosine distance, content type and version of every candidate still active.

    Dense hits bring their distance; only keyword-only hits need it computed.
    """
    ids = set(dense) | keyword
    if not ids:
        return {}
    result = conn.execute(
        sa.text(
            "SELECT c.id, CASE WHEN c.id = ANY(:todo) THEN c.embedding <=> CAST(:q AS vector) END, "
            "d.content_type, d.id FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE c.id = ANY(:ids) AND d.is_active"
        ),
        {"ids": list(ids), "todo": list(keyword - dense.keys()), "q": to_pgvector(query)},
    )
    return {int(r[0]): (float(r[1]) if r[1] is not None else dense[r[0]], r[2], r[3]) for r in result}


def fetch_hits(
    conn: sa.Connection,
    chunk_ids: Sequence[int],
    query_vector: NDArray[np.float32] | None = None,
    *,
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
            sa.text("SELECT id, embedding <=> CAST(:q AS vector) FROM chunks WHERE id = ANY(:ids)"),
            {"ids": list(rows), "q": to_pgvector(query_vector)},
        )
        distances = {int(r[0]): float(r[1]) for r in result}
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
            "d.vector_count AS total_chunks, c.text, c.model_numbers, c.section_type "
            "FROM chunks c JOIN documents d ON d.id = c.document_id "
            f"WHERE c.id = ANY(:ids) AND d.is_active AND {visible}"
        ),
        {"ids": ids, **params},
    )
    return {row.chunk_id: {**row._mapping, "model_numbers": tuple(row.model_numbers)} for row in result}
