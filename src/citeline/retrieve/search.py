"""Hybrid search: dense and BM25 candidates under the same filters, fused, thresholded, cut to top-k."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray
from sqlalchemy import event

from citeline.access import FULL_ACCESS, Access
from citeline.checks import check_number, check_text, refuse_nul
from citeline.errors import InvalidRequestError, ModelMismatchError
from citeline.recent import Recent
from citeline.retrieve.filters import Filters
from citeline.retrieve.fusion import fuse_reciprocal_rank, fuse_weighted, scaled_min_max, scaled_three_sigma
from citeline.retrieve.labels import LabelBoost, Labels
from citeline.settings import Fusion, Settings
from citeline.store import catalog
from citeline.store.analyzer import Analyzer, squash
from citeline.store.index import (
    InScope,
    VectorIndex,
    VectorQuery,
    VersionIds,
    as_array,
    cosine_distances,
    fill_vectors,
)
from citeline.store.keyword import DocumentMatch, KeywordIndex, code_spellings
from citeline.store.vectors import to_pgvector
from citeline.types import embedding_text


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

    def __post_init__(self) -> None:
        # Checked here, as IngestOptions checks its fields: "5" for top_k would fail deep in the search.
        check_text(self.query, "query")
        if not isinstance(self.filters, Filters):
            raise InvalidRequestError(f"filters: give a Filters, not {self.filters!r}")
        check_number(self.top_k, "top_k", whole=True)
        check_number(self.candidates, "candidates", whole=True)
        check_number(self.distance_threshold, "distance_threshold", whole=False)
        check_number(self.mmr_lambda, "mmr_lambda", whole=False)
        check_text(self.rerank, "rerank")
        check_text(self.fusion, "fusion")  # a Fusion is a str too
        # The filters checked themselves when they were made.
        refuse_nul(self.query, "query")
        refuse_nul(self.rerank, "rerank")
        refuse_nul(self.fusion, "fusion")


def resolve_top_k(top_k: int | None, settings: Settings) -> int:
    """How many hits a search returns: ``top_k``, or the setting when it is unset (None, never 0)."""
    resolved = top_k if top_k is not None else settings.top_k
    if resolved < 1:
        raise InvalidRequestError(f"top_k (-k) must be at least 1, got {resolved}")
    return resolved


def resolve_candidates(candidates: int | None, settings: Settings) -> int:
    """How many candidates each side of a search brings: ``candidates``, or the setting when it is
    unset (None, never 0)."""
    resolved = candidates if candidates is not None else settings.candidates
    if resolved < 1:
        raise InvalidRequestError(f"candidates must be at least 1, got {resolved}")
    return resolved


def resolve_fusion(fusion: Fusion | str | None, settings: Settings) -> Fusion:
    """The fusion mode of a search: ``fusion`` (a :class:`Fusion` or its name, as a caller from Python or
    JSON may give it), or the setting when unset. An unknown name is refused, never run as another mode."""
    chosen = fusion or settings.fusion
    try:
        return Fusion(chosen)
    except ValueError:
        known = ", ".join(f.value for f in Fusion)
        raise InvalidRequestError(f"unknown fusion {chosen!r}; known: {known}") from None


@dataclass(frozen=True)
class Copy:
    """Another stored copy of a hit's passage, word for word (same text, same context): a chunk of
    another document, or of the same document elsewhere."""

    chunk_id: int
    document_id: uuid.UUID
    document_name: str
    version: int
    page: int
    #: Whether citeline stores the copy's original file (see :attr:`Hit.has_original`).
    has_original: bool = True

    def as_dict(self) -> dict[str, Any]:
        """As JSON carries it (the document id as text): in search results and answer events alike."""
        out = asdict(self)
        out["document_id"] = str(self.document_id)
        return out


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
    #: Text the chunk is read with but does not hold: the header row of the table it continues.
    context: str | None = None
    #: The other copies of this passage among the search's candidates, best ranked first; a copy is not
    #: a hit of its own while the ``collapse_duplicates`` setting is on.
    also_in: tuple[Copy, ...] = ()
    #: Whether citeline stores the document's original file; not for a web page, of which it keeps the
    #: text only (a reader opens the page's text instead).
    has_original: bool = True
    #: The web address the document was read from; None for a file.
    source_url: str | None = None
    #: The boost CITELINE_LABEL_BOOST gives the hit's document for its labels (``fused_score`` holds
    #: ``weight_source`` times it); 0 when no label of it is boosted, and under rrf fusion.
    label_boost: float = 0.0
    #: The first and last row of the source file the chunk holds, as a spreadsheet numbers them (a
    #: CSV's); None for other documents, and for a CSV's chunk stored before citeline kept them.
    rows: tuple[int, int] | None = None
    #: The names of the columns of the CSV the chunk holds rows of, as its rows write them
    #: (load.table.read_row reads a row back by them); None for other documents, and for a CSV stored
    #: before citeline kept them.
    columns: tuple[str, ...] | None = None

    @property
    def embedded(self) -> str:
        """What the chunk was embedded and indexed from: its text under its context (embedding_text)."""
        return embedding_text(self.text, self.context)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["document_id"] = str(self.document_id)
        out["rows"] = None if self.rows is None else list(self.rows)
        out["columns"] = None if self.columns is None else list(self.columns)
        out["also_in"] = [copy.as_dict() for copy in self.also_in]
        return out


@dataclass
class Timings:
    """Milliseconds spent per stage of the last search."""

    embed: float = 0.0
    catalog: float = 0.0
    dense: float = 0.0
    keyword: float = 0.0
    fuse: float = 0.0
    fetch: float = 0.0
    rerank: float = 0.0


@dataclass
class Explain:
    """How the last search ran, beyond its stage timings (``citeline search --explain``)."""

    #: The dense plan that ran: ``hnsw`` (the index, unfiltered), ``hnsw-post-filter`` (the index,
    #: unfiltered, for twice the chunks the filter's share needs, keeping those in the filter; should too
    #: few be, the search runs again with the filter: ``hnsw-post-filter, then hnsw-iterative``),
    #: ``hnsw-iterative`` (the index, scanning on until the filter's share is found), ``exact`` (every
    #: in-filter vector compared) or ``empty``; ``memory`` (every in-filter vector compared in this
    #: process: the corpus fits ``memory_vectors_mb``); with another vector backend, its name (it plans its
    #: own search).
    dense_plan: str = ""
    #: The share of the corpus's chunks the filter keeps (None when unfiltered).
    selectivity: float | None = None
    #: Chunks in the filter and in the corpus (both None when unfiltered: an unfiltered search does not
    #: count the corpus).
    scope_chunks: int | None = None
    corpus_chunks: int | None = None
    #: Candidates each list brought to fusion.
    dense_candidates: int = 0
    keyword_candidates: int = 0
    #: Whole-document BM25 matches (``weight_document``), and the chunks fused in all: both lists, each
    #: match's best keyword chunk and its first ``document_chunks`` chunks, every chunk once.
    document_candidates: int = 0
    fused_candidates: int = 0
    #: Statements sent to PostgreSQL by the search stages (the transaction's end not counted).
    round_trips: int = 0
    #: The query is nothing but codes (:meth:`Analyzer.only_codes`): its keyword list weighed as the
    #: dense list of a query in words, and the dense list as its keyword list.
    codes_only: bool = False
    #: The codes of a query of codes when none of its hits writes any of them: the hits are only the
    #: passages closest in meaning, which for a code say nothing.
    codes_unwritten: tuple[str, ...] = ()
    #: Candidates CITELINE_LABEL_BOOST lifted (their document carries a boosted label); None when the
    #: boost did not apply (no boost set, or rrf fusion, which has no weights).
    label_boosted: int | None = None
    #: The query vector came from the cache of recent queries.
    cache_hit: bool = False
    #: Milliseconds the search waited for the query vector after the stages that need none (the keyword
    #: stage counts among those only when it ran on this thread, which is when the index had to read
    #: the catalog first: otherwise it runs beside the wait and the dense stage).
    vector_wait: float = 0.0

    def as_dict(self, timings: Timings, total_ms: float) -> dict[str, Any]:
        """The plan with the search's ``timings`` and whole time, as ``--explain --json`` shows them."""
        return {"total_ms": total_ms, "stages_ms": asdict(timings), **asdict(self)}


