"""Embedders for job tests: the real packaged model, with faults a remote provider would have."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from citeline.embed import EMBEDDERS, Embedder
from citeline.embed.onnx import OnnxEmbedder
from citeline.errors import EmbeddingError
from citeline.registry import Provider
from citeline.settings import Settings

#: ``gated:<name>`` embedders wait for their gate to open before embedding.
GATES: dict[str, threading.Event] = {}
_PACKAGED: list[Embedder] = []
_PACKAGED_LOCK = threading.Lock()


def _packaged(batch_size: int, threads: int) -> Embedder:
    """One packaged model for all these embedders (built here: a factory must not call get_embedder)."""
    with _PACKAGED_LOCK:
        if not _PACKAGED:
            _PACKAGED.append(OnnxEmbedder("all-MiniLM-L6-v2", batch_size=batch_size, threads=threads))
        return _PACKAGED[0]


class _Faulty:
    """The packaged embedder, failing its first ``failures`` calls as a remote provider that timed out."""

    def __init__(self, model: str, *, batch_size: int, threads: int) -> None:
        self.inner = _packaged(batch_size, threads)
        self.model_id = f"faulty:{model}"
        self.dimension, self.max_tokens = self.inner.dimension, self.inner.max_tokens
        self.failures = int(model.split("-", 1)[0])
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        if self.calls <= self.failures and len(texts) > 1:
            raise EmbeddingError(f"{self.model_id}: the embedding server timed out (call {self.calls})")
        return self.inner.embed(texts)


class _Gated(_Faulty):
    """The packaged embedder, holding every batch of more than one text until its gate opens."""

    def __init__(self, model: str, *, batch_size: int, threads: int) -> None:
        super().__init__("0-" + model, batch_size=batch_size, threads=threads)
        self.model_id = f"gated:{model}"
        self.gate = GATES.setdefault(model, threading.Event())

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if len(texts) > 1:
            self.gate.wait(60)
        return self.inner.embed(texts)


def _faulty(model: str, settings: Settings) -> Embedder:
    return _Faulty(model, batch_size=settings.embed_batch_size, threads=settings.embed_threads)


def _gated(model: str, settings: Settings) -> Embedder:
    return _Gated(model, batch_size=settings.embed_batch_size, threads=settings.embed_threads)


@pytest.fixture(autouse=True)
def fault_injecting_providers() -> Iterator[None]:
    """``faulty:``, ``gated:`` and ``filegate:`` embedders, registered for these tests only (others
    list providers)."""
    register_test_providers()
    yield
    for name in ("faulty", "gated", "filegate"):
        EMBEDDERS.remove(name)


def register_test_providers() -> None:
    """Register the fault-injecting embedders (in the tests, and in the workers they start)."""
    for name, build in (("faulty", _faulty), ("gated", _gated), ("filegate", _filegated)):
        EMBEDDERS.register(
            Provider(name, build=build, about="the packaged embedder, with faults", example=f"{name}:0-a")
        )


@pytest.fixture
def gate() -> Iterator[tuple[str, threading.Event]]:
    """A gated embedder's model name and its gate (opened at the end, whatever happened)."""
    name = f"g{len(GATES)}"
    event = GATES.setdefault(name, threading.Event())
    yield name, event
    event.set()


class _FileGated(_Faulty):
    """The packaged embedder, holding every batch of more than one text until the file ``<model>``
    exists in ``$CITELINE_TEST_GATES``: a gate that the test opens for a worker in another process."""

    def __init__(self, model: str, *, batch_size: int, threads: int) -> None:
        super().__init__("0-" + model, batch_size=batch_size, threads=threads)
        self.model_id = f"filegate:{model}"
        self.gate = Path(os.environ.get("CITELINE_TEST_GATES", "/nonexistent")) / model

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        deadline = time.monotonic() + 120
        while len(texts) > 1 and not self.gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.inner.embed(texts)


def _filegated(model: str, settings: Settings) -> Embedder:
    return _FileGated(model, batch_size=settings.embed_batch_size, threads=settings.embed_threads)
