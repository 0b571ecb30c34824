"""``get_embedder``: provider:model strings in, one shared, loaded embedder per setting out."""

from __future__ import annotations

import pytest

from citeline.embed import Embedder, get_embedder
from citeline.embed.base import available_cores
from citeline.errors import ConfigError

from .conftest import SPEC


def test_the_spec_names_the_model_and_its_shape(embedder: Embedder) -> None:
    assert (embedder.model_id, embedder.dimension, embedder.max_tokens) == (SPEC, 384, 256)


def test_one_embedder_is_shared_per_setting_and_zero_threads_means_every_core(embedder: Embedder) -> None:
    assert get_embedder(SPEC) is embedder
    assert get_embedder(SPEC, threads=available_cores()) is embedder
    assert get_embedder(SPEC, batch_size=8) is not embedder


def test_an_unknown_provider_is_a_config_error_naming_the_spec_and_the_known_ones() -> None:
    with pytest.raises(
        ConfigError,
        match=r"unknown embedding provider 'nope' in 'nope:all-MiniLM-L6-v2' .a spec is provider:model.; "
        r"known providers: ollama:<model>, onnx:<model>, openai:<model>, sentence-transformers:<folder> "
        r"\(e\.g\. ollama:nomic-embed-text, onnx:all-MiniLM-L6-v2",
    ):
        get_embedder("nope:all-MiniLM-L6-v2")


def test_an_unknown_model_is_a_config_error_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown onnx embedding model 'bge-small'.*onnx:all-MiniLM-L6-v2"):
        get_embedder("onnx:bge-small")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "all-MiniLM-L6-v2",
            r"unknown embedding provider 'all-MiniLM-L6-v2' in 'all-MiniLM-L6-v2' .a spec is",
        ),
        ("onnx:", r"embedding 'onnx:' names no model: write onnx:<model>, e\.g\. onnx:all-MiniLM-L6-v2"),
        (":all-MiniLM-L6-v2", r"embedding ':all-MiniLM-L6-v2' names no provider .a spec is provider:model."),
        ("", r"embedding '' names no provider .a spec is provider:model.; known providers: ollama:<model>"),
    ],
)
def test_a_spec_without_provider_and_model_is_a_config_error_saying_how_to_write_one(
    spec: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        get_embedder(spec)


@pytest.mark.parametrize(
    ("batch_size", "threads", "message"),
    [(0, 0, "batch size must be at least 1"), (32, -1, "threads must be 0 .all cores. or more")],
)
def test_out_of_range_numbers_are_config_errors(batch_size: int, threads: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        get_embedder(SPEC, batch_size=batch_size, threads=threads)


def test_citeline_providers_names_every_packaged_onnx_model() -> None:
    from citeline.embed.base import EMBEDDERS
    from citeline.embed.onnx import MODELS

    (onnx,) = [p for p in EMBEDDERS.providers() if p.name == "onnx"]
    assert all(name in onnx.about for name in MODELS), onnx.about
