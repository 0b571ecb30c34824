"""The real packaged model, loaded once for the whole session."""

from __future__ import annotations

import pytest

from citeline.embed import Embedder, get_embedder

SPEC = "onnx:all-MiniLM-L6-v2"


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The default embedder, on every core (so calls with several runs go through the worker pool)."""
    return get_embedder(SPEC)
