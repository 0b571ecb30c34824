"""Query vectors: embedded on a session built for one short text, remembered for repeated searches.

Ingest runs one single-threaded model run per worker, which is fastest for many texts. A search embeds
one short text and waits for it, so there all cores it may use help: with two intra-op threads a
21-token query took 5.6 ms against 9.9 ms on one (2 cores). Follow-up turns of a conversation and
the web page search the same text again; those reuse the vector from a small cache. Queries that
arrive while another is being embedded are embedded together, in one run (:class:`Coalescer`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from citeline.embed.base import Embedder, QueryEmbedder, available_cores
from citeline.recent import Recent


class VectorCache:
    """The vectors of the ``size`` most recently used ``(model id, text)`` pairs. Safe to share between
    threads; vectors come back read-only, so no caller can change another's."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: Recent[tuple[str, str], NDArray[np.float32]] = Recent(size)

    def get(self, model: str, text: str) -> NDArray[np.float32] | None:
        """The vector stored for exactly this model and text, or None."""
        return self._items.get((model, text))

    def put(self, model: str, text: str, vector: NDArray[np.float32]) -> NDArray[np.float32]:
        """Store a read-only copy of ``vector`` for this model and text (evicting the least recently
        used pair beyond ``size``) and return it."""
        stored = np.array(vector, dtype=np.float32)
        stored.setflags(write=False)
        self._items.put((model, text), stored)
        return stored

    def __len__(self) -> int:
        return len(self._items)


class _Batch:
    """Queries waiting to be embedded together in the next run, and what their callers get back."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        #: Set when this batch may run: the run before it has ended.
        self.turn = threading.Event()
        #: Set when this batch's run has ended, with ``vectors`` (a row per text) or ``error``.
        self.done = threading.Event()
        self.vectors: NDArray[np.float32] = np.empty((0, 0), dtype=np.float32)
        self.error: BaseException | None = None


class Coalescer:
    """Embeds the queries that arrive while a run is in flight together, in the next run.

    A model run of several short texts costs less per text than one run each: on 2 cores, on the
    2-thread query session, 6.2 ms of CPU a query alone, 5.0 in pairs, 4.6 in fours (vectors equal to
    3e-8). So under concurrent searches the queries share runs: with 4 searchers on the peer bench's
    store, 7 to 10% less CPU a search in four paired runs (docs/performance.md). A query that finds
    fewer than ``runs`` runs in flight runs at once, alone, so a lone search waits no longer than
    before; queries arriving while ``runs`` are in flight join one batch, which runs as soon as one of
    them ends, led by the first of them.
    """

    def __init__(self, embed: Callable[[list[str]], NDArray[np.float32]], *, runs: int = 1) -> None:
        self._embed = embed
        self._lock = threading.Lock()
        #: Runs allowed in flight at once, and those in flight.
        self._runs = runs
        self._busy = 0
        self._waiting: _Batch | None = None

    def embed(self, text: str) -> NDArray[np.float32]:
        """The vector of ``text``, embedded alone or with the queries that arrived during the last run."""
        with self._lock:
            if self._busy < self._runs:
                self._busy += 1
                batch = None
            else:
                batch = self._waiting = self._waiting or _Batch()
                index = len(batch.texts)
                batch.texts.append(text)
        if batch is None:
            try:
                vector: NDArray[np.float32] = self._embed([text])[0]
                return vector
            finally:
                self._release()
        if index == 0:
            batch.turn.wait()
            try:
                batch.vectors = self._embed(batch.texts)
            except BaseException as exc:
                batch.error = exc
            finally:
                batch.done.set()
                self._release()
        batch.done.wait()
        if batch.error is None:
            row: NDArray[np.float32] = batch.vectors[index]
            return row
        if len(batch.texts) == 1:
            raise batch.error
        # A failed run of several queries must not fail a caller whose own text would have embedded
        # (a remote embedder refusing one text): each embeds its text again, alone.
        alone: NDArray[np.float32] = self._embed([text])[0]
        return alone

    def _release(self) -> None:
        """End a run: hand the next turn to the batch that waited for it, if any (closing it to new
        queries), else leave the embedder idle."""
        with self._lock:
            waiting, self._waiting = self._waiting, None
            if waiting is None:
                self._busy -= 1
        if waiting is not None:
            waiting.turn.set()


class QueryVectors:
    """Query vectors: cached per model and text, or embedded with ``threads`` cores when the embedder
    has a query path (:class:`~citeline.embed.base.QueryEmbedder`), else by its ordinary ``embed``.
    Queries embedded at the same time share model runs (:class:`Coalescer`), as many runs in flight as
    the cores hold runs of ``threads``."""

    def __init__(self, *, threads: int, cache_size: int) -> None:
        self.threads = threads
        self.cache = VectorCache(cache_size)
        self._coalescers: dict[int, tuple[Embedder, Coalescer]] = {}
        self._lock = threading.Lock()
        self._runs = max(1, available_cores() // threads)

    def cached(self, embedder: Embedder, text: str) -> NDArray[np.float32] | None:
        """The vector of ``text`` if a recent search embedded it with ``embedder``'s model."""
        return self.cache.get(embedder.model_id, text)

    def embed(self, embedder: Embedder, text: str) -> NDArray[np.float32]:
        """Embed ``text`` with ``embedder`` now and remember its vector."""
        vector = self._coalescer(embedder).embed(text)
        return self.cache.put(embedder.model_id, text, vector)

    def _coalescer(self, embedder: Embedder) -> Coalescer:
        # One per embedder object (held here, so its id stays its own): runs share one model's session.
        with self._lock:
            entry = self._coalescers.get(id(embedder))
            if entry is None:
                if isinstance(embedder, QueryEmbedder):
                    query_embedder, threads = embedder, self.threads

                    def run(texts: list[str]) -> NDArray[np.float32]:
                        return query_embedder.embed_waited(texts, threads=threads)

                else:
                    run = embedder.embed
                entry = self._coalescers[id(embedder)] = (embedder, Coalescer(run, runs=self._runs))
            return entry[1]


class WaitedEmbedder:
    """An :class:`~citeline.embed.base.Embedder` for texts a request waits for (an answer's sentences,
    scored against each other and the question): embedded as search queries are, on the session of
    ``threads`` cores, when the embedder has one. A process that serves searches and answers then holds
    the query session alone, never the ingest session beside it (about 100 MB; docs/performance.md)."""

    def __init__(self, embedder: Embedder, threads: int) -> None:
        self.embedder = embedder
        self.threads = threads
        self.model_id = embedder.model_id
        self.dimension = embedder.dimension
        self.max_tokens = embedder.max_tokens

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if isinstance(self.embedder, QueryEmbedder):
            return self.embedder.embed_waited(texts, threads=self.threads)
        return self.embedder.embed(texts)