@dataclass(frozen=True)
class CatalogView:
    """What a search reads of the catalog before it needs the query vector: its scope (filtered
    searches) and the keyword log's first and last positions, in one statement's snapshot."""

    scope: InScope | None
    log: catalog.LogView


class CatalogCache:
    """What searches read of the catalog that stays true while the catalog does not change, kept per
    process (safe to share between threads):

    - per model and vector index, the keyword log position (and the namespace's epoch) at which no
      active document had another model or index: an unfiltered search then skips reading the documents;
    - per filter, the :class:`InScope` it kept, and where the catalog stood when it was read: the
      namespace's epoch, its count of label changes and the keyword log's last position. A filtered
      search that finds the catalog there again reuses it instead of reading the documents: at a
      million chunks that read took 22 ms of a search whose filter kept half of them.

    Every change to which documents are active writes the keyword log (store/catalog.py), and every
    change to a document's labels counts in ``label_changes`` (a trigger, migration 0017), so while
    both stay put, so does what a filter keeps.
    """

    #: Filters whose scopes are kept, the most recently used: a scope of 50,000 versions holds 0.8 MB of
    #: ids and as much again once matched against (VersionIds.lookup).
    SCOPES = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clean: dict[tuple[str, str], tuple[uuid.UUID | None, int]] = {}
        self._scopes: Recent[tuple[str, ...], tuple[tuple[Any, ...], InScope]] = Recent(self.SCOPES)

    def position(self, model: str, vector_index: str = "pgvector") -> tuple[uuid.UUID | None, int]:
        """The namespace's epoch and the log position last found clean for ``model`` in
        ``vector_index``; (None, -1) if none."""
        with self._lock:
            return self._clean.get((model, vector_index), (None, -1))

    def record(self, model: str, log: catalog.LogView, vector_index: str = "pgvector") -> None:
        with self._lock:
            self._clean[(model, vector_index)] = (log.epoch, log.last)

    def scope(self, key: tuple[str, ...]) -> tuple[tuple[Any, ...], InScope] | None:
        """The scope last read for ``key`` (a filter of a model and index) and where the catalog stood."""
        return self._scopes.get(key)

    def keep(self, key: tuple[str, ...], state: tuple[Any, ...], scope: InScope) -> None:
        self._scopes.put(key, (state, scope))


