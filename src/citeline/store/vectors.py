"""Dense search over pgvector: one partial HNSW index per embedding model, exact scans for narrow filters,
and for a corpus small enough, exact search over its vectors held in the process (store/memory_vectors.py).

Vectors of every model share the ``chunks.embedding`` column; each model gets an HNSW index over a
cast to its dimension, restricted to its own rows. A query names its model, so it can only ever be
compared with vectors of the same space.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.errors import StoreError
from citeline.store.index import (
    EmbedFn,
    HeldChunks,
    Repair,
    VectorQuery,
    VersionIds,
    VersionVectors,
    as_array,
)
from citeline.store.memory_vectors import MemoryVectors

#: pgvector settings every connection starts with (store/database.py passes them at connect time),
#: so a search that needs nothing else sends no statement to set them. Iterative scanning
#: (pgvector >= 0.8) asks the ANN index for more candidates while rows fail the filters, so filtered
#: queries still fill k without falling back to a full scan; ef_search is the default breadth for
#: the default 100 candidates; the scan budget is pgvector's own default.
SESSION_EF_SEARCH = 100
SESSION_SCAN_BUDGET = 20_000
SESSION_SETTINGS = {
    "hnsw.iterative_scan": "relaxed_order",
    "hnsw.ef_search": str(SESSION_EF_SEARCH),
    "hnsw.max_scan_tuples": str(SESSION_SCAN_BUDGET),
}


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


#: pgvector's HNSW indexes ``vector`` up to 2,000 dimensions and ``halfvec`` (16-bit floats) up to 4,000.
VECTOR_INDEX_MAX_DIM = 2000
HALFVEC_INDEX_MAX_DIM = 4000


def index_name(model: str) -> str:
    return "chunks_hnsw_" + hashlib.sha1(model.encode()).hexdigest()[:12]


def index_type(dimension: int) -> str:
    """The type a model's vectors are cast to for its HNSW index and its queries: ``vector`` up to 2,000
    dimensions, ``halfvec`` above (OpenAI's text-embedding-3-large has 3,072). Rows keep full ``vector``
    precision either way: exact scans and re-ranking distances read them uncast."""
    if dimension > HALFVEC_INDEX_MAX_DIM:
        raise StoreError(
            f"pgvector's HNSW index holds at most {HALFVEC_INDEX_MAX_DIM} dimensions (as halfvec); this "
            f"model's vectors have {dimension}: choose a model, or a dimension, of at most that"
        )
    return "halfvec" if dimension > VECTOR_INDEX_MAX_DIM else "vector"


def ensure_index(
    conn: sa.Connection, model: str, dimension: int, *, build_memory_mb: int | None = None
) -> None:
    """Create the model's HNSW index (cosine, over :func:`index_type`) if it does not exist yet, with
    ``build_memory_mb`` of maintenance_work_mem for the build (None: the server's setting)."""
    kind = index_type(dimension)
    name = index_name(model)
    exists = conn.execute(
        sa.text("SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = :n"),
        {"n": name},
    ).first()
    if exists:
        return
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:n))"), {"n": name})
    if build_memory_mb is not None:
        conn.execute(sa.text(f"SET LOCAL maintenance_work_mem = '{int(build_memory_mb)}MB'"))
    conn.execute(
        sa.text(
            f"CREATE INDEX IF NOT EXISTS {name} ON chunks USING hnsw "
            f"((embedding::{kind}({int(dimension)})) {kind}_cosine_ops) "
            f"WITH (m = 16, ef_construction = 64) WHERE embedding_model = {_literal(model)}"
        )
    )


