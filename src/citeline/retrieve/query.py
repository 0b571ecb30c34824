"""Query vectors: embedded on a session built for one short text, remembered for repeated searches.

Ingest runs one single-threaded model run per worker, which is fastest for many texts. A search embeds
one short text and waits for it, so there all cores it may use help: with two intra-op threads a
21-token query took 5.6 ms against 9.9 ms on one (2 cores). Follow-up turns of a conversation and
the web page search the same text again; those reuse the vector from a small cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from citeline.embed.base import Embedder, QueryEmbedder
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


class QueryVectors:
    """Query vectors: cached per model and text, or embedded with ``threads`` cores when the embedder
    has a query path (:class:`~citeline.embed.base.QueryEmbedder`), else by its ordinary ``embed``."""

    def __init__(self, *, threads: int, cache_size: int) -> None:
        self.threads = threads
        self.cache = VectorCache(cache_size)

    def cached(self, embedder: Embedder, text: str) -> NDArray[np.float32] | None:
        """The vector of ``text`` if a recent search embedded it with ``embedder``'s model."""
        return self.cache.get(embedder.model_id, text)

    def embed(self, embedder: Embedder, text: str) -> NDArray[np.float32]:
        """Embed ``text`` with ``embedder`` now and remember its vector."""
        if isinstance(embedder, QueryEmbedder):
            vector = embedder.embed_query(text, threads=self.threads)
        else:
            vector = embedder.embed([text])[0]
        return self.cache.put(embedder.model_id, text, vector)


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