def read_catalog(
    conn: sa.Connection,
    model: str,
    filters: Filters,
    cache: CatalogCache | None = None,
    vector_index: str = "pgvector",
) -> CatalogView:
    """Refuse a search whose documents were embedded by another model than the query's, or whose vectors
    another vector index holds than ``vector_index`` (a query never mixes vector spaces), and read what
    the later stages share, in one statement.

    For a filtered search that is its :class:`InScope`, which the dense and keyword stages then share
    instead of each reading the documents again. With ``cache``, an unfiltered search reads the
    documents only when the keyword log moved since a search of ``model`` last found them clean, and a
    filtered one only when the catalog changed since the same filter was last read.
    """
    where, params = filters.sql()
    other = "(d.embedding_model <> :m OR d.vector_index <> :vi)"
    space = "d.embedding_model || ' (' || d.vector_index || ')'"
    last = catalog.LOG_LAST_SQL
    if filters.is_empty:
        known_epoch, known = cache.position(model, vector_index) if cache else (None, -1)
        # An uncorrelated subquery runs only when its CASE branch is taken.
        first, last_seq, epoch, labels, others = conn.execute(
            sa.text(
                f"SELECT {catalog.LOG_VIEW_SQL}, CASE WHEN ({last}, {catalog.EPOCH_SQL}) "
                "IS NOT DISTINCT FROM (CAST(:known AS bigint), CAST(:known_epoch AS uuid)) "
                f"THEN CAST('{{}}' AS text[]) ELSE (SELECT coalesce(array_agg(DISTINCT {space}), "
                f"'{{}}') FROM documents d WHERE {where} AND {other}) END"
            ),
            {**params, "m": model, "vi": vector_index, "known": known, "known_epoch": known_epoch},
        ).one()
        _refuse_mixed(others, model, vector_index)
        view = catalog.log_view(first, last_seq, epoch, labels)
        if cache is not None:
            cache.record(model, view, vector_index)
        return CatalogView(None, view)
    on_chunks, chunk_params = filters.chunk_sql("c")
    # Every condition, documents' and chunks', with its parameters: two filters with one key keep the same.
    bound = json.dumps([params, chunk_params], sort_keys=True, default=str)
    key = (model, vector_index, where, on_chunks, bound)
    kept = cache.scope(key) if cache else None
    held = kept[0] if kept else (None, None, None)
    # The documents are read only when the catalog is no longer where it was when this filter's scope was
    # kept: the condition holds no column of theirs, so PostgreSQL tests it once, before any scan.
    # The epoch comes from label_changes itself, joined here: the LogView's own is the same row.
    epoch, generation, first, last_seq, ids, chunks, others, corpus = conn.execute(
        sa.text(
            f"SELECT s.epoch, s.generation, {catalog.LOG_FIRST_SQL}, {last}, r.ids, r.chunks, r.others, "
            "(SELECT chunk_count FROM corpus_stats WHERE id = 1) FROM label_changes s CROSS JOIN LATERAL ("
            "SELECT coalesce(string_agg(uuid_send(d.id), ''::bytea) "
            f"FILTER (WHERE NOT {other}), ''::bytea) AS ids, "
            f"coalesce(sum(d.vector_count) FILTER (WHERE NOT {other}), 0) AS chunks, "
            f"coalesce(array_agg(DISTINCT {space}) FILTER (WHERE {other}), '{{}}') AS others "
            f"FROM documents d WHERE {where} AND (s.epoch, s.generation, {last}) IS DISTINCT FROM "
            "(CAST(:k_epoch AS uuid), CAST(:k_gen AS bigint), CAST(:k_last AS bigint))) r WHERE s.id = 1"
        ),
        {
            **params,
            "m": model,
            "vi": vector_index,
            "k_epoch": held[0],
            "k_gen": held[1],
            "k_last": held[2],
        },
    ).one()
    state = (epoch, int(generation), int(last_seq))
    view = catalog.log_view(first, last_seq, epoch, generation)
    if kept is not None and state == kept[0]:
        return CatalogView(kept[1], view)
    scope = InScope(VersionIds(ids), int(chunks), int(corpus))
    if filters.on_chunks:
        chunk_ids = list(
            conn.execute(
                sa.text(
                    "SELECT c.id FROM chunks c WHERE c.document_id = ANY(CAST(:ids AS uuid[])) "
                    f"AND c.embedding_model = :m AND {on_chunks}"
                ),
                {**chunk_params, "ids": list(scope.document_ids), "m": model},
            ).scalars()
        )
        scope = InScope(scope.document_ids, len(chunk_ids), scope.corpus_chunks, chunk_ids)
    _refuse_mixed(others, model, vector_index)
    if cache is not None:
        cache.keep(key, state, scope)
    return CatalogView(scope, view)


