"""BM25 over the postings table, scored in SQL so it is always consistent with the catalog.

Scores follow Lucene's BM25: ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` and
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``, with N, avgdl and df taken over active
chunks, whatever the filters (filters choose which chunks are returned, not how terms weigh).

The same BM25 is also computed over whole documents (``document_terms``), with N, avgdl and df taken
over the active versions: how well a document as a whole matches the query, which an 800-character
window with window-level statistics judges poorly. Search lets that score reach the document's chunks.
"""

from __future__ import annotations

import mmap
import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.recent import Recent
from citeline.store import catalog
from citeline.store.analyzer import squash
from citeline.store.catalog import LogView
from citeline.store.index import VersionIds, VersionSlots
from citeline.store.keyword_files import (
    Postings,
    Snapshot,
    loading,
    open_snapshot,
    read_postings,
    write_snapshot,
)

K1 = 1.2
B = 0.75


#: The query's terms with their counts, as the table ``q(term, qtf)`` every BM25 statement starts from.
_QUERY_TERMS = "q AS (SELECT * FROM unnest(CAST(:terms AS text[]), CAST(:qtf AS int[])) AS q(term, qtf))"


#: Separators a code may be written with, tried between the first characters of a squashed one.
_SPELLING_JOINERS = ("", "-", ".", "/")
#: How many characters of a squashed code the index is searched by, each gap with or without a
#: separator (4 ** 3 = 64 ranges of the term index): enough that a common start ("737", "e11") does not
#: read every posting of that term.
_SPELLING_HEAD = 4
_LAST_CHARACTER = "\U0010ffff"


def code_spellings(conn: sa.Connection, codes: Sequence[str]) -> dict[str, list[str]]:
    """The indexed terms that are ``codes`` (squashed code terms, :meth:`Analyzer.unjoined_codes`)
    written with separators: "e11.65" for "e1165", "737-31-1860" for "737311860".

    A reader types a code as the keyboard allows ("E1165"), the document prints it as its standard
    does ("E11.65"); the two are different terms, so the keyword search found nothing. Read from the
    postings (the catalog's terms, whichever keyword index serves), by ranges of the term index, so a
    search without such a code pays nothing and one with it a statement. A code of digits alone is not
    spelled with a point: "1000.00" is a number, not "100000" written otherwise.
    """
    if not codes:
        return {}
    low: list[str] = []
    for code in codes:
        heads = [code[:1]]
        for char in code[1:_SPELLING_HEAD]:
            heads = [head + joiner + char for head in heads for joiner in _SPELLING_JOINERS]
        low.extend(heads)
    rows = conn.execute(
        sa.text(
            "SELECT DISTINCT p.term FROM unnest(CAST(:low AS text[])) AS r(low) "
            "CROSS JOIN LATERAL (SELECT DISTINCT term FROM postings "
            "WHERE term > r.low AND term < r.low || :last AND left(term, length(r.low)) = r.low) p "
            "WHERE translate(p.term, '-./''\u2019', '') = ANY(CAST(:codes AS text[])) "
            "AND NOT p.term = ANY(CAST(:codes AS text[]))"
        ),
        {"low": low, "last": _LAST_CHARACTER, "codes": list(codes)},
    ).scalars()
    found: dict[str, list[str]] = {}
    for term in sorted(rows):
        code = squash(term)
        if code.isdigit() and "." in term:
            continue
        found.setdefault(code, []).append(term)
    return found


def _bm25(h: str) -> str:
    """Lucene's BM25 summed over the matched terms of rows ``h`` (with ``df`` joined on the term)."""
    return f"""sum(
                {h}.qtf * ln(1 + (:n - df.df + 0.5) / (df.df + 0.5))
                * {h}.tf * (:k1 + 1) / ({h}.tf + :k1 * (1 - :b + :b * {h}.dl / :avgdl))
            )"""


def _bm25_params(terms: Counter[str], n: Any, total: Any, k1: float = K1, b: float = B) -> dict[str, Any]:
    """The bound values of a BM25 statement: the query's terms, N, avgdl, k1 and b."""
    return {
        "terms": list(terms.keys()),
        "qtf": list(terms.values()),
        "n": float(n),
        "avgdl": float(total) / float(n),
        "k1": k1,
        "b": b,
    }


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
    rows = conn.execute(
        sa.text(
            f"""
            WITH {_QUERY_TERMS},
            hits AS (
                SELECT p.chunk_id, p.term, p.tf, p.dl, q.qtf, d.id, d.document_id, d.is_active, d.scopes,
                       d.category, d.tags, d.content_type, d.metadata
                FROM q JOIN postings p ON p.term = q.term
                JOIN documents d ON d.id = p.document_id AND d.is_active
            ),
            df AS (SELECT term, count(*) AS df FROM hits GROUP BY term)
            SELECT d.chunk_id, {_bm25("d")} AS score
            FROM hits d JOIN df USING (term)
            WHERE {where}
            GROUP BY d.chunk_id
            ORDER BY score DESC, d.chunk_id
            LIMIT :lim
            """
        ),
        {**params, **_bm25_params(terms, n, total, k1, b), "lim": limit},
    ).all()
    return [(int(r[0]), float(r[1])) for r in rows]


