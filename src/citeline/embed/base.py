"""The embedding contract and the ``provider:model`` factory.

A provider is a module that implements :class:`Embedder` and calls :func:`register_provider` once at
import time; :func:`get_embedder` then resolves ``provider:model`` strings to it. Nothing else needs to
know the provider exists.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from citeline.errors import ConfigError


class Embedder(Protocol):
    """Turns texts into unit-length vectors of one model's space.

    ``model_id`` is the full ``provider:model`` string; it is recorded with every vector so a query
    never compares vectors from two models. ``max_tokens`` is where the model truncates a text.
    """

    model_id: str
    dimension: int
    max_tokens: int

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` as an ``(len(texts), dimension)`` float32 array of L2-normalised rows, in order."""
        ...


@runtime_checkable
class QueryEmbedder(Protocol):
    """An embedder with a path built for one short text that a caller waits for (a search query)."""

    def embed_query(self, text: str, *, threads: int) -> npt.NDArray[np.float32]:
        """Embed one text with up to ``threads`` cores, as ``embed([text])[0]`` would (same vector)."""
        ...


class ProviderFactory(Protocol):
    """Builds a ready-to-use embedder for one model of a provider.

    It raises :class:`~citeline.errors.ConfigError` for a model it does not know (listing the ones it
    does) and :class:`~citeline.errors.EmbeddingError` when the model cannot be loaded.
    """

    def __call__(self, model: str, *, batch_size: int, threads: int) -> Embedder: ...


_PROVIDERS: dict[str, ProviderFactory] = {}
_CACHE: dict[tuple[str, int, int], Embedder] = {}
_CACHE_LOCK = threading.Lock()
_EXAMPLE = "onnx:all-MiniLM-L6-v2"


def register_provider(name: str, factory: ProviderFactory) -> None:
    """Make specs ``name:<model>`` resolve to ``factory``."""
    _PROVIDERS[name] = factory


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, which containers narrow)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def get_embedder(spec: str, *, batch_size: int = 32, threads: int = 0) -> Embedder:
    """The embedder for ``spec`` (``provider:model``, e.g. ``onnx:all-MiniLM-L6-v2``), loaded and ready.

    ``batch_size`` caps the texts per model run; ``threads`` is how many cores to use, 0 meaning all of
    them. One embedder is built per distinct ``(spec, batch_size, threads)`` and shared for the life of
    the process, so the model is loaded once. It is loaded here rather than on first use, so a missing
    or corrupt model fails the call that names it instead of the middle of an ingest.

    Raises :class:`~citeline.errors.ConfigError` for a malformed spec, an unknown provider or model, or
    out-of-range numbers; :class:`~citeline.errors.EmbeddingError` when the model cannot be loaded.
    """
    provider, sep, model = spec.partition(":")
    if not sep or not provider or not model:
        raise ConfigError(f"embedding model {spec!r} is not of the form provider:model, e.g. {_EXAMPLE}")
    if batch_size < 1:
        raise ConfigError(f"embedding batch size must be at least 1, got {batch_size}")
    if threads < 0:
        raise ConfigError(f"embedding threads must be 0 (all cores) or more, got {threads}")
    factory = _PROVIDERS.get(provider)
    if factory is None:
        raise ConfigError(
            f"unknown embedding provider {provider!r} in {spec!r}; known providers: "
            f"{', '.join(sorted(_PROVIDERS))} (e.g. {_EXAMPLE})"
        )
    key = (spec, batch_size, threads or available_cores())
    with _CACHE_LOCK:
        embedder = _CACHE.get(key)
        if embedder is None:
            embedder = _CACHE[key] = factory(model, batch_size=key[1], threads=key[2])
    return embedder