def _refuse_mixed(others: Sequence[str], model: str, vector_index: str) -> None:
    """Raise if ``others`` (the vector spaces of documents a search reaches besides its own) is not empty."""
    if others:
        raise ModelMismatchError(
            f"the query would be embedded with {model} and searched in {vector_index}, but documents in "
            f"this search were embedded with {', '.join(sorted(others))}. Set CITELINE_EMBEDDING_MODEL and "
            "CITELINE_VECTOR_BACKEND to match them, or re-ingest the documents (citeline reingest) with "
            "the current ones."
        )


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
    explain: Explain | None = None,
    cache: CatalogCache | None = None,
    pool: Executor | None = None,
) -> list[Hit]:
    """Run ``request`` and return at most top-k hits, best first.

    ``query_vector`` returns the query's embedding. It is called once the catalog has been read (and,
    without ``pool``, the keyword stage has started), which need no vector, so the caller can embed the
    query meanwhile.
    ``cache`` lets searches skip reading the documents while the catalog is unchanged (:class:`CatalogCache`).
    With ``pool``, an index that needs no connection (:meth:`KeywordIndex.search_loaded`) runs the
    keyword stage there, beside the dense stage.
    """
    top_k = resolve_top_k(request.top_k, settings)
    threshold = (
        request.distance_threshold if request.distance_threshold is not None else settings.distance_threshold
    )
    if threshold is not None and not 0 <= threshold <= 2:
        raise InvalidRequestError(f"distance_threshold is a cosine distance in [0, 2], got {threshold}")
    depth = max(resolve_candidates(request.candidates, settings), top_k)
    fusion = resolve_fusion(request.fusion, settings)
    timings = timings or Timings()
    where, params = request.filters.sql()
    with _counting(conn, explain is not None) as statements:
        t0 = time.perf_counter()
        view = read_catalog(conn, model, request.filters, cache, vector_index.name)
        scope = view.scope
        t1 = time.perf_counter()
        terms = analyzer.query_terms(request.query)
        # "E1165" typed for the "E11.65" the documents print: look for the index's spellings too.
        for code, spellings in code_spellings(conn, analyzer.unjoined_codes(request.query)).items():
            for spelling in spellings:
                terms[spelling] = max(terms[spelling], terms[code])
        stage: dict[str, Any] = {
            "where": where,
            "params": params,
            "document_ids": scope.document_ids if scope else None,
            "limit": depth,
            "log": view.log,
        }
        chunk_ids = scope.chunk_ids if scope else None
        # Reciprocal rank fusion has no weights, so whole-document BM25 enters the weighted modes only;
        # a filter on chunks (not documents) leaves it out too.
        with_documents = (
            settings.weight_document > 0 and fusion is not Fusion.RECIPROCAL_RANK and chunk_ids is None
        )
        keyword_ms = 0.0

        def loaded_keyword() -> tuple[list[tuple[int, float]], list[DocumentMatch]] | None:
            nonlocal keyword_ms
            started = time.perf_counter()
            found = keyword_index.search_loaded(
                terms,
                document_ids=stage["document_ids"],
                limit=depth,
                log=view.log,
                chunk_ids=chunk_ids,
                documents=with_documents,
            )
            keyword_ms = (time.perf_counter() - started) * 1e3
            return found

        # An index that needs no connection scores in another thread while this one's connection runs
        # the dense stage in PostgreSQL: at 2M chunks, the two took 41.8 ms one after the other and 26.8
        # ms side by side for a scope of a tenth of them (docs/performance.md).
        pending = pool.submit(loaded_keyword) if pool is not None else None
        t2 = time.perf_counter()
        vector = query_vector()
        t3 = time.perf_counter()
        # Reciprocal rank fusion has no weights, so labels are neither boosted nor read for it.
        boost = (
            LabelBoost.of(settings.label_boost)
            if settings.label_boost and fusion is not Fusion.RECIPROCAL_RANK
            else None
        )
        dense_query = VectorQuery(
            vector, model, request.filters, scope, depth, view.log, labels=boost is not None
        )
        ran: list[str] | None = [] if explain is not None else None
        dense = vector_index.search(conn, dense_query, ran=ran)
        t4 = time.perf_counter()
        found = pending.result() if pending is not None else None
        if found is None:
            # The index must read the catalog first (or runs in PostgreSQL): with this connection, now.
            started = time.perf_counter()
            if with_documents:
                found = keyword_index.search_with_documents(conn, terms, **stage)
            else:
                found = keyword_index.search(conn, terms, **stage, chunk_ids=chunk_ids), []
            keyword_ms = (time.perf_counter() - started) * 1e3
        keyword, documents = found
        t4b = time.perf_counter()
        # Each of the best documents brings its best keyword chunk, so its score reaches one chunk at least,
        # and with document_chunks its first chunks too (bounded, however long the document).
        candidates = _candidates(
            conn,
            dense,
            keyword,
            dense_query,
            vector_index,
            [m.best_chunk for m in documents],
            [m.version_id for m in documents] if settings.document_chunks else (),
            settings.document_chunks,
            boost,
        )
        t5 = time.perf_counter()
        codes_only = analyzer.only_codes(request.query)
        ranked = _rank(
            candidates,
            fusion,
            settings,
            threshold,
            documents,
            keyword_complete=len(keyword) < depth,
            codes=codes_only,
        )
        t6 = time.perf_counter()
        hits = _read_hits(conn, candidates, ranked, top_k, settings.collapse_duplicates)
        t7 = time.perf_counter()
    timings.catalog, timings.keyword = (t1 - t0) * 1e3, keyword_ms
    # Waiting for the query vector (t2 to t3) is the embedding's time, which the caller measures.
    timings.dense, timings.fuse = (t4 - t3) * 1e3, (t6 - t5) * 1e3
    timings.fetch = (t5 - t4b + t7 - t6) * 1e3
    if explain is not None:
        explain.dense_plan = ", then ".join(ran or ())
        explain.scope_chunks = scope.chunks if scope else None
        explain.corpus_chunks = scope.corpus_chunks if scope else None
        explain.selectivity = scope.chunks / scope.corpus_chunks if scope and scope.corpus_chunks else None
        explain.dense_candidates, explain.keyword_candidates = len(dense), len(keyword)
        explain.document_candidates, explain.fused_candidates = len(documents), int(candidates.ids.size)
        explain.round_trips = statements[0]
        explain.codes_only = codes_only and fusion is not Fusion.RECIPROCAL_RANK
        explain.codes_unwritten = _unwritten(analyzer, request.query, hits) if codes_only else ()
        labelled = candidates.label_boost
        explain.label_boosted = None if labelled is None else int(np.count_nonzero(labelled))
        explain.vector_wait = (t3 - t2) * 1e3
    return hits