def _document_search(
    conn: sa.Connection,
    terms: Counter[str],
    *,
    where: str,
    params: dict[str, Any],
    limit: int,
) -> list[tuple[uuid.UUID, float]]:
    """The ``limit`` best BM25 matches among whole active documents that satisfy ``where``, as
    ``(version id, score)``, best first."""
    n, total = conn.execute(
        sa.text("SELECT document_count, document_token_total FROM corpus_stats WHERE id = 1")
    ).one()
    if not n or not total:
        return []
    rows = conn.execute(
        sa.text(
            f"""
            WITH {_QUERY_TERMS},
            hits AS (
                SELECT t.term, t.tf, d.keyword_length AS dl, q.qtf, d.id, d.document_id, d.is_active,
                       d.scopes, d.category, d.tags, d.content_type, d.metadata
                FROM q JOIN document_terms t ON t.term = q.term
                JOIN documents d ON d.id = t.document_id AND d.is_active
            ),
            df AS (SELECT term, count(*) AS df FROM hits GROUP BY term)
            SELECT d.id, {_bm25("d")} AS score
            FROM hits d JOIN df USING (term)
            WHERE {where}
            GROUP BY d.id
            ORDER BY score DESC, d.id
            LIMIT :lim
            """
        ),
        {**params, **_bm25_params(terms, n, total), "lim": limit},
    ).all()
    return [(r[0], float(r[1])) for r in rows]


