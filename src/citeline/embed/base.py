"""The embedding contract and its registry of ``provider:model`` specs.

A provider implements :class:`Embedder` and is declared once in :data:`EMBEDDERS` (the built-in ones
in :mod:`citeline.embed.providers`); :func:`get_embedder` then resolves ``provider:model`` strings to
it. Nothing else needs to know the provider exists.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from citeline.errors import ConfigError
from citeline.registry import Registry
from citeline.settings import Settings, load_settings


class Embedder(Protocol):
    """Turns texts into unit-length vectors of one model's space.

    ``model_id`` is the full ``provider:model`` string; it is recorded with every vector so a query
    never compares vectors from two models. ``max_tokens`` is where the model truncates a text (0 when
    a remote server does not say).
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

    def embed_waited(self, texts: Sequence[str], *, threads: int) -> npt.NDArray[np.float32]:
        """Embed a few texts a caller waits for (an answer's sentences) as :meth:`embed_query` embeds one,
        with up to ``threads`` cores: the vectors ``embed(texts)`` gives (up to float rounding)."""
        ...


class Interrupt:
    """A stop, set by one thread, for the embedding calls another thread makes with it: an ingest that
    Ctrl-C ends does not wait for the batch in the embedder. A provider that can cut a call short
    registers how for as long as the call runs (:meth:`while_running`); every interruptible provider
    also checks :meth:`is_set` between the parts of a call."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self._lock = threading.Lock()
        self._stops: list[Callable[[], None]] = []

    def set(self) -> None:
        """Stop the calls under way, and every later one, made with this interrupt."""
        with self._lock:
            self._set.set()
            stops = list(self._stops)
        for stop in stops:
            stop()

    def is_set(self) -> bool:
        return self._set.is_set()

    @contextmanager
    def while_running(self, stop: Callable[[], None]) -> Iterator[None]:
        """``stop`` is called if the interrupt is set while the block runs (at once if it already is)."""
        with self._lock:
            self._stops.append(stop)
            already = self._set.is_set()
        if already:
            stop()
        try:
            yield
        finally:
            with self._lock:
                self._stops.remove(stop)


@runtime_checkable
class InterruptibleEmbedder(Protocol):
    """An embedder whose call another thread can stop part-way (:class:`Interrupt`)."""

    def embed_interruptible(self, texts: Sequence[str], interrupt: Interrupt) -> npt.NDArray[np.float32]:
        """:meth:`Embedder.embed`, unless ``interrupt`` is set before it returns: then
        :class:`~citeline.errors.EmbeddingError` saying it was interrupted, as soon as the model stops."""
        ...


#: The embedding providers. A provider's ``build(model, settings)`` returns a loaded
#: :class:`Embedder`; it reads ``embed_batch_size`` and ``embed_threads`` (already resolved: threads is
#: at least 1) and the settings it declares.
EMBEDDERS: Registry[Embedder] = Registry("embedding", builtins="citeline.embed.providers")

_CACHE: dict[tuple[object, ...], Embedder] = {}
_CACHE_LOCK = threading.Lock()


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, which containers narrow)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def get_embedder(
    spec: str,
    settings: Settings | None = None,
    *,
    batch_size: int | None = None,
    threads: int | None = None,
) -> Embedder:
    """The embedder for ``spec`` (``provider:model``, e.g. ``onnx:all-MiniLM-L6-v2``), loaded and ready.

    ``settings`` (read from the environment when not given) carry what remote providers need: base
    URL, key, timeout, retries. ``batch_size`` caps the texts per model run or request and ``threads``
    is how many cores to use, 0 meaning all of them; each defaults to its setting (``embed_batch_size``,
    ``embed_threads``). One embedder is built per distinct spec and settings it reads, and shared for
    the life of the process, so a model is loaded once. It is loaded (or a remote one asked for its
    dimension) here rather than on first use, so a missing model or an unreachable server fails the call
    that names it instead of the middle of an ingest.

    Raises :class:`~citeline.errors.ConfigError` for a malformed spec, an unknown provider or model, or
    out-of-range numbers; :class:`~citeline.errors.EmbeddingError` when the model cannot be loaded or
    reached.
    """
    settings = settings or load_settings()
    batch_size = settings.embed_batch_size if batch_size is None else batch_size
    threads = settings.embed_threads if threads is None else threads
    if batch_size < 1:
        raise ConfigError(f"embedding batch size must be at least 1, got {batch_size}")
    if threads < 0:
        raise ConfigError(f"embedding threads must be 0 (all cores) or more, got {threads}")
    provider, parsed = EMBEDDERS.parse(spec)
    threads = threads or available_cores()
    key = (
        provider.name,
        parsed.model,
        batch_size,
        threads,
        *(getattr(settings, n) for n in provider.settings),
    )
    with _CACHE_LOCK:
        embedder = _CACHE.get(key)
        if embedder is None:
            resolved = settings.model_copy(update={"embed_batch_size": batch_size, "embed_threads": threads})
            embedder = _CACHE[key] = provider.build(parsed.model, resolved)
    return embedder