def to_pgvector(vector: NDArray[np.float32]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"


@dataclass(frozen=True)
class DensePlan:
    """How a dense search runs: ``kind`` is ``hnsw`` (the index, unfiltered), ``hnsw-post-filter`` (the
    index, unfiltered, for ``fetch`` chunks of which those in the filter are kept), ``hnsw-iterative``
    (the index, scanning on past tuples the filter drops), ``exact`` (every in-filter vector compared)
    or ``empty`` (nothing in the filter); ``ef_search`` and ``scan_budget`` are pgvector's search
    breadth and its cap on index tuples an iterative scan visits."""

    kind: str
    ef_search: int
    scan_budget: int
    fetch: int = 0


#: A post-filtered search asks the index for this many times the chunks the filter's share predicts it
#: needs: the filter's chunks are seldom spread evenly among a query's neighbours.
POST_FILTER_MARGIN = 2


def plan_dense(
    scope: tuple[Sequence[uuid.UUID], int, int] | None,
    *,
    limit: int,
    ef_search: int,
    exact_below: int,
    tuple_cost: float = 0.0,
    post_filter_max: int = 0,
    on_chunks: bool = False,
) -> DensePlan:
    """The plan of :func:`dense_search` for these arguments.

    A filter keeping ``n`` of ``total`` chunks is scanned exactly when ``n <= exact_below``, or when
    that is cheaper than the index: an exact scan reads ``n`` rows, while the index walks about
    ``limit * total / n`` tuples to find ``limit`` in the filter, each costing ``tuple_cost`` rows
    of an exact scan (0 never compares: the index above ``exact_below``). On the index, a filter wide
    enough that ``POST_FILTER_MARGIN * limit * total / n`` chunks are at most ``post_filter_max`` is
    searched unfiltered for that many and filtered after; a narrower one, with the filter. A filter
    ``on_chunks`` (chunk-level metadata) is always walked with the filter: its chunk ids are the filter.
    """
    ef = max(int(ef_search), limit)
    if scope is None:
        return DensePlan("hnsw", ef, SESSION_SCAN_BUDGET)
    doc_ids, in_scope, total = scope
    if not doc_ids or not in_scope:
        return DensePlan("empty", ef, SESSION_SCAN_BUDGET)
    if in_scope <= exact_below or in_scope * in_scope <= tuple_cost * limit * total:
        return DensePlan("exact", ef, SESSION_SCAN_BUDGET)
    fetch = -(-POST_FILTER_MARGIN * limit * max(total, in_scope) // in_scope)
    if fetch <= post_filter_max and not on_chunks:
        return DensePlan("hnsw-post-filter", max(ef, fetch), SESSION_SCAN_BUDGET, fetch)
    # A filter keeping a share p of the chunks needs about limit / p index tuples to fill the limit;
    # pgvector stops at hnsw.max_scan_tuples, so raise it for narrow filters.
    budget = min(max(SESSION_SCAN_BUDGET, 4 * limit * total // in_scope), 2_000_000)
    return DensePlan("hnsw-iterative", ef, budget)


def dense_search(
    conn: sa.Connection,
    query: NDArray[np.float32],
    *,
    model: str,
    where: str,
    params: dict[str, Any],
    limit: int,
    ef_search: int,
    exact_below: int,
    tuple_cost: float = 0.0,
    post_filter_max: int = 0,
    scope: tuple[Sequence[uuid.UUID], int, int] | None = None,
    chunk_ids: Sequence[int] | None = None,
    ran: list[str] | None = None,
) -> list[tuple[int, float]]:
    """The ``limit`` nearest active chunks to ``query`` that satisfy ``where``: ``(chunk_id, distance)``.

    ``scope``, for a filtered search, is what the filter leaves: the documents of ``model`` it keeps,
    their chunk count and the corpus's. When that is few chunks (see :func:`plan_dense`), they are
    scanned exactly (cheap, and no approximate index can miss one); otherwise the HNSW index is
    walked with iterative scanning, keeping the tuples of those documents (``where`` is then not
    read again). ``chunk_ids``, for a search with chunk-level filters, are the chunks of those
    documents that pass them: the tuples kept are then these, and ``scope``'s count is theirs.

    A wide filter is searched unfiltered and its chunks kept after (``post_filter_max``, see
    :func:`plan_dense`); should fewer than ``limit`` of them be among the chunks fetched, the search
    runs again with the filter. ``ran``, when given, gets the kind of each plan run, in order.
    """
    ran = ran if ran is not None else []
    plan = plan_dense(
        scope,
        limit=limit,
        ef_search=ef_search,
        exact_below=exact_below,
        tuple_cost=tuple_cost,
        post_filter_max=post_filter_max,
        on_chunks=chunk_ids is not None,
    )
    ran.append(plan.kind)
    if plan.kind == "empty":
        return []
    dim = int(query.shape[0])
    kind = index_type(dim)
    cast = f"c.embedding::{kind}({dim})"
    bind = {**params, "q": to_pgvector(query), "lim": limit, "m": model}
    if plan.kind == "exact":
        assert scope is not None
        kept = "c.document_id = ANY(CAST(:ids AS uuid[]))"
        if chunk_ids is not None:
            kept = "c.id = ANY(CAST(:cids AS bigint[]))"
        # Ordering by the uncast expression keeps the planner off the ANN index: this scan is exact.
        rows = conn.execute(
            sa.text(
                "SELECT c.id, c.embedding <=> CAST(:q AS vector) AS distance FROM chunks c "
                f"WHERE {kept} AND c.embedding_model = :m ORDER BY distance LIMIT :lim"
            ),
            {**bind, "ids": list(scope[0]), "cids": list(chunk_ids or [])},
        ).all()
        return [(int(r[0]), float(r[1])) for r in rows]
    if plan.kind == "hnsw-post-filter":
        assert scope is not None
        found = _post_filtered(conn, plan, model, cast, kind, dim, bind, scope[0], limit)
        if found is not None:
            return found
        # The breadth the unfiltered search set stays for the transaction: the filtered walk keeps it.
        walk = plan_dense(scope, limit=limit, ef_search=ef_search, exact_below=0)
        plan = replace(walk, ef_search=plan.ef_search)
        ran.append(plan.kind)
    _set_breadth(conn, plan)
    if scope is not None:
        # Each index tuple's version is looked up in a hash of the versions the filter keeps, built once
        # per statement from the ids the catalog read sent back packed (16 bytes each), instead of
        # joining its document. "IS TRUE" keeps the planner from pulling the IN up into a join, which
        # would lose the index's order. At a million chunks (50,000 versions), a filter keeping a tenth
        # of them: 8.5 ms, against 28 ms with the filter evaluated over the documents in the subplan
        # (a scan of them all each search) and 25 ms with the ids bound as a uuid array (sent as text);
        # half of them: 15.9 ms against 24.9 and 97 (docs/performance.md). A bound array tested with
        # "= ANY" instead is searched item by item for every tuple, not hashed.
        source = "chunks c"
        condition = (
            "(c.document_id IN (SELECT CAST(encode(substring(CAST(:scope AS bytea) FROM i FOR 16), 'hex') "
            "AS uuid) FROM generate_series(1, length(CAST(:scope AS bytea)), 16) AS i)) IS TRUE"
        )
        bind["scope"] = VersionIds.of(scope[0]).packed
        if chunk_ids is not None:
            condition, bind["cids"] = "c.id = ANY(CAST(:cids AS bigint[]))", list(chunk_ids)
    else:
        source, condition = "chunks c JOIN documents d ON d.id = c.document_id", where
    rows = conn.execute(
        sa.text(
            f"WITH nearest AS MATERIALIZED ("
            f"SELECT c.id, {cast} <=> CAST(:q AS {kind}({dim})) AS distance "
            f"FROM {source} WHERE c.embedding_model = {_literal(model)} AND {condition} "
            f"ORDER BY {cast} <=> CAST(:q AS {kind}({dim})) LIMIT :lim"
            f") SELECT id, distance FROM nearest ORDER BY distance"
        ),
        bind,
    ).all()
    return [(int(r[0]), float(r[1])) for r in rows]


def _set_breadth(conn: sa.Connection, plan: DensePlan) -> None:
    """Set the plan's search breadth and scan budget for the transaction, where they differ from what
    connections start with (:data:`SESSION_SETTINGS`): only a search that needs others pays a statement."""
    changes = []
    if plan.ef_search != SESSION_EF_SEARCH:
        changes.append(f"SET LOCAL hnsw.ef_search = {plan.ef_search}")
    if plan.scan_budget != SESSION_SCAN_BUDGET:
        changes.append(f"SET LOCAL hnsw.max_scan_tuples = {plan.scan_budget}")
    if changes:
        conn.execute(sa.text("; ".join(changes)))


def _post_filtered(
    conn: sa.Connection,
    plan: DensePlan,
    model: str,
    cast: str,
    kind: str,
    dim: int,
    bind: dict[str, Any],
    doc_ids: Sequence[uuid.UUID],
    limit: int,
) -> list[tuple[int, float]] | None:
    """The ``limit`` nearest of the ``plan.fetch`` nearest chunks of the model (active or not) whose
    version is one of ``doc_ids``; None when fewer are among them and the index holds more.

    At a million chunks, with half of them in the filter, this took 3.7 ms where the filtered walk took
    19 ms (most of it the documents scan its hashed subplan needs) and found more of the exact nearest
    (recall@100 0.89 against 0.83): see docs/performance.md.
    """
    _set_breadth(conn, plan)
    # The model as a literal, as in dense_search: only then does the planner know its partial index applies.
    rows = conn.execute(
        sa.text(
            f"WITH nearest AS MATERIALIZED ("
            f"SELECT c.id, c.document_id, {cast} <=> CAST(:q AS {kind}({dim})) AS distance "
            f"FROM chunks c WHERE c.embedding_model = {_literal(model)} "
            f"ORDER BY {cast} <=> CAST(:q AS {kind}({dim})) LIMIT :fetch"
            f") SELECT id, uuid_send(document_id), distance FROM nearest ORDER BY distance"
        ),
        {**bind, "fetch": plan.fetch},
    ).all()
    found = VersionIds(b"".join(bytes(r[1]) for r in rows))
    in_scope = VersionIds.of(doc_ids).lookup().known(found)
    kept = [(int(r[0]), float(r[2])) for r, keep in zip(rows, in_scope, strict=True) if keep]
    if len(kept) < limit and len(rows) == plan.fetch:
        return None
    return kept[:limit]


class PgVectorIndex:
    """The default :class:`~citeline.store.index.VectorIndex`: vectors in the chunk rows themselves.

    The catalog's COPY writes each vector with its chunk and cascades delete them with their version,
    so adding and removing need nothing more, and a crash cannot part a vector from its chunk.
    """

    name: ClassVar[str] = "pgvector"
    in_rows: ClassVar[bool] = True

    def __init__(
        self,
        *,
        ef_search: int,
        exact_below: int,
        tuple_cost: float = 0.0,
        post_filter_max: int = 0,
        build_memory_mb: int | None = None,
        memory_mb: int = 0,
    ) -> None:
        self.ef_search = ef_search
        self.memory_mb = memory_mb
        self._memory: dict[str, MemoryVectors] = {}
        self._memory_lock = threading.Lock()
        self.exact_below = exact_below
        self.tuple_cost = tuple_cost
        self.post_filter_max = post_filter_max
        self.build_memory_mb = build_memory_mb

    def prepare(self, conn: sa.Connection, model: str, dimension: int) -> None:
        ensure_index(conn, model, dimension, build_memory_mb=self.build_memory_mb)

    def add(self, conn: sa.Connection, model: str, batch: Sequence[VersionVectors]) -> None:
        """Nothing to do: :func:`~citeline.store.catalog.insert_chunks` wrote the vectors in the rows."""

    def remove(self, conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> None:
        """Nothing to do: deleting a version's row deletes its chunks, and their vectors with them."""

    def relabelled(self, conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> None:
        """Nothing to do: searches read the labels from the catalog."""

    def search(
        self, conn: sa.Connection, query: VectorQuery, *, ran: list[str] | None = None
    ) -> list[tuple[int, float]]:
        if self.memory_mb:
            found = self.memory(query.model).search(
                conn, query.vector, limit=query.limit, scope=query.scope, log=query.log, labels=query.labels
            )
            if found is not None:
                if ran is not None:
                    ran.append("memory")
                return found
        where, params = query.filters.sql()
        scope = query.scope
        return dense_search(
            conn,
            query.vector,
            model=query.model,
            where=where,
            params=params,
            limit=query.limit,
            ef_search=self.ef_search,
            exact_below=self.exact_below,
            tuple_cost=self.tuple_cost,
            post_filter_max=self.post_filter_max,
            scope=(scope.document_ids, scope.chunks, scope.corpus_chunks) if scope else None,
            chunk_ids=scope.chunk_ids if scope else None,
            ran=ran,
        )

    def warm_up(self, conn: sa.Connection, model: str, dimension: int) -> None:
        """Load the vectors of ``model`` into this process, if they fit ``memory_mb``."""
        if self.memory_mb:
            self.memory(model).load(conn, dimension)

    def held(self, query: VectorQuery, chunk_ids: Sequence[int]) -> HeldChunks | None:
        """From the vectors this process holds for ``query.model``, if they are in step with the query."""
        if not self.memory_mb:
            return None
        return self.memory(query.model).held(query.vector, chunk_ids, query.log, labels=query.labels)

    def memory(self, model: str) -> MemoryVectors:
        """The vectors of ``model`` this process holds (loaded by its first search, if they fit)."""
        with self._memory_lock:
            if model not in self._memory:
                self._memory[model] = MemoryVectors(model, self.memory_mb << 20)
            return self._memory[model]

    def vectors(self, conn: sa.Connection, chunk_ids: Sequence[int]) -> dict[int, NDArray[np.float32]]:
        if not chunk_ids:
            return {}
        rows = conn.execute(
            sa.text("SELECT id, embedding FROM chunks WHERE id = ANY(:ids) AND embedding IS NOT NULL"),
            {"ids": list(chunk_ids)},
        )
        return {int(r[0]): as_array(r[1]) for r in rows}

    def repair(self, conn: sa.Connection, model: str, embed: EmbedFn) -> Repair:
        """Nothing to repair: a vector lives and dies with its chunk row."""
        return Repair()

    def problem(self) -> str | None:
        """None: the vectors are in the database, whose own check says whether it answers."""
        return None

    def close(self) -> None:
        """Nothing to close: the catalog's engine is the caller's."""
