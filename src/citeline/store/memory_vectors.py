"""Exact dense search over vectors held in this process, for a store small enough to hold them.

Below a few tens of thousands of chunks, comparing the query with every vector in numpy costs less than
walking pgvector's HNSW index in PostgreSQL (at 14,246 chunks of 384 dimensions: 0.6 ms against 2.7 ms
for 100 neighbours), is exact rather than approximate, and costs the same whatever a filter keeps: a
filter keeping half the corpus needs the index walked for twice the neighbours (6.0 ms), but only a mask
here. So :class:`~citeline.store.vectors.PgVectorIndex` answers from these arrays while the model's
active chunks fit ``CITELINE_MEMORY_VECTORS_MB``, and from the HNSW index beyond: at 100,000 chunks the
index is faster for a search without filters (docs/performance.md).

The arrays follow the catalog through ``keyword_log`` exactly as the memory keyword index does
(store/keyword.py): a search syncs them to the log position its own snapshot read, so the vectors it
compares are those of the versions active in that snapshot.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline import heap
from citeline.errors import StoreError
from citeline.recent import Recent
from citeline.retrieve.labels import Labels

# The module, not its names: catalog imports store.vectors, which imports this module.
from citeline.store import catalog
from citeline.store.catalog import LogView
from citeline.store.index import HeldChunks, InScope, VersionIds, VersionSlots

#: Rows read from PostgreSQL at a time when loading (a batch of 384-dimension vectors is 6 MB).
_BATCH = 4096

#: The most vector components one search compares here (50,000 vectors of 384 dimensions: about 2.4 ms
#: single-threaded); a search that would compare more goes to the HNSW index. At 100,000 vectors, the
#: index won a search without filters (2.1 ms against 5.1 ms for the dense stage) and one keeping half the
#: corpus (3.5 against 5.2), the arrays won filters keeping a fifth or less, whose rows alone are
#: compared (3.7 against 8.6 ms at a fifth, 2.0 against 6.5 to 9.1 at a tenth; docs/performance.md).
MOST_COMPARED = 50_000 * 384


class MemoryVectors:
    """One model's vectors of every active chunk, normalised, as rows of one float32 matrix; safe to share
    between threads. Retired chunks are masked out, and the rows rebuilt when most are dead."""

    #: Scopes whose row masks are kept while the arrays are unchanged (a filter reuses its scope object).
    SCOPE_MASKS = 8

    def __init__(self, model: str, budget_bytes: int) -> None:
        self.model = model
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        #: Set while a search reads vectors from the catalog under the lock: other searches go to the
        #: index meanwhile rather than wait (a reload of 170,000 vectors takes about 13 s).
        self._loading = False
        self._masks: Recent[tuple[VersionIds, int], NDArray[np.bool_]] = Recent(self.SCOPE_MASKS)
        self._generation = 0
        self._reset(0)

    def _reset(self, dim: int) -> None:
        self._loaded = False
        self._seq = 0
        #: The log position at which the model's chunks were last found not to fit (-1: not known so).
        self._too_big_at: tuple[uuid.UUID | None, int] | None = None
        #: The namespace's epoch (``label_changes``, made anew with the namespace) the arrays were read in.
        self._epoch: uuid.UUID | None = None
        self._dim = dim
        self._matrix = np.empty((0, dim), dtype=np.float32)
        self._chunk_ids = np.empty(0, dtype=np.int64)
        self._doc_slot = np.empty(0, dtype=np.int64)
        self._alive = np.empty(0, dtype=bool)
        self._docs: dict[uuid.UUID, int] = {}
        self._doc_rows: dict[int, NDArray[np.int64]] = {}
        #: Each slot's version, its content type and its labels, by slot (retired slots keep theirs until
        #: a reload).
        self._slot_versions: list[uuid.UUID] = []
        self._slot_types: list[str | None] = []
        self._slot_labels: list[Labels] = []
        #: The count of label changes (LogView.labels) the slots' labels were read at; the keyword log
        #: records no relabel, so labels read before one are stale while the arrays are current.
        self._labels_at = -1
        #: The live rows ordered by chunk id, and those ids, for :meth:`held` (made once per generation).
        self._by_id: tuple[int, NDArray[np.int64], NDArray[np.int64]] | None = None
        self._next_slot = 0
        self._doc_keys: VersionSlots | None = None
        self._generation += 1

    def load(self, conn: sa.Connection, dim: int) -> None:
        """Bring the arrays in step with the catalog as ``conn`` sees it now (loading them on first use),
        if the model's chunks fit the budget."""
        with self._lock:
            self._sync(conn, dim, None)

    @property
    def rows(self) -> int:
        """Rows held, dead ones included (0 when nothing is loaded)."""
        return int(self._chunk_ids.size)

    def search(
        self,
        conn: sa.Connection,
        query: NDArray[np.float32],
        *,
        limit: int,
        scope: InScope | None = None,
        log: LogView | None = None,
        labels: bool = False,
    ) -> list[tuple[int, float]] | None:
        """The ``limit`` nearest active chunks of the model to ``query`` within ``scope``, as ``(chunk_id,
        cosine distance)`` nearest first (ties by chunk id); None when the model's chunks do not fit the
        budget, when the arrays are ahead of this search's snapshot, or when the search would compare more
        than :data:`MOST_COMPARED`: the caller then searches otherwise.
        ``log`` is the keyword log's first and last position as the caller's snapshot read them (read here
        when not given). With ``labels`` (the search boosts by labels), labels made stale by a relabel are
        read again, so that :meth:`held` can describe the candidates with theirs."""
        dim = int(query.shape[0])
        if self._loading:
            return None
        with self._lock:
            if not self._sync(conn, dim, log, labels=labels):
                return None
            allowed = self._allowed(scope)
            if allowed is None:
                return None
            q = _unit(query)
            count = int(np.count_nonzero(allowed))
            if not count or q is None:
                return []
            narrow = count * 4 < allowed.size
            if (count if narrow else allowed.size) * dim > MOST_COMPARED:
                # A budget raised to hold a large corpus: the index walks fewer vectors for this search.
                return None
            # einsum, not matmul: numpy's BLAS runs a product this size on every core and then keeps its
            # threads spinning, which cost the peer bench's 4 concurrent searchers 20 ms of CPU a search
            # against 13 (and took cores from the next query's embedding); einsum's loop runs on this thread.
            if narrow:
                # A narrow filter: compare its rows only.
                rows = np.flatnonzero(allowed)
                sims = np.einsum("ij,j->i", self._matrix[rows], q)
            else:
                rows = None
                sims = np.einsum("ij,j->i", self._matrix, q)
                sims[~allowed] = -np.inf
            k = min(limit, count)
            # Every row outside the filter scores -inf, and at least k are in it.
            top = np.argpartition(-sims, k - 1)[:k] if k < sims.size else np.arange(sims.size)
            ids = self._chunk_ids[top if rows is None else rows[top]]
            best = sims[top]
            order = np.lexsort((ids, -best))
            return [(int(ids[i]), float(1.0 - best[i])) for i in order]

    def held(
        self, query: NDArray[np.float32], chunk_ids: Sequence[int], log: LogView | None, labels: bool = False
    ) -> HeldChunks | None:
        """Those of ``chunk_ids`` alive here, with their versions, content types and cosine distances to
        ``query`` (with ``labels``, their versions' labels too); None unless the arrays are loaded at
        ``log`` (the search's snapshot), and their labels read at its count of label changes if asked
        for: otherwise (another search moved them on) the caller reads the catalog instead. A chunk left
        out is not active in that snapshot, or has no usable vector (nor would PostgreSQL give it a
        distance)."""
        if self._loading:
            return None
        with self._lock:
            if log is None or not self._loaded or not log.is_at(self._seq, self._epoch):
                return None
            if labels and log.labels != self._labels_at:
                return None
            q = _unit(query)
            if query.shape[0] != self._dim or q is None:
                return None
            if self._by_id is None or self._by_id[0] != self._generation:
                live = np.flatnonzero(self._alive)
                order = live[np.argsort(self._chunk_ids[live], kind="stable")]
                self._by_id = (self._generation, order, self._chunk_ids[order])
            _, order, keys = self._by_id
            wanted = np.asarray(chunk_ids, dtype=np.int64)
            at = np.searchsorted(keys, wanted)
            found = at < keys.size
            found[found] &= keys[at[found]] == wanted[found]
            rows = order[at[found]]
            sims = np.einsum("ij,j->i", self._matrix[rows], q).astype(np.float64)
            slots = self._doc_slot[rows].tolist()
            return HeldChunks(
                ids=wanted[found],
                versions=[self._slot_versions[s] for s in slots],
                content_types=[self._slot_types[s] for s in slots],
                distances=1.0 - sims,
                labels=[self._slot_labels[s] for s in slots] if labels else None,
            )

    def _allowed(self, scope: InScope | None) -> NDArray[np.bool_] | None:
        """The rows a search within ``scope`` may return; None when the scope names versions these arrays
        do not hold (an embedding-model migration searches its staged versions, not yet active), or
        chunks they hold no usable vector of."""
        if scope is None:
            return self._alive
        if scope.chunk_ids is not None:
            wanted = np.asarray(scope.chunk_ids, dtype=np.int64)
            chunks = self._alive & np.isin(self._chunk_ids, wanted)
            return chunks if np.count_nonzero(chunks) == np.unique(wanted).size else None
        ids = VersionIds.of(scope.document_ids)
        if not self._docs:  # nothing loaded: no version is known, and no row can be returned
            return None if len(ids) else np.zeros(self._alive.size, dtype=bool)
        key = (ids, self._generation)
        mask = self._masks.get(key)
        if mask is None:
            if self._doc_keys is None:
                self._doc_keys = VersionSlots.of(
                    VersionIds.of(self._docs), np.fromiter(self._docs.values(), np.int64, len(self._docs))
                )
            at, known = self._doc_keys.find(ids)
            if not known.all():
                return None
            in_scope = np.zeros(self._next_slot, dtype=bool)
            in_scope[self._doc_keys.slots[at]] = True
            mask = self._alive & in_scope[self._doc_slot]
            self._masks.put(key, mask)
        return mask

    def _sync(self, conn: sa.Connection, dim: int, log: LogView | None, *, labels: bool = False) -> bool:
        """Bring the arrays to the log's last position (and, with ``labels``, their labels to its count of
        label changes); False when the model's chunks do not fit."""
        loaded = self._loaded and dim == self._dim
        step = catalog.log_step(conn, log, loaded=loaded, seq=self._seq, epoch=self._epoch)
        if step.action in ("current", "behind"):
            # Behind: this search goes to the index (catalog.LogStep).
            if step.action == "current" and labels:
                self._relabel(conn, step.view)
            return step.action == "current"
        last, epoch = step.view.last, step.view.epoch
        if self._too_big_at == (epoch, last) and dim == self._dim:
            return False
        if step.action == "replay" and self._replay(conn, last):
            if labels:
                self._relabel(conn, step.view)
            return True
        # A reload, or a replay that overflowed the budget.
        self._reset(dim)
        if not self._fits(conn, dim):
            self._too_big_at = (epoch, last)
            return False
        self._loading = True
        try:
            self._load(conn, None)
        finally:
            self._loading = False
        self._seq, self._loaded, self._epoch = last, True, epoch
        self._labels_at = step.view.labels
        heap.trim()  # what loading freed (see citeline/heap.py)
        return True

    def _relabel(self, conn: sa.Connection, view: LogView) -> None:
        """Read every held version's labels again if documents were relabelled since they were read (one
        statement, once per relabel and process, and only for searches that boost by labels)."""
        if view.labels <= self._labels_at:
            return  # current, or this search's snapshot is older than the labels held: it reads its own
        rows = conn.execute(
            sa.text(
                "SELECT d.id, d.tags, d.category, d.scopes FROM documents d "
                "WHERE d.is_active AND d.embedding_model = :m AND d.vector_index = 'pgvector'"
            ),
            {"m": self.model},
        )
        for version, tags, category, scopes in rows:
            slot = self._docs.get(version)
            if slot is not None:
                self._slot_labels[slot] = _labels(tags, category, scopes)
        self._labels_at = view.labels

    def _load(self, conn: sa.Connection, versions: list[uuid.UUID] | None) -> None:
        """Add the model's active versions (of ``versions``; None: all of them) with their chunks' vectors.
        A version retired since the log entry that named it was read is left out: its retirement is a
        later entry. Versions without chunks are held too, so a scope naming them is known."""
        among = " AND d.vector_index = 'pgvector'" + ("" if versions is None else " AND d.id = ANY(:ids)")
        bind = {"m": self.model, "ids": versions or []}
        held = conn.execute(
            sa.text(
                "SELECT d.id, d.content_type, d.tags, d.category, d.scopes FROM documents d "
                f"WHERE d.is_active AND d.embedding_model = :m{among}"
            ),
            bind,
        ).all()
        result = conn.execution_options(stream_results=True, yield_per=_BATCH).execute(
            sa.text(
                "SELECT c.id, c.document_id, vector_send(c.embedding) FROM chunks c "
                "JOIN documents d ON d.id = c.document_id "
                f"WHERE d.is_active AND d.embedding_model = :m{among} AND c.embedding_model = :m "
                "AND c.embedding IS NOT NULL ORDER BY c.document_id, c.id"
            ),
            bind,
        )
        # In batches, each turned into arrays at once: the rows of a whole corpus as Python objects would
        # briefly take three times the matrix, in small blocks the C heap keeps once they are freed.
        chunk_ids: list[NDArray[np.int64]] = []
        owners: list[uuid.UUID] = []
        vectors: list[NDArray[np.float32]] = []
        for batch in result.partitions():
            chunk_ids.append(np.fromiter((r[0] for r in batch), np.int64, len(batch)))
            owners.extend(r[1] for r in batch)
            # vector_send writes a 4-byte header (dimensions, unused) then big-endian float4s: read as
            # floats, the header is one column, dropped.
            raw = np.frombuffer(b"".join(r[2] for r in batch), dtype=">f4")
            if raw.size != len(batch) * (self._dim + 1):
                raise StoreError(f"stored vectors of {self.model} do not all have {self._dim} dimensions")
            vectors.append(raw.reshape(len(batch), self._dim + 1)[:, 1:].astype(np.float32))
        self._append(
            [(r[0], r[1], _labels(r[2], r[3], r[4])) for r in held],
            np.concatenate(chunk_ids) if chunk_ids else np.empty(0, dtype=np.int64),
            owners,
            np.concatenate(vectors) if vectors else np.empty((0, self._dim), dtype=np.float32),
        )

    def _fits(self, conn: sa.Connection, dim: int) -> bool:
        """Whether the corpus's active chunks (every model's: an upper bound, read in one row) fit the
        budget."""
        chunks = conn.execute(sa.text("SELECT chunk_count FROM corpus_stats WHERE id = 1")).scalar() or 0
        return int(chunks) * dim * 4 <= self.budget_bytes

    def _replay(self, conn: sa.Connection, last: int) -> bool:
        """Apply the log's entries after this position up to ``last``; False if the result would not fit."""
        net = catalog.log_changes(conn, self._seq, last)
        for doc_id in net:
            slot = self._docs.pop(doc_id, None)
            if slot is not None:
                self._alive[self._doc_rows.pop(slot)] = False
        self._doc_keys = None
        self._generation += 1
        fresh = [d for d, added in net.items() if added]
        if fresh:
            if not self._fits(conn, self._dim):
                return False
            self._load(conn, fresh)
        self._seq = last
        if self._alive.size and self._alive.mean() < 0.5:
            self._compact()
        return True

    def _append(
        self,
        versions: list[tuple[uuid.UUID, str | None, Labels]],
        chunk_ids: NDArray[np.int64],
        owners: list[uuid.UUID],
        vectors: NDArray[np.float32],
    ) -> None:
        """Add ``versions`` (with their content types and labels) and their chunks: ids, each one's version
        (grouped by version) and vectors."""
        base = self._chunk_ids.size
        for version, content_type, labels in versions:
            self._docs[version] = self._next_slot
            self._doc_rows[self._next_slot] = np.empty(0, dtype=np.int64)
            self._slot_versions.append(version)
            self._slot_types.append(content_type)
            self._slot_labels.append(labels)
            self._next_slot += 1
        self._doc_keys = None
        self._generation += 1
        if not owners:
            return
        norms = np.linalg.norm(vectors, axis=1)
        usable = norms > 0  # pgvector gives no cosine distance for a zero vector
        vectors[usable] /= norms[usable, None]
        slots = np.fromiter((self._docs[v] for v in owners), np.int64, len(owners))
        # Each version's rows are one run.
        starts = np.flatnonzero(np.r_[True, slots[1:] != slots[:-1]])
        for start, end in zip(starts, [*starts[1:], len(owners)], strict=True):
            self._doc_rows[int(slots[start])] = np.arange(base + start, base + end, dtype=np.int64)
        self._matrix = np.concatenate([self._matrix, vectors]) if base else vectors
        self._chunk_ids = np.concatenate([self._chunk_ids, chunk_ids])
        self._doc_slot = np.concatenate([self._doc_slot, slots])
        self._alive = np.concatenate([self._alive, usable])

    def _compact(self) -> None:
        """Drop dead rows and renumber the live ones."""
        keep = np.flatnonzero(self._alive)
        renumber = np.full(self._alive.size, -1, dtype=np.int64)
        renumber[keep] = np.arange(keep.size)
        self._matrix = self._matrix[keep]
        self._chunk_ids = self._chunk_ids[keep]
        self._doc_slot = self._doc_slot[keep]
        self._alive = np.ones(keep.size, dtype=bool)
        # A version's rows without a usable vector were never alive: they go.
        self._doc_rows = {slot: (at := renumber[rows])[at >= 0] for slot, rows in self._doc_rows.items()}
        self._generation += 1


def _labels(tags: Sequence[str] | None, category: str | None, scopes: Sequence[str] | None) -> Labels:
    """A version's labels as its catalog row holds them."""
    return tuple(tags or ()), category or None, tuple(scopes or ())


def _unit(query: NDArray[np.float32]) -> NDArray[np.float32] | None:
    """``query`` scaled to length 1, as float32; None for a zero vector, which has no cosine distance."""
    norm = float(np.linalg.norm(query))
    return (query / norm).astype(np.float32, copy=False) if norm else None