def _unwritten(analyzer: Analyzer, query: str, hits: Sequence[Hit]) -> tuple[str, ...]:
    """The codes of ``query`` when no hit writes any of them (as the keyword index reads them, with
    or without separators: "E1165" is written by "E11.65")."""
    codes = analyzer.codes(query)
    # A code's first term is the code whole (its parts follow).
    wholes = {squash(term) for code in codes for term in analyzer.terms(code)[:1]}
    written = {squash(term) for hit in hits for term in analyzer.terms(hit.text)}
    return () if wholes & written else tuple(codes)


def document_evidence(
    documents: Sequence[DocumentMatch], version_of: Mapping[int, uuid.UUID]
) -> dict[int, float]:
    """Whole-document BM25 as a list over chunks: every candidate chunk (``version_of``: candidate chunk
    id to its version) of one of the best ``documents`` gets that document's score."""
    by_version = {m.version_id: m.score for m in documents}
    return {cid: by_version[v] for cid, v in version_of.items() if v in by_version}


@contextmanager
def _counting(conn: sa.Connection, enabled: bool) -> Iterator[list[int]]:
    """Count the statements ``conn`` sends meanwhile, if ``enabled`` (a one-element list, filled as
    they go; the listener is left out of searches nobody explains)."""
    count = [0]
    if not enabled:
        yield count
        return

    def sent(*_: object) -> None:
        count[0] += 1

    event.listen(conn, "before_cursor_execute", sent)
    try:
        yield count
    finally:
        event.remove(conn, "before_cursor_execute", sent)


