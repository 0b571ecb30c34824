"""BM25 over the postings table, scored in SQL so it is always consistent with the catalog.

Scores follow Lucene's BM25: ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` and
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``, with N, avgdl and df taken over active
chunks, whatever the filters (filters choose which chunks are returned, not how terms weigh).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

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


class KeywordIndex(Protocol):
    """A BM25 keyword index over the active chunks. Every backend gives the same scores."""

    def warm_up(self, conn: sa.Connection) -> None:
        """Load whatever the first search would otherwise load."""
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
        log: tuple[int, int] | None = None,
    ) -> list[tuple[int, float]]:
        """The ``limit`` best chunks that satisfy ``where``, as ``(chunk_id, score)``, best first.

        ``document_ids``, for a filtered search, are the documents ``where`` keeps (already resolved
        by the caller); ``None`` means the search is not filtered. ``chunk_ids``, for a search with
        chunk-level filters, are the only chunks it may return. ``log``, when the caller has just read
        them, are the first and last positions of ``keyword_log``, which the index then need not read
        again.
        """
        ...


class SqlKeywordIndex:
    """BM25 computed by PostgreSQL from the postings at query time: no warm-up, always current.

    Right for one-shot processes (a CLI search); slow on large corpora (~80 ms at 100k chunks here).
    """

    def warm_up(self, conn: sa.Connection) -> None:
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
        log: tuple[int, int] | None = None,
    ) -> list[tuple[int, float]]:
        if chunk_ids is not None:
            where = f"{where} AND d.chunk_id = ANY(CAST(:kw_chunks AS bigint[]))"
            params = {**params, "kw_chunks": list(chunk_ids)}
        return keyword_search(conn, terms, where=where, params=params, limit=limit)


@dataclass
class _Segment:
    """Postings of a batch of chunks, grouped by term: ``slots[ptr[i]:ptr[i+1]]`` hold term ``terms[i]``."""

    terms: NDArray[np.int64]
    ptr: NDArray[np.int64]
    slots: NDArray[np.int64]
    tfs: NDArray[np.float32]


class MemoryKeywordIndex:
    """BM25 from arrays held in this process, kept in step with the catalog through ``keyword_log``.

    The first search loads the postings of every active chunk; each later search first replays the
    log entries committed since (versions made visible or retired), so results always match the SQL
    backend. The log keeps its last ``catalog.KEYWORD_LOG_KEEP`` entries; an index that fell further
    behind loads everything again. Chunks are slots in flat arrays; retired chunks are masked out and
    the arrays rebuilt when most slots are dead. Safe to share between threads.
    """

    MAX_SEGMENTS = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
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
        self._next_doc = 1
        self._doc_chunks: dict[int, NDArray[np.int64]] = {}
        self._segments: list[_Segment] = []

    def warm_up(self, conn: sa.Connection) -> None:
        """Load the postings of every active chunk (or catch up with the log) now."""
        with self._lock:
            self._sync(conn)

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
        log: tuple[int, int] | None = None,
    ) -> list[tuple[int, float]]:
        with self._lock:
            self._sync(conn, log)
            allowed = self._alive
            if document_ids is not None:
                doc_mask = np.zeros(self._next_doc, dtype=bool)
                doc_mask[[self._docs[i] for i in document_ids if i in self._docs]] = True
                allowed = self._alive & doc_mask[self._doc_slot]
            if chunk_ids is not None:
                allowed = allowed & np.isin(self._chunk_ids, np.asarray(chunk_ids, dtype=np.int64))
            return self._score(terms, allowed, limit)

    def _score(self, terms: Counter[str], allowed: NDArray[np.bool_], limit: int) -> list[tuple[int, float]]:
        n = int(self._alive.sum())
        if n == 0 or not terms:
            return []
        avgdl = float(self._dl[self._alive].sum()) / n
        norm = K1 * (1 - B + B * self._dl / avgdl)
        scores = np.zeros(len(self._chunk_ids), dtype=np.float64)
        for term, qtf in terms.items():
            tid = self._vocab.get(term)
            if tid is None:
                continue
            lists = [self._postings(seg, tid) for seg in self._segments]
            slots = np.concatenate([s for s, _ in lists]) if lists else np.empty(0, dtype=np.int64)
            live = self._alive[slots]
            slots = slots[live]
            if slots.size == 0:
                continue
            tfs = np.concatenate([t for _, t in lists])[live].astype(np.float64)
            df = slots.size
            idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
            scores[slots] += qtf * idf * tfs * (K1 + 1) / (tfs + norm[slots])
        candidates = np.flatnonzero((scores > 0) & allowed)
        if candidates.size > limit:
            candidates = candidates[np.argpartition(-scores[candidates], limit - 1)[:limit]]
        order = sorted(candidates.tolist(), key=lambda s: (-scores[s], self._chunk_ids[s]))
        return [(int(self._chunk_ids[s]), float(scores[s])) for s in order]

    @staticmethod
    def _postings(seg: _Segment, tid: int) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        i = int(np.searchsorted(seg.terms, tid))
        if i == seg.terms.size or seg.terms[i] != tid:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        lo, hi = seg.ptr[i], seg.ptr[i + 1]
        return seg.slots[lo:hi], seg.tfs[lo:hi]

    def _sync(self, conn: sa.Connection, log: tuple[int, int] | None = None) -> None:
        """Replay the log since the last sync (up to ``log``'s last position when given); on first use,
        load everything active."""
        first, last = (
            log
            or conn.execute(
                sa.text("SELECT coalesce(min(seq), 0), coalesce(max(seq), 0) FROM keyword_log")
            ).one()
        )
        if self._loaded and last == self._seq:
            return
        # A log that restarted, or was trimmed past this index's position, cannot be replayed.
        if not self._loaded or last < self._seq or first > self._seq + 1:
            self._reset()
            entries = [
                (d, True) for d in conn.execute(sa.text("SELECT id FROM documents WHERE is_active")).scalars()
            ]
        else:
            entries = [
                (r[0], bool(r[1]))
                for r in conn.execute(
                    sa.text(
                        "SELECT document_id, added FROM keyword_log WHERE seq > :a AND seq <= :b ORDER BY seq"
                    ),
                    {"a": self._seq, "b": last},
                )
            ]
        net: dict[uuid.UUID, bool] = {}
        for doc_id, added in entries:
            net[doc_id] = added
        for doc_id in net:
            slot = self._docs.get(doc_id)
            if slot is not None:
                self._alive[self._doc_chunks.pop(slot, np.empty(0, dtype=np.int64))] = False
                del self._docs[doc_id]
        fresh = [d for d, added in net.items() if added]
        # In batches of documents, so a first load of a large corpus never holds all postings as rows.
        for start in range(0, len(fresh), 200):
            self._load(conn, fresh[start : start + 200])
        self._seq = int(last)
        self._loaded = True
        if len(self._segments) > self.MAX_SEGMENTS or (self._alive.size and self._alive.mean() < 0.5):
            self._compact()

    def _load(self, conn: sa.Connection, doc_ids: list[uuid.UUID]) -> None:
        rows = conn.execute(
            sa.text(
                "SELECT p.chunk_id, p.term, p.tf, p.dl, p.document_id FROM postings p "
                "JOIN documents d ON d.id = p.document_id AND d.is_active "
                "WHERE p.document_id = ANY(:ids) ORDER BY p.chunk_id"
            ),
            {"ids": doc_ids},
        ).all()
        if not rows:
            return
        base = self._chunk_ids.size
        chunk_ids: list[int] = []
        dls: list[float] = []
        docs: list[int] = []
        term_ids = np.empty(len(rows), dtype=np.int64)
        slots = np.empty(len(rows), dtype=np.int64)
        tfs = np.empty(len(rows), dtype=np.float32)
        vocab = self._vocab
        last_chunk = None
        for i, (chunk_id, term, tf, dl, doc_id) in enumerate(rows):
            if chunk_id != last_chunk:
                last_chunk = chunk_id
                chunk_ids.append(chunk_id)
                dls.append(dl)
                if doc_id not in self._docs:
                    self._docs[doc_id] = self._next_doc
                    self._next_doc += 1
                docs.append(self._docs[doc_id])
            term_ids[i] = vocab.setdefault(term, len(vocab))
            slots[i] = base + len(chunk_ids) - 1
            tfs[i] = tf
        new_docs = np.asarray(docs, dtype=np.int64)
        self._chunk_ids = np.concatenate([self._chunk_ids, np.asarray(chunk_ids, dtype=np.int64)])
        self._dl = np.concatenate([self._dl, np.asarray(dls, dtype=np.float32)])
        self._doc_slot = np.concatenate([self._doc_slot, new_docs])
        self._alive = np.concatenate([self._alive, np.ones(len(chunk_ids), dtype=bool)])
        new_slots = np.arange(base, base + len(chunk_ids))
        order = np.argsort(new_docs, kind="stable")
        bounds = np.flatnonzero(np.diff(new_docs[order])) + 1
        for group in np.split(new_slots[order], bounds):
            self._doc_chunks[int(self._doc_slot[group[0]])] = group
        self._segments.append(_build_segment(term_ids, slots, tfs))

    def _compact(self) -> None:
        """Merge segments into one and drop dead slots' postings."""
        terms = np.concatenate([np.repeat(s.terms, np.diff(s.ptr)) for s in self._segments])
        slots = np.concatenate([s.slots for s in self._segments])
        tfs = np.concatenate([s.tfs for s in self._segments])
        keep = self._alive[slots]
        self._segments = [_build_segment(terms[keep], slots[keep], tfs[keep])]


def _build_segment(
    term_ids: NDArray[np.int64], slots: NDArray[np.int64], tfs: NDArray[np.float32]
) -> _Segment:
    order = np.argsort(term_ids, kind="stable")
    sorted_terms = term_ids[order]
    uniq, starts = np.unique(sorted_terms, return_index=True)
    ptr = np.append(starts, sorted_terms.size).astype(np.int64)
    return _Segment(uniq.astype(np.int64), ptr, slots[order], tfs[order])