def _best_chunks(conn: sa.Connection, terms: Counter[str], versions: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    """Each version's chunk with the best chunk-level BM25 (the lowest id among equals)."""
    n, total = conn.execute(sa.text("SELECT chunk_count, token_total FROM corpus_stats WHERE id = 1")).one()
    if not n:
        return {}
    rows = conn.execute(
        sa.text(
            f"""
            WITH {_QUERY_TERMS},
            hits AS (
                SELECT p.chunk_id, p.document_id, p.term, p.tf, p.dl, q.qtf
                FROM q JOIN postings p ON p.term = q.term
                JOIN documents d ON d.id = p.document_id AND d.is_active
            ),
            df AS (SELECT term, count(*) AS df FROM hits GROUP BY term),
            scored AS (
                SELECT h.document_id, h.chunk_id, {_bm25("h")} AS score
                FROM hits h JOIN df USING (term)
                WHERE h.document_id = ANY(CAST(:versions AS uuid[]))
                GROUP BY h.document_id, h.chunk_id
            )
            SELECT DISTINCT ON (document_id) document_id, chunk_id FROM scored
            ORDER BY document_id, score DESC, chunk_id
            """
        ),
        {**_bm25_params(terms, n, total), "versions": versions},
    ).all()
    return {r[0]: int(r[1]) for r in rows}


@dataclass(frozen=True)
class DocumentMatch:
    """A document whose whole text matches the query: its version, its document-level BM25 and its
    chunk with the best chunk-level BM25 (the lowest id among equals), the one it is surely seen by."""

    version_id: uuid.UUID
    score: float
    best_chunk: int


class KeywordIndex(Protocol):
    """A BM25 keyword index over the active chunks. Every backend gives the same scores."""

    def warm_up(self, conn: sa.Connection, *, documents: bool = False) -> None:
        """Load whatever the first search would otherwise load; with ``documents``, what the first
        :meth:`search_with_documents` would."""
        ...

    def search(
        self,
        conn: sa.Connection,
        terms: Counter[str],
        *,
        where: str,
        params: dict[str, Any],
        document_ids: Sequence[uuid.UUID] | None,
        limit: int,
        chunk_ids: Sequence[int] | None = None,
        log: LogView | None = None,
    ) -> list[tuple[int, float]]:
        """The ``limit`` best chunks that satisfy ``where``, as ``(chunk_id, score)``, best first.

        ``document_ids``, for a filtered search, are the documents ``where`` keeps (already resolved
        by the caller); ``None`` means the search is not filtered. ``chunk_ids``, for a search with
        chunk-level filters, are the only chunks it may return. ``log``, when the caller has just read
        them, are the first and last positions of ``keyword_log``, which the index then need not read
        again.
        """
        ...

    def search_with_documents(
        self,
        conn: sa.Connection,
        terms: Counter[str],
        *,
        where: str,
        params: dict[str, Any],
        document_ids: Sequence[uuid.UUID] | None,
        limit: int,
        log: LogView | None = None,
    ) -> tuple[list[tuple[int, float]], list[DocumentMatch]]:
        """What :meth:`search` returns, and the ``limit`` best whole documents by document-level BM25,
        best first (ties by version id)."""
        ...

    def search_loaded(
        self,
        terms: Counter[str],
        *,
        document_ids: Sequence[uuid.UUID] | None,
        limit: int,
        log: LogView,
        chunk_ids: Sequence[int] | None = None,
        documents: bool = False,
    ) -> tuple[list[tuple[int, float]], list[DocumentMatch]] | None:
        """What :meth:`search` (with ``documents``, :meth:`search_with_documents`) returns, if the index
        already holds the catalog as of ``log`` and answers without a connection; else None, and the
        caller searches with one. A search may then run this in another thread while its connection
        serves the dense stage."""
        ...


class SqlKeywordIndex:
    """BM25 computed by PostgreSQL from the postings at query time: no warm-up, always current.

    Right for one-shot processes (a CLI search); slow on large corpora (~80 ms at 100k chunks here).
    """

    def warm_up(self, conn: sa.Connection, *, documents: bool = False) -> None:
        """Nothing to load: every search reads the postings table."""

    def search(
        self,
        conn: sa.Connection,
        terms: Counter[str],
        *,
        where: str,
        params: dict[str, Any],
        document_ids: Sequence[uuid.UUID] | None,
        limit: int,
        chunk_ids: Sequence[int] | None = None,
        log: LogView | None = None,
    ) -> list[tuple[int, float]]:
        if chunk_ids is not None:
            where = f"{where} AND d.chunk_id = ANY(CAST(:kw_chunks AS bigint[]))"
            params = {**params, "kw_chunks": list(chunk_ids)}
        return keyword_search(conn, terms, where=where, params=params, limit=limit)

    def search_with_documents(
        self,
        conn: sa.Connection,
        terms: Counter[str],
        *,
        where: str,
        params: dict[str, Any],
        document_ids: Sequence[uuid.UUID] | None,
        limit: int,
        log: LogView | None = None,
    ) -> tuple[list[tuple[int, float]], list[DocumentMatch]]:
        chunks = keyword_search(conn, terms, where=where, params=params, limit=limit)
        if not terms:
            return chunks, []
        documents = _document_search(conn, terms, where=where, params=params, limit=limit)
        if not documents:
            return chunks, []
        best = _best_chunks(conn, terms, [v for v, _ in documents])
        return chunks, [DocumentMatch(v, score, best[v]) for v, score in documents if v in best]

    def search_loaded(
        self,
        terms: Counter[str],
        *,
        document_ids: Sequence[uuid.UUID] | None,
        limit: int,
        log: LogView,
        chunk_ids: Sequence[int] | None = None,
        documents: bool = False,
    ) -> tuple[list[tuple[int, float]], list[DocumentMatch]] | None:
        """Never: every search reads the postings through a connection."""
        return None


@dataclass(frozen=True)
class _Stats:
    """BM25's corpus statistics over the live slots: which are alive, how many, and each slot's
    length normalisation ``K1 * (1 - B + B * length / avgdl)``."""

    alive: NDArray[np.bool_]
    #: Live slots; 0 when none (or none has a length): every score is then 0.
    n: int
    norm: NDArray[np.float32]
    #: No slot is dead, so postings need no liveness check.
    all_alive: bool


@dataclass
class _Segment:
    """Postings of a batch of chunks, grouped by term: ``slots[ptr[i]:ptr[i+1]]`` hold term ``terms[i]``.

    Term ids and slots are 32-bit: 8 bytes a posting (slot and tf) instead of 12; 2M chunks hold ~150M."""

    terms: NDArray[np.int32]
    ptr: NDArray[np.int64]
    slots: NDArray[np.int32]
    tfs: NDArray[np.float32]

    @property
    def nbytes(self) -> int:
        return int(self.terms.nbytes + self.ptr.nbytes + self.slots.nbytes + self.tfs.nbytes)


class MemoryKeywordIndex:
    """BM25 from arrays held in this process, kept in step with the catalog through ``keyword_log``.

    The first search loads the postings of every active chunk; the first search that asks for document
    matches (``weight_document`` > 0) loads the terms of every active document, and from then on those
    of each new version. Each later search first replays the log entries committed since (versions made
    visible or retired), so results always match the SQL backend. The log keeps its last
    ``catalog.KEYWORD_LOG_KEEP`` entries; an index that fell further behind loads everything again.
    Chunks and documents are slots in flat arrays; retired ones are masked out and the postings
    rebuilt when most chunk slots are dead. Safe to share between threads.
    """

    MAX_SEGMENTS = 8
    #: Postings from which a loaded index is written as a snapshot for other processes to map (below
    #: this, loading from the catalog takes well under a second and the memory is small).
    SNAPSHOT_MIN_POSTINGS = 1_000_000
    #: The arrays of a snapshot that are mapped read-only (shared by every process that maps them);
    #: the others are small and written in place, so each process reads its own copy.
    _SHARED = ("terms", "ptr", "slots", "tfs", "chunk_ids", "dl", "doc_slot")

    def __init__(self, snapshots: Path | None = None, *, snapshot_min_postings: int | None = None) -> None:
        """``snapshots``: the folder where this store's snapshots are shared between processes (see
        :mod:`citeline.store.keyword_files`); None keeps the index private to this process."""
        self._lock = threading.Lock()
        self.snapshots = snapshots
        self._snapshot_min = (
            self.SNAPSHOT_MIN_POSTINGS if snapshot_min_postings is None else snapshot_min_postings
        )
        #: Where the index came from on its last full load: "catalog" or the snapshot folder.
        self.source = ""
        #: Whether document terms are wanted: loaded on the first search_with_documents, then kept.
        self._document_terms = False
        self._generation = 0
        self._masks: Recent[VersionIds, tuple[NDArray[np.bool_] | None, NDArray[np.bool_]]] = Recent(
            self.SCOPE_MASKS
        )
        self._masks_generation = -1
        #: The namespace's epoch when the arrays were last loaded whole (see catalog.LogStep).
        self._epoch: uuid.UUID | None = None
        self._reset()

    def _reset(self) -> None:
        self._loaded = False
        self._seq = 0
        self._vocab: dict[str, int] = {}
        self._chunk_ids = np.empty(0, dtype=np.int64)
        self._dl = np.empty(0, dtype=np.float32)
        self._doc_slot = np.empty(0, dtype=np.int64)
        self._alive = np.empty(0, dtype=bool)
        self._docs: dict[uuid.UUID, int] = {}
        #: The live versions' ids, sorted, with their slots (see :meth:`_in_filter`); None when stale.
        self._doc_keys: VersionSlots | None = None
        #: Bumped by every change to which slots are alive or how long they are: the cached corpus
        #: statistics (:meth:`_stats`) are of one generation.
        self._generation += 1
        self._stats_cache: dict[str, tuple[int, _Stats]] = {}
        #: Per document slot (slot 0 unused): its version id, length in terms and whether it counts.
        self._versions: list[uuid.UUID | None] = [None]
        self._doc_len = np.zeros(1, dtype=np.float32)
        self._doc_alive = np.zeros(1, dtype=bool)
        self._doc_chunks: dict[int, NDArray[np.int64]] = {}
        self._segments: list[_Segment] = []
        self._doc_segments: list[_Segment] = []

    def warm_up(self, conn: sa.Connection, *, documents: bool = False) -> None:
        """Load the postings of every active chunk (or catch up with the log) now; with ``documents``,
        the terms of every active document too."""
        with self._lock:
            self._sync(conn)
            if documents:
                self._want_documents(conn)

    def memory(self) -> dict[str, int]:
        """Bytes held in arrays: chunk postings and per-chunk columns, and document terms; of those, the
        bytes mapped from a snapshot (``shared``: in the page cache, once for every process that maps
        them); and the number of distinct terms (each also costs a Python string and a dictionary entry,
        ~100 bytes)."""
        with self._lock:
            arrays: list[NDArray[Any]] = [self._chunk_ids, self._dl, self._doc_slot, self._alive]
            for seg in self._segments:
                arrays += [seg.terms, seg.ptr, seg.slots, seg.tfs]
            return {
                "chunk_postings": sum(int(a.nbytes) for a in arrays),
                "document_terms": sum(seg.nbytes for seg in self._doc_segments),
                "shared": sum(int(a.nbytes) for a in arrays if isinstance(a, np.memmap)),
                "terms": len(self._vocab),
            }

    def search(
        self,
        conn: sa.Connection,
        terms: Counter[str],
        *,
        where: str,
        params: dict[str, Any],
        document_ids: Sequence[uuid.UUID] | None,
        limit: int,
        chunk_ids: Sequence[int] | None = None,
        log: LogView | None = None,
    ) -> list[tuple[int, float]]:
        with self._lock:
            if self._sync(conn, log):
                return self._chunks(terms, document_ids, limit, chunk_ids)
        # The search's snapshot is older than the arrays: PostgreSQL scores it over that snapshot (the
        # same scores), and the arrays stay where they are.
        return SqlKeywordIndex().search(
            conn,
            terms,
            where=where,
            params=params,
            document_ids=document_ids,
            limit=limit,
            chunk_ids=chunk_ids,
        )

    def search_with_documents(
        self,
        conn: sa.Connection,
        terms: Counter[str],
        *,
        where: str,
        params: dict[str, Any],
        document_ids: Sequence[uuid.UUID] | None,
        limit: int,
        log: LogView | None = None,
    ) -> tuple[list[tuple[int, float]], list[DocumentMatch]]:
        with self._lock:
            if self._sync(conn, log):
                self._want_documents(conn)
                return self._chunks_and_documents(terms, document_ids, limit)
        return SqlKeywordIndex().search_with_documents(
            conn, terms, where=where, params=params, document_ids=document_ids, limit=limit
        )

    def search_loaded(
        self,
        terms: Counter[str],
        *,
        document_ids: Sequence[uuid.UUID] | None,
        limit: int,
        log: LogView,
        chunk_ids: Sequence[int] | None = None,
        documents: bool = False,
    ) -> tuple[list[tuple[int, float]], list[DocumentMatch]] | None:
        with self._lock:
            # At another position (older or newer) a search would sync, which reads the catalog.
            if (
                not self._loaded
                or not log.is_at(self._seq, self._epoch)
                or (documents and not self._document_terms)
            ):
                return None
            if documents:
                return self._chunks_and_documents(terms, document_ids, limit)
            return self._chunks(terms, document_ids, limit, chunk_ids), []

    def _chunks(
        self,
        terms: Counter[str],
        document_ids: Sequence[uuid.UUID] | None,
        limit: int,
        chunk_ids: Sequence[int] | None,
    ) -> list[tuple[int, float]]:
        """:meth:`search` once synced; the caller holds the lock."""
        allowed = self._scope_masks(document_ids)[1]
        if chunk_ids is not None:
            allowed = allowed & np.isin(self._chunk_ids, np.asarray(chunk_ids, dtype=np.int64))
        scores = self._bm25(terms, self._segments, self._stats("chunks"))
        return self._top_chunks(scores, allowed, limit)

    def _chunks_and_documents(
        self, terms: Counter[str], document_ids: Sequence[uuid.UUID] | None, limit: int
    ) -> tuple[list[tuple[int, float]], list[DocumentMatch]]:
        """:meth:`search_with_documents` once synced, document terms loaded; the caller holds the lock."""
        in_filter, allowed = self._scope_masks(document_ids)
        scores = self._bm25(terms, self._segments, self._stats("chunks"))
        chunks = self._top_chunks(scores, allowed, limit)
        by_doc = self._bm25(terms, self._doc_segments, self._stats("documents"))
        docs_allowed = self._doc_alive if in_filter is None else self._doc_alive & in_filter
        found = np.flatnonzero((by_doc > 0) & docs_allowed)
        if found.size > limit:
            # Every document scoring at least the limit-th best, so ties at the cut are all kept.
            cut = -np.partition(-by_doc[found], limit - 1)[limit - 1]
            found = found[by_doc[found] >= cut]
        top = sorted(found.tolist(), key=lambda d: (-by_doc[d], self._versions[d]))[:limit]
        if not top:
            return chunks, []
        chosen = np.zeros(self._doc_len.size, dtype=bool)
        chosen[top] = True
        # Each chosen document's best chunk: order its matching chunks by score, then id.
        slots = np.flatnonzero((scores > 0) & chosen[self._doc_slot])
        slots = slots[np.lexsort((self._chunk_ids[slots], -scores[slots], self._doc_slot[slots]))]
        docs, first = np.unique(self._doc_slot[slots], return_index=True)
        best = dict(zip(docs.tolist(), self._chunk_ids[slots[first]].tolist(), strict=True))
        return chunks, [
            DocumentMatch(version, float(by_doc[d]), int(best[d]))
            for d in top
            if d in best and (version := self._versions[d]) is not None
        ]

    def _want_documents(self, conn: sa.Connection) -> None:
        """Load the terms of every active document, once: from then on each new version's come with it."""
        if self._document_terms:
            return
        self._document_terms = True
        live = list(self._docs)
        for start in range(0, len(live), 200):
            self._load_document_terms(conn, live[start : start + 200])

    #: Scopes whose masks are kept (see :meth:`_scope_masks`): a million chunks' mask is 1 MB.
    SCOPE_MASKS = 8

    def _scope_masks(
        self, document_ids: Sequence[uuid.UUID] | None
    ) -> tuple[NDArray[np.bool_] | None, NDArray[np.bool_]]:
        """The document slots a search filtered to ``document_ids`` keeps (None: unfiltered) and the chunk
        slots it may return. Kept for the scopes last used while the index is unchanged: a process reuses
        a filter's scope object while the catalog stays put (retrieve/search.py), and matching half of a
        million chunks' 50,000 versions took 2.6 ms a search."""
        if not isinstance(document_ids, VersionIds):
            in_filter = self._in_filter(document_ids)
            return in_filter, self._allowed(in_filter)
        if self._masks_generation != self._generation:
            self._masks.clear()
            self._masks_generation = self._generation
        masks = self._masks.get(document_ids)
        if masks is None:
            in_filter = self._in_filter(document_ids)
            masks = (in_filter, self._allowed(in_filter))
            self._masks.put(document_ids, masks)
        return masks

    def _in_filter(self, document_ids: Sequence[uuid.UUID] | None) -> NDArray[np.bool_] | None:
        """Per document slot: whether a search filtered to ``document_ids`` keeps it; None, unfiltered."""
        if document_ids is None:
            return None
        ids = VersionIds.of(document_ids)
        mask = np.zeros(self._doc_len.size, dtype=bool)
        if self._doc_keys is None:
            # Rebuilt after the documents change.
            self._doc_keys = VersionSlots.of(
                VersionIds.of(self._docs), np.fromiter(self._docs.values(), np.int64, len(self._docs))
            )
        mask[self._doc_keys.slots_of(ids)] = True
        return mask

    def _allowed(self, in_filter: NDArray[np.bool_] | None) -> NDArray[np.bool_]:
        """The chunk slots a search may return."""
        return self._alive if in_filter is None else self._alive & in_filter[self._doc_slot]

    def _top_chunks(
        self, scores: NDArray[np.float32], allowed: NDArray[np.bool_], limit: int
    ) -> list[tuple[int, float]]:
        return top_chunks(scores, allowed, self._chunk_ids, limit)

    def _stats(self, which: str) -> _Stats:
        """The corpus statistics of ``which`` ("chunks" or "documents") for BM25, computed once per
        generation of the index rather than on every search (at a million chunks they were a third of
        a search's keyword time)."""
        cached = self._stats_cache.get(which)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        alive, lengths = (self._alive, self._dl) if which == "chunks" else (self._doc_alive, self._doc_len)
        n = int(alive.sum())
        total = float(lengths[alive].sum(dtype=np.float64))  # exact, whatever the slot order
        norm = K1 * (1 - B + B * lengths / (total / n)) if n and total else np.zeros_like(lengths)
        stats = _Stats(alive, n if total else 0, norm, bool(alive.all()))
        self._stats_cache[which] = (self._generation, stats)
        return stats

    def _bm25(self, terms: Counter[str], segments: list[_Segment], stats: _Stats) -> NDArray[np.float32]:
        """BM25 of every slot (chunks or documents) whose postings are ``segments``; N, avgdl and df
        are taken over the slots ``stats`` counts alive.

        Computed and summed in float32, in place: at two million chunks a query's terms have about a
        million postings, and float64 temporaries and 64-bit copies of the slots made this 2.4x slower
        (docs/performance.md, "Two million chunks"). The scores agree with the SQL backend's (float8)
        to about 1e-6 relative."""
        scores = np.zeros(stats.alive.size, dtype=np.float32)
        if not stats.n or not terms:
            return scores
        alive, n, norm = stats.alive, stats.n, stats.norm
        for term, qtf in terms.items():
            tid = self._vocab.get(term)
            if tid is None:
                continue
            lists = [self._postings(seg, tid) for seg in segments]
            if len(lists) == 1:
                slots, tfs = lists[0]
            else:
                slots = np.concatenate([s for s, _ in lists]) if lists else np.empty(0, dtype=np.int32)
                tfs = np.concatenate([t for _, t in lists]) if lists else np.empty(0, dtype=np.float32)
            if not stats.all_alive:
                live = np.take(alive, slots)
                slots, tfs = slots[live], tfs[live]
            if slots.size == 0:
                continue
            df = slots.size
            idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
            # qtf * idf * tf * (k1 + 1) / (tf + norm), in one temporary. take and add.at read the 32-bit
            # slots as they are; indexing with them (norm[slots], scores[slots] += ...) converts them to
            # 64 bits first, which took 2 ms of the 2.6 for a common term's 441,000 postings at 2M chunks.
            part = np.take(norm, slots)
            part += tfs
            np.divide(tfs, part, out=part)
            part *= np.float32(qtf * idf * (K1 + 1))
            np.add.at(scores, slots, part)
        return scores

    @staticmethod
    def _postings(seg: _Segment, tid: int) -> tuple[NDArray[np.int32], NDArray[np.float32]]:
        i = int(np.searchsorted(seg.terms, tid))
        if i == seg.terms.size or seg.terms[i] != tid:
            return np.empty(0, dtype=np.int32), np.empty(0, dtype=np.float32)
        lo, hi = seg.ptr[i], seg.ptr[i + 1]
        return seg.slots[lo:hi], seg.tfs[lo:hi]

    def _sync(self, conn: sa.Connection, log: LogView | None = None) -> bool:
        """Replay the log since the last sync (up to ``log``'s last position when given); on first use,
        map a snapshot and replay from its position, or load everything active from the catalog. False,
        changing nothing, when the search's snapshot is older than the arrays (catalog.LogStep)."""
        step = catalog.log_step(conn, log, loaded=self._loaded, seq=self._seq, epoch=self._epoch)
        if step.action in ("current", "behind"):
            return step.action == "current"
        first, last = step.view.first, step.view.last
        self._generation += 1
        if step.action == "reload":
            self._epoch = step.view.epoch
            # One process on the machine loads from the catalog at a time: the others wait, then map
            # what it wrote instead of each reading every posting at once.
            with loading(self.snapshots):
                self._reset()
                if not (
                    self._open_snapshot(conn, first, last)
                    and self._replay(conn, last)
                    and self._consistent(conn)
                ):
                    self._reset()
                    self._load_all(conn)
                    self._seq = int(last)
                    self._loaded = True
                    self.source = "catalog"
                    self._save_snapshot(conn)
                    return True
        else:
            self._replay(conn, last)
        if len(self._segments) > self.MAX_SEGMENTS or (self._alive.size and self._alive.mean() < 0.5):
            self._compact(conn)
        return True

    def _replay(self, conn: sa.Connection, last: int) -> bool:
        """Apply the log's entries after this index's position up to ``last``."""
        net = catalog.log_changes(conn, self._seq, last)
        for doc_id in net:
            slot = self._docs.pop(doc_id, None)
            self._doc_keys = None
            if slot is not None:
                self._alive[self._doc_chunks.pop(slot, np.empty(0, dtype=np.int64))] = False
                self._doc_alive[slot] = False
        fresh = [d for d, added in net.items() if added]
        # In batches of documents, so a large replay never holds all its postings as raw records.
        for start in range(0, len(fresh), 2000):
            self._load(conn, fresh[start : start + 2000])
        self._seq = int(last)
        self._loaded = True
        return True

    def _load_all(self, conn: sa.Connection) -> None:
        """Load every active version's postings in one bulk read (and their document terms if wanted)."""
        rows = conn.execute(
            sa.text("SELECT id, keyword_length FROM documents WHERE is_active ORDER BY id")
        ).all()
        slots = self._add_versions([(r[0], r[1]) for r in rows])
        versions = [r[0] for r in rows]
        self._add_chunks(read_postings(conn, versions, slots, self._vocab, everything=True))
        if self._document_terms:
            for start in range(0, len(versions), 200):
                self._load_document_terms(conn, versions[start : start + 200])

    def _load(self, conn: sa.Connection, doc_ids: list[uuid.UUID]) -> None:
        # Versions still active now: one retired since the log entry was read is left out (its
        # retirement is a later entry, replayed by a later sync).
        lengths = conn.execute(
            sa.text("SELECT id, keyword_length FROM documents WHERE id = ANY(:ids) AND is_active"),
            {"ids": doc_ids},
        ).all()
        if not lengths:
            return
        slots = self._add_versions([(r[0], r[1]) for r in lengths])
        versions = [version for version, _ in lengths]
        self._add_chunks(read_postings(conn, versions, slots, self._vocab))
        if self._document_terms:
            self._load_document_terms(conn, versions)

    def _add_versions(self, lengths: list[tuple[uuid.UUID, int | None]]) -> list[int]:
        """Give each version a document slot; returns the slots."""
        slots = list(range(len(self._versions), len(self._versions) + len(lengths)))
        for (version, _), slot in zip(lengths, slots, strict=True):
            self._docs[version] = slot
            self._versions.append(version)
        self._doc_keys = None
        self._doc_len = np.concatenate(
            [self._doc_len, np.asarray([length or 0 for _, length in lengths], dtype=np.float32)]
        )
        # A version swapped in by a citeline older than document terms has no length: it is not counted.
        self._doc_alive = np.concatenate(
            [self._doc_alive, np.asarray([length is not None for _, length in lengths], dtype=bool)]
        )
        return slots

    def _add_chunks(self, postings: Postings) -> None:
        n = postings.chunk_ids.size
        if not n:
            return
        base = self._chunk_ids.size
        self._chunk_ids = np.concatenate([self._chunk_ids, postings.chunk_ids])
        self._dl = np.concatenate([self._dl, postings.dl])
        self._doc_slot = np.concatenate([self._doc_slot, postings.doc_slot])
        self._alive = np.concatenate([self._alive, np.ones(n, dtype=bool)])
        self._group_chunks(base)
        slots = (postings.chunk_of + base).astype(np.int32)
        self._segments.append(_build_segment(postings.term_ids, slots, postings.tfs))

    def _group_chunks(self, base: int) -> None:
        """Record which chunk slots from ``base`` on each live document holds."""
        docs = np.asarray(self._doc_slot[base:])
        if not docs.size:
            return
        order = np.argsort(docs, kind="stable")
        bounds = np.flatnonzero(np.diff(docs[order])) + 1
        live = self._alive[base:][order]
        documents = set(self._docs.values())
        for group, alive in zip(np.split(order + base, bounds), np.split(live, bounds), strict=True):
            slot = int(self._doc_slot[group[0]])
            if slot in documents:
                self._doc_chunks[slot] = group[alive]

    def _load_document_terms(self, conn: sa.Connection, doc_ids: list[uuid.UUID]) -> None:
        rows = conn.execute(
            sa.text("SELECT document_id, term, tf FROM document_terms WHERE document_id = ANY(:ids)"),
            {"ids": doc_ids},
        ).all()
        if not rows:
            return
        vocab, docs = self._vocab, self._docs
        term_ids = np.fromiter(
            (vocab.setdefault(r[1], len(vocab)) for r in rows), dtype=np.int32, count=len(rows)
        )
        slots = np.fromiter((docs[r[0]] for r in rows), dtype=np.int32, count=len(rows))
        tfs = np.fromiter((r[2] for r in rows), dtype=np.float32, count=len(rows))
        self._doc_segments.append(_build_segment(term_ids, slots, tfs))

    def _compact(self, conn: sa.Connection) -> None:
        """Merge segments into one and drop dead slots' postings, for chunks and documents alike; and
        share the result as a new snapshot rather than keep a private copy of it."""
        self._segments = _merged(self._segments, self._alive)
        self._doc_segments = _merged(self._doc_segments, self._doc_alive)
        self._save_snapshot(conn)

    def _postings_count(self) -> int:
        return sum(int(seg.slots.size) for seg in self._segments)

    def _save_snapshot(self, conn: sa.Connection) -> None:
        """Write this index as a snapshot and map it in place of the private arrays, when it is large
        enough to be worth sharing."""
        if self.snapshots is None or self._postings_count() < max(self._snapshot_min, 1):
            return
        if len(self._segments) > 1:
            self._segments = _merged(self._segments, self._alive)
        seg = self._segments[0]
        live = np.zeros(len(self._versions), dtype=bool)
        live[list(self._docs.values())] = True
        arrays: dict[str, NDArray[Any]] = {
            "terms": seg.terms,
            "ptr": seg.ptr,
            "slots": seg.slots,
            "tfs": seg.tfs,
            "chunk_ids": self._chunk_ids,
            "dl": self._dl,
            "doc_slot": self._doc_slot,
            "alive": self._alive,
            "doc_len": self._doc_len,
            "doc_alive": self._doc_alive,
            "doc_live": live,
            "versions": np.frombuffer(
                b"".join(v.bytes if v else bytes(16) for v in self._versions), dtype=np.uint8
            ).reshape(-1, 16),
        }
        seq_document = conn.execute(
            sa.text("SELECT document_id FROM keyword_log WHERE seq = :s"), {"s": self._seq}
        ).scalar()
        vocab = sorted(self._vocab, key=self._vocab.__getitem__)
        path = write_snapshot(self.snapshots, self._seq, seq_document, vocab, arrays)
        if path is None:
            return
        snapshot = open_snapshot(self.snapshots, self._seq, self._seq, self._SHARED, only=path)
        if snapshot is not None:
            self._adopt(snapshot)

    def _open_snapshot(self, conn: sa.Connection, first: int, last: int) -> bool:
        """Map the newest snapshot the log can be replayed from; False if there is none, or the one
        found belongs to another store's log."""
        if self.snapshots is None:
            return False
        snapshot = open_snapshot(self.snapshots, first, last, self._SHARED)
        if snapshot is None:
            return False
        if snapshot.seq >= first:
            named = conn.execute(
                sa.text("SELECT document_id FROM keyword_log WHERE seq = :s"), {"s": snapshot.seq}
            ).scalar()
            if named != snapshot.seq_document:
                return False
        self._adopt(snapshot)
        self.source = str(snapshot.path)
        if self._document_terms:
            live = list(self._docs)
            for start in range(0, len(live), 200):
                self._load_document_terms(conn, live[start : start + 200])
        return True

    def _adopt(self, snapshot: Snapshot) -> None:
        """Take a snapshot's state: its large arrays mapped, its small ones as private copies."""
        a = snapshot.arrays
        self._vocab = {term: i for i, term in enumerate(snapshot.vocab)}
        self._segments = [_Segment(a["terms"], a["ptr"], a["slots"], a["tfs"])] if a["terms"].size else []
        self._chunk_ids, self._dl, self._doc_slot = a["chunk_ids"], a["dl"], a["doc_slot"]
        for name in self._SHARED:
            _touch(a[name])
        self._alive = np.array(a["alive"], dtype=bool)
        self._doc_len = np.array(a["doc_len"], dtype=np.float32)
        self._doc_alive = np.array(a["doc_alive"], dtype=bool)
        self._versions = [None] + [uuid.UUID(bytes=bytes(row)) for row in a["versions"][1:]]
        self._docs = {self._versions[i]: i for i in np.flatnonzero(a["doc_live"]).tolist()}  # type: ignore[misc]
        self._doc_keys = None
        self._doc_chunks = {}
        self._group_chunks(0)
        self._seq = snapshot.seq
        self._loaded = True

    def _consistent(self, conn: sa.Connection) -> bool:
        """Whether the index (after replaying the log from a snapshot) holds exactly the active
        versions: a last check that the snapshot belongs to this store."""
        active = conn.execute(sa.text("SELECT count(*) FROM documents WHERE is_active")).scalar_one()
        return int(active) == len(self._docs)


def top_chunks(
    scores: NDArray[np.floating[Any]],
    allowed: NDArray[np.bool_],
    chunk_ids: NDArray[np.int64],
    limit: int,
) -> list[tuple[int, float]]:
    """The ``limit`` best allowed slots that score above 0, as ``(chunk id, score)``, ordered as the SQL
    backend orders them: best first, ties by chunk id (at the cut too)."""
    candidates = np.flatnonzero((scores > 0) & allowed)
    if candidates.size > limit:
        found = scores[candidates]
        # Partitioning every match (half the corpus, for a common word) was most of this function's
        # cost: first cut them at a score that a sample shows many reach. The cut is exact whatever the
        # sample: when at least ``limit`` matches reach it, so does the limit-th best, and all above.
        if found.size > 64 * limit:
            # An eighth of the matches, cut at its (limit / 2)-th best: about 4 x limit matches reach
            # it; fewer than ``limit`` only when the sample is far from the whole (then no cut).
            sample = found[::8]
            rank = sample.size - max(limit // 2, 1)
            keep = found >= np.partition(sample, rank)[rank]
            if np.count_nonzero(keep) >= limit:
                candidates, found = candidates[keep], found[keep]
        # Every match scoring at least the limit-th best, so ties at the cut are decided by chunk id.
        kth = np.partition(found, found.size - limit)[found.size - limit]
        candidates = candidates[found >= kth]
    # Ties at the cut can be thousands of chunks (one common word, equal lengths): sorted in numpy.
    order = candidates[np.lexsort((chunk_ids[candidates], -scores[candidates]))][:limit]
    return list(zip(chunk_ids[order].tolist(), scores[order].tolist(), strict=True))


def _touch(array: NDArray[Any]) -> None:
    """Read one byte of every page of a mapped array, so this process's first searches do not each
    stop to map the pages they read (the pages stay shared: reading never copies them)."""
    flat = array.reshape(-1).view(np.uint8)
    int(flat[:: mmap.PAGESIZE].sum())


def _merged(segments: list[_Segment], alive: NDArray[np.bool_]) -> list[_Segment]:
    if not segments:
        return []
    terms = np.concatenate([np.repeat(s.terms, np.diff(s.ptr)) for s in segments])
    slots = np.concatenate([s.slots for s in segments])
    tfs = np.concatenate([s.tfs for s in segments])
    keep = alive[slots]
    return [_build_segment(terms[keep], slots[keep], tfs[keep])]


def _build_segment(
    term_ids: NDArray[np.int32], slots: NDArray[np.int32], tfs: NDArray[np.float32]
) -> _Segment:
    order = np.argsort(term_ids, kind="stable")
    sorted_terms = term_ids[order]
    uniq, starts = np.unique(sorted_terms, return_index=True)
    ptr = np.append(starts, sorted_terms.size).astype(np.int64)
    return _Segment(uniq.astype(np.int32), ptr, slots[order].astype(np.int32), tfs[order])