@dataclass(frozen=True)
class _Candidates:
    """Every candidate still active, in arrays aligned on them: fusion's inputs. Ranks are 1-based places
    in the dense and keyword lists, 0 where a list lacks it."""

    ids: NDArray[np.int64]
    #: Each candidate's version (``documents.id``), which whole-document scores are keyed by.
    versions: list[uuid.UUID]
    distance: NDArray[np.float64]
    dense_rank: NDArray[np.int64]
    keyword: NDArray[np.float64]
    keyword_rank: NDArray[np.int64]
    content_types: list[str | None]
    #: Each candidate's CITELINE_LABEL_BOOST boost; None when the search boosts no labels.
    label_boost: NDArray[np.float64] | None = None

    def hit(self, i: int, fused: float, stored: dict[str, Any]) -> Hit:
        """Candidate ``i`` as a hit, from its stored fields (:func:`_fetch`)."""
        distance = float(self.distance[i])
        return Hit(
            **stored,
            distance=distance,
            similarity=1.0 - distance,
            keyword_score=float(self.keyword[i]),
            fused_score=fused,
            label_boost=0.0 if self.label_boost is None else float(self.label_boost[i]),
        )


def _candidates(
    conn: sa.Connection,
    dense: list[tuple[int, float]],
    keyword: list[tuple[int, float]],
    query: VectorQuery,
    vector_index: VectorIndex,
    extra: Sequence[int] = (),
    versions: Sequence[uuid.UUID] = (),
    first_chunks: int = 0,
    boost: LabelBoost | None = None,
) -> _Candidates:
    """Every candidate of both lists with its version, its content type and, for keyword-only ones, its
    cosine distance (dense hits bring theirs); the hits' other fields are read once they are chosen.
    With ``boost``, each candidate's label boost, from its version's labels, read alongside (in the same
    statement, or from the index that holds them: ``query.labels`` asks it for them).
    Chunks retired since the index queries are left out. An index that holds all of this in the process,
    in step with the search's snapshot, tells it (:meth:`VectorIndex.held`: at SciFact's size this
    statement was 1.7 ms of an 8 ms search); otherwise one statement reads it, and a row that holds no
    vector has its distance from the vector index.

    ``extra`` chunks join the candidates, and so do the first ``first_chunks`` chunks (by index) of each
    version in ``versions``: the best whole-document matches, which the search found within its filter."""
    dense_at = {cid: (rank, distance) for rank, (cid, distance) in enumerate(dense, start=1)}
    keyword_at = {cid: (rank, score) for rank, (cid, score) in enumerate(keyword, start=1)}
    ids = list(dense_at) + list(dict.fromkeys(c for c in (*keyword_at, *extra) if c not in dense_at))
    expand = bool(versions and first_chunks)
    # The first chunks of a version are found by their index in the version, which only the catalog knows.
    held = vector_index.held(query, ids) if ids and not expand else None
    if held is not None and (boost is None or held.labels is not None):
        return _aligned(
            held.ids.tolist(),
            held.versions,
            held.content_types,
            held.distances,
            dense_at,
            keyword_at,
            None if boost is None or held.labels is None else boost.boosts(held.labels),
        )
    rows: Sequence[sa.Row[Any]] = []
    if ids or expand:
        # chunks_document (document_id, chunk_index) finds a version's first chunks without a scan.
        rows = conn.execute(
            sa.text(
                "SELECT c.id, d.id AS version_id, d.content_type, "
                + ("d.tags, d.category, d.scopes, " if boost is not None else "")
                + "CASE WHEN c.id <> ALL(:dense) THEN c.embedding <=> CAST(:q AS vector) END "
                "AS query_distance, "
                "c.embedding IS NULL AS elsewhere "
                "FROM chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE (c.id = ANY(:ids)"
                + (
                    " OR (c.document_id = ANY(CAST(:versions AS uuid[])) AND c.chunk_index < :first)"
                    if expand
                    else ""
                )
                + ") AND d.is_active"
            ),
            {
                "ids": ids,
                "dense": list(dense_at),
                "q": to_pgvector(query.vector),
                "versions": [str(v) for v in versions],
                "first": first_chunks,
            },
        ).all()
    elsewhere = [int(r[0]) for r in rows if r.elsewhere and r[0] not in dense_at]
    held_elsewhere = (
        cosine_distances(vector_index.vectors(conn, elsewhere), query.vector) if elsewhere else {}
    )
    # A keyword-only chunk whose vector neither its row nor the index holds cannot be ranked by distance.
    rows = [r for r in rows if r[0] in dense_at or r.query_distance is not None or r[0] in held_elsewhere]
    distance = np.fromiter(
        (
            r.query_distance if r.query_distance is not None else held_elsewhere.get(r[0], np.nan)
            for r in rows
        ),
        dtype=np.float64,
        count=len(rows),
    )
    labels: list[Labels] = (
        [(tuple(r.tags or ()), r.category or None, tuple(r.scopes or ())) for r in rows] if boost else []
    )
    return _aligned(
        [int(r[0]) for r in rows],
        [r.version_id for r in rows],
        [r.content_type for r in rows],
        distance,
        dense_at,
        keyword_at,
        None if boost is None else boost.boosts(labels),
    )


