"""The vector index: one protocol, one backend per store (``CITELINE_VECTOR_BACKEND``).

The catalog in PostgreSQL stays the source of truth for what is searchable. A backend holds vectors by
chunk id and answers "which chunks are nearest"; the catalog decides which of them count (chunks of
active versions that pass the filters). A chunk row carries its vector inline when pgvector holds it,
and none when another backend does: readers fill the missing ones from the index (:func:`fill_vectors`).

Writes follow one order, so that a crash anywhere leaves only what :meth:`VectorIndex.repair` fixes:
a version's vectors are stored after its chunk rows commit and before its swap-in; deletes and swaps
commit in the catalog first, then remove vectors. So a vector never exists before its chunk (a repair
may run while other processes ingest), a crash leaves at worst vectors without chunks (removed by
repair), and an active chunk without a vector means the index lost it (restored by repair).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, overload

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.retrieve.filters import Filters
from citeline.retrieve.labels import Labels
from citeline.settings import Settings

if TYPE_CHECKING:
    from citeline.store.catalog import LogView


@dataclass(frozen=True)
class VersionVectors:
    """The vectors of some chunks of one version, to add to the index."""

    version_id: uuid.UUID
    chunk_ids: Sequence[int]
    vectors: NDArray[np.float32]


class VersionIds(Sequence[uuid.UUID]):
    """Version ids as PostgreSQL sends them packed (``uuid_send``: 16 bytes each, concatenated).

    A filter keeping half of 100,000 documents would otherwise cost 50,000 UUID objects a search; packed,
    they are counted for free, matched in numpy (:meth:`halves`), and decoded only where a list is needed.
    """

    __slots__ = ("_lookup", "packed")

    def __init__(self, packed: bytes) -> None:
        if len(packed) % 16:
            raise ValueError(f"packed version ids must be 16 bytes each, got {len(packed)} bytes")
        self.packed = bytes(packed)
        self._lookup: VersionSlots | None = None

    @classmethod
    def of(cls, ids: Iterable[uuid.UUID]) -> VersionIds:
        """``ids`` packed; ids already packed are returned as they are (with the lookup they keep)."""
        if isinstance(ids, VersionIds):
            return ids
        return cls(b"".join(i.bytes for i in ids))

    def halves(self) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
        """Each id's first and last 8 bytes as unsigned integers, which numpy compares far faster than
        16-byte strings."""
        words = np.frombuffer(self.packed, dtype=">u8").reshape(-1, 2).astype(np.uint64)
        return words[:, 0], words[:, 1]

    def lookup(self) -> VersionSlots:
        """These ids sorted for matching others to them (slots: their positions here), built on first use
        and kept: a scope a process reuses (see retrieve/search.py) is sorted once."""
        if self._lookup is None:
            self._lookup = VersionSlots.of(self, np.arange(len(self), dtype=np.int64))
        return self._lookup

    def __len__(self) -> int:
        return len(self.packed) // 16

    @overload
    def __getitem__(self, index: int) -> uuid.UUID: ...

    @overload
    def __getitem__(self, index: slice) -> VersionIds: ...

    def __getitem__(self, index: int | slice) -> uuid.UUID | VersionIds:
        if isinstance(index, slice):
            return VersionIds.of(list(self)[index])
        i = range(len(self))[index]
        return uuid.UUID(bytes=self.packed[16 * i : 16 * i + 16])

    def __iter__(self) -> Iterator[uuid.UUID]:
        for i in range(0, len(self.packed), 16):
            yield uuid.UUID(bytes=self.packed[i : i + 16])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, VersionIds):
            return self.packed == other.packed
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.packed)

    def __repr__(self) -> str:
        return f"VersionIds({len(self)} ids)"


@dataclass(frozen=True)
class VersionSlots:
    """Version ids sorted by a 64-bit fingerprint, each with a slot (a position in some array of the
    caller's), for matching other ids to them in numpy: comparing 16-byte strings cost 5 ms for 25,000
    ids against 50,000 (a million chunks)."""

    fingerprints: NDArray[np.uint64]
    hi: NDArray[np.uint64]
    lo: NDArray[np.uint64]
    slots: NDArray[np.int64]
    #: Two known ids share a fingerprint (a 1 in 10^10 chance at 50,000 ids): match whole ids instead.
    collide: bool

    @staticmethod
    def of(ids: VersionIds, slots: NDArray[np.int64]) -> VersionSlots:
        hi, lo = ids.halves()
        fingerprints = hi ^ lo
        order = np.argsort(fingerprints)
        fingerprints = fingerprints[order]
        collide = bool(fingerprints.size > 1 and np.any(fingerprints[1:] == fingerprints[:-1]))
        return VersionSlots(fingerprints, hi[order], lo[order], slots[order], collide)

    def find(self, ids: VersionIds) -> tuple[NDArray[np.intp], NDArray[np.bool_]]:
        """For each of ``ids``: where it would be among the known ids (sorted), and whether it is there."""
        hi, lo = ids.halves()
        if not self.slots.size or not hi.size:
            return np.zeros(hi.size, dtype=np.intp), np.zeros(hi.size, dtype=bool)
        if self.collide:
            known = _whole(self.hi, self.lo)
            order = np.argsort(known)
            wanted = _whole(hi, lo)
            at = order[np.minimum(np.searchsorted(known, wanted, sorter=order), known.size - 1)]
            return at, known[at] == wanted
        at = np.minimum(np.searchsorted(self.fingerprints, hi ^ lo), self.slots.size - 1)
        return at, (self.hi[at] == hi) & (self.lo[at] == lo)

    def slots_of(self, ids: VersionIds) -> NDArray[np.int64]:
        """The slots of those of ``ids`` that are known."""
        at, found = self.find(ids)
        return np.asarray(self.slots[at[found]], dtype=np.int64)

    def known(self, ids: VersionIds) -> NDArray[np.bool_]:
        """For each of ``ids``, whether it is known."""
        return self.find(ids)[1]


def _whole(hi: NDArray[np.uint64], lo: NDArray[np.uint64]) -> NDArray[np.bytes_]:
    """Ids as 16-byte strings again (slow to compare, but never ambiguous)."""
    return np.stack([hi, lo], axis=1).astype(">u8").view("S16").ravel()


@dataclass(frozen=True)
class InScope:
    """What a filtered search may see, read once per search from the catalog: the active versions of the
    query's model that pass the filter, how many chunks they hold, and how many the whole corpus holds."""

    document_ids: Sequence[uuid.UUID]
    chunks: int
    corpus_chunks: int
    #: With chunk-level filters (model number, section type): the chunks of those documents that
    #: pass them, found through their indexes; ``chunks`` then counts these.
    chunk_ids: list[int] | None = None


@dataclass(frozen=True)
class VectorQuery:
    """One dense search. ``scope`` is what ``filters`` keep (None for an unfiltered search); each backend
    compiles the two into its own query."""

    vector: NDArray[np.float32]
    model: str
    filters: Filters
    scope: InScope | None
    limit: int
    #: The keyword log's first and last positions in the search's snapshot (retrieve/search.py reads them
    #: with the catalog): an index that follows the log syncs to them without reading them again.
    log: LogView | None = None
    #: The search boosts documents by their labels (CITELINE_LABEL_BOOST): :meth:`VectorIndex.held`
    #: describes the candidates with their labels, or not at all.
    labels: bool = False


@dataclass(frozen=True)
class HeldChunks:
    """Chunks an index could describe without the catalog (:meth:`VectorIndex.held`), aligned arrays:
    each one's version, its document's content type and its cosine distance to the query, and the
    version's labels when the query asked for them (else None)."""

    ids: NDArray[np.int64]
    versions: list[uuid.UUID]
    content_types: list[str | None]
    distances: NDArray[np.float64]
    labels: list[Labels] | None = None


@dataclass(frozen=True)
class Repair:
    """What :meth:`VectorIndex.repair` found and fixed."""

    #: Vectors whose chunk no longer exists (deleted, or never committed), removed.
    removed: int = 0
    #: Active chunks that had no vector, embedded again from their text and added.
    restored: int = 0
    #: Active chunks without a vector that could not be restored: their model is not the embedder's.
    unrestorable: int = 0


#: Embeds texts with the store's embedder (for :meth:`VectorIndex.repair`).
EmbedFn = Callable[[list[str]], NDArray[np.float32]]


class VectorIndex(Protocol):
    """Where chunk vectors live and are searched. Every method takes the catalog connection of the caller,
    whose transaction decides what is visible; a backend outside PostgreSQL ignores it for its own writes.
    """

    #: Recorded on each version it holds, so that a search never compares vectors held elsewhere.
    name: ClassVar[str]
    #: Whether the vectors live in the chunk rows, written by the catalog's own insert (pgvector).
    in_rows: ClassVar[bool]

    def prepare(self, conn: sa.Connection, model: str, dimension: int) -> None:
        """Make ready to hold vectors of ``model`` (an ANN index, a collection)."""
        ...

    def add(self, conn: sa.Connection, model: str, batch: Sequence[VersionVectors]) -> None:
        """Store the vectors of chunks already written to the catalog (still invisible versions)."""
        ...

    def remove(self, conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> None:
        """Drop every vector of these versions (a retired version, or all versions of a deleted document)."""
        ...

    def relabelled(self, conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> None:
        """These versions' labels changed in the catalog (committed): a backend that lays vectors out by
        label files them anew."""
        ...

    def search(
        self, conn: sa.Connection, query: VectorQuery, *, ran: list[str] | None = None
    ) -> list[tuple[int, float]]:
        """The ``query.limit`` nearest active chunks within the filters, nearest first:
        ``(chunk_id, cosine distance)``. ``ran``, when given, gets the plan of each search it ran, in
        order, for ``citeline search --explain`` (a plan can fall back to another)."""
        ...

    def warm_up(self, conn: sa.Connection, model: str, dimension: int) -> None:
        """Load now what the first search of ``model`` would load (``conn`` reads one snapshot)."""
        ...

    def vectors(self, conn: sa.Connection, chunk_ids: Sequence[int]) -> dict[int, NDArray[np.float32]]:
        """The vectors of these chunks (ids it does not hold are left out)."""
        ...

    def problem(self) -> str | None:
        """Why the index cannot serve now (a server of its own out of reach), or None. Cheap: readiness
        probes ask it every few seconds."""
        ...

    def held(self, query: VectorQuery, chunk_ids: Sequence[int]) -> HeldChunks | None:
        """Those of ``chunk_ids`` active in the snapshot ``query.log`` names, with their versions, content
        types and distances to ``query.vector`` (and, with ``query.labels``, their versions' labels), when
        this index holds all of that in the process, in step with that snapshot: a search's candidates
        then need no statement. None: read them from the catalog.
        """
        ...

    def repair(self, conn: sa.Connection, model: str, embed: EmbedFn) -> Repair:
        """Make the index agree with the catalog after a crash: no vector without a chunk, no active chunk
        without a vector (chunks of ``model`` are embedded again with ``embed``)."""
        ...

    def close(self) -> None:
        """Let go of clients and connections."""
        ...


def open_index(settings: Settings) -> VectorIndex:
    """The backend named by ``settings.vector_backend``, not yet connected to anything remote."""
    if settings.vector_backend == "chroma":
        from citeline.store.chroma import ChromaIndex  # chromadb is imported only by those who use it

        return ChromaIndex.from_settings(settings)
    from citeline.store.vectors import PgVectorIndex

    return PgVectorIndex(
        ef_search=settings.hnsw_ef_search,
        exact_below=settings.exact_search_below,
        tuple_cost=settings.hnsw_tuple_cost,
        post_filter_max=settings.hnsw_post_filter_max,
        build_memory_mb=settings.hnsw_build_memory_mb,
        memory_mb=settings.memory_vectors_mb,
    )


def as_array(value: Any) -> NDArray[np.float32]:
    """A vector read from PostgreSQL as a numpy array (pgvector's loader gives Vector objects in recent
    releases, arrays in older ones)."""
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)


def fill_vectors(
    conn: sa.Connection, index: VectorIndex, found: dict[int, NDArray[np.float32] | None]
) -> dict[int, NDArray[np.float32]]:
    """``found`` (vectors read from chunk rows, None where the row holds none) completed from ``index``;
    ids neither holds are left out."""
    missing = [cid for cid, vec in found.items() if vec is None]
    out = {cid: vec for cid, vec in found.items() if vec is not None}
    if missing:
        out.update(index.vectors(conn, missing))
    return out


def cosine_distances(vectors: dict[int, NDArray[np.float32]], query: NDArray[np.float32]) -> dict[int, float]:
    """Cosine distance (1 - cosine similarity, as pgvector's ``<=>``) of each vector to ``query``."""
    if not vectors:
        return {}
    ids = list(vectors)
    matrix = np.stack([vectors[i] for i in ids]).astype(np.float64)
    q = np.asarray(query, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(q))
    sims = matrix @ q / np.where(norms == 0, 1.0, norms)
    return {cid: float(1.0 - s) for cid, s in zip(ids, sims.tolist(), strict=True)}