def _aligned(
    ids: list[int],
    versions: list[uuid.UUID],
    content_types: list[str | None],
    distance: NDArray[np.float64],
    dense_at: dict[int, tuple[int, float]],
    keyword_at: dict[int, tuple[int, float]],
    label_boost: NDArray[np.float64] | None = None,
) -> _Candidates:
    """The candidates' arrays; a dense hit's distance is the one its search gave."""
    n = len(ids)
    no_rank = (0, 0.0)
    return _Candidates(
        ids=np.fromiter(ids, dtype=np.int64, count=n),
        versions=versions,
        distance=np.fromiter(
            (dense_at[c][1] if c in dense_at else distance[i] for i, c in enumerate(ids)), np.float64, n
        ),
        dense_rank=np.fromiter((dense_at.get(c, no_rank)[0] for c in ids), dtype=np.int64, count=n),
        keyword=np.fromiter((keyword_at.get(c, no_rank)[1] for c in ids), dtype=np.float64, count=n),
        keyword_rank=np.fromiter((keyword_at.get(c, no_rank)[0] for c in ids), dtype=np.int64, count=n),
        content_types=content_types,
        label_boost=label_boost,
    )


def _read_hits(
    conn: sa.Connection, candidates: _Candidates, ranked: list[tuple[int, float]], top_k: int, collapse: bool
) -> list[Hit]:
    """The first ``top_k`` of ``ranked`` as hits, from their stored fields; with ``collapse``, a passage
    whose text and context a better-ranked hit already has is one of that hit's copies, not a hit.

    The stored fields and texts of the kept hits only are read: reading them for every candidate (about
    160 of them, to keep 10) cost more than this statement (texts are stored out of line: at 100k chunks
    on a loaded machine, 39 ms against 32 ms, medians of 30 searches). Only when copies or retired
    chunks leave fewer than ``top_k`` hits are the next candidates read, as many as are missing.
    """
    hits: list[Hit] = []
    first_of: dict[tuple[str, str | None], int] = {}
    copies: dict[int, list[Copy]] = {}
    at = 0
    while len(hits) < top_k and at < len(ranked):
        batch = ranked[at : at + top_k - len(hits)]
        at += len(batch)
        stored = _fetch(conn, [int(candidates.ids[i]) for i, _ in batch])
        for i, fused in batch:
            row = stored.get(int(candidates.ids[i]))
            if row is None:
                continue  # retired since the candidates were read
            key = (row["text"], row["context"])
            if collapse and (first := first_of.get(key)) is not None:
                copies.setdefault(first, []).append(
                    Copy(
                        chunk_id=row["chunk_id"],
                        document_id=row["document_id"],
                        document_name=row["document_name"],
                        version=row["version"],
                        page=row["page"],
                        has_original=row["has_original"],
                    )
                )
                continue
            first_of[key] = len(hits)
            hits.append(candidates.hit(i, fused, row))
    return [replace(hit, also_in=tuple(copies[n])) if n in copies else hit for n, hit in enumerate(hits)]


def _rank(
    candidates: _Candidates,
    fusion: Fusion,
    settings: Settings,
    threshold: float | None,
    documents: Sequence[DocumentMatch] = (),
    *,
    keyword_complete: bool = False,
    codes: bool = False,
) -> list[tuple[int, float]]:
    """The candidates within ``threshold`` as ``(index in candidates, fused score)``, best first (ties by
    chunk id). ``documents`` (whole-document BM25) reach every candidate of theirs.

    Each list is scaled over the candidates whose score in it is known. The dense list knows them all
    (a keyword-only candidate's distance is read). A keyword list cut at the search's depth does not
    (a candidate missing from it scores somewhere between 0 and its last member), so it is scaled over
    its members; but a ``keyword_complete`` list, shorter than the depth, holds every chunk with a query
    term, and every other candidate's BM25 is exactly 0. Scaled over its members alone, a list of one
    (a query that is one code, found once) scaled to 1 like any lone value, and at weight 0.2 the code's
    one passage ranked 57th of 5,445 chunks under a flat dense list that dbsf stretches over the whole
    scale; beside the zeros it stands as far out as it is (bench/code_lookup.py, docs/search.md).

    A query of ``codes`` only (:meth:`Analyzer.only_codes`) swaps the two lists' weights: the keyword
    list finds the passages that write the code, the dense list only passages that look alike."""
    c = candidates
    by_version = document_evidence(documents, dict(zip(c.ids.tolist(), c.versions, strict=True)))
    document = np.fromiter((by_version.get(int(i), 0.0) for i in c.ids), dtype=np.float64, count=c.ids.size)
    if fusion is Fusion.RECIPROCAL_RANK:
        fused = fuse_reciprocal_rank([c.dense_rank, c.keyword_rank], k=settings.rrf_k)
    else:
        fused = fuse_weighted(
            1.0 - c.distance,
            np.ones(c.ids.size, dtype=bool),
            c.keyword,
            np.ones(c.ids.size, dtype=bool) if keyword_complete else c.keyword_rank > 0,
            np.array([settings.source_boost.get(t or "", 0.5) for t in c.content_types], dtype=np.float64),
            w_semantic=settings.weight_keyword if codes else settings.weight_semantic,
            w_keyword=settings.weight_semantic if codes else settings.weight_keyword,
            w_source=settings.weight_source,
            scale=scaled_three_sigma if fusion is Fusion.DISTRIBUTION else scaled_min_max,
            document=document,
            in_document=document > 0,
            w_document=settings.weight_document,
        )
        if c.label_boost is not None:
            # The labels' part, on the scale of the source boost's (CITELINE_LABEL_BOOST).
            fused += settings.weight_source * c.label_boost
    order = np.lexsort((c.ids, -fused))
    if threshold is not None:
        order = order[c.distance[order] <= threshold]
    return [(int(i), float(fused[i])) for i in order]


#: The stored fields of a :class:`Hit`, over ``chunks c JOIN documents d``.
_HIT_COLUMNS = (
    "c.id AS chunk_id, d.document_id, d.name AS document_name, d.title, c.version, d.content_type, c.page, "
    "c.start_offset AS start, c.end_offset AS end, c.section, c.chunk_index, d.vector_count AS total_chunks, "
    f"c.model_numbers, c.section_type, c.context, c.text, c.rows, {catalog.ORIGIN_COLUMNS}, "
    "d.source_metadata -> 'column_names' AS columns"
)


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
            f"SELECT {_HIT_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
            f"WHERE c.id = ANY(:ids) AND d.is_active AND {visible}"
        ),
        {"ids": ids, **params},
    )
    return {
        row.chunk_id: {
            **row._mapping,
            "model_numbers": tuple(row.model_numbers),
            "rows": None if row.rows is None else tuple(row.rows),
            "columns": tuple(row.columns) if isinstance(row.columns, list) else None,
        }
        for row in result
    }
