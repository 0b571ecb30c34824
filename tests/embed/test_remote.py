"""Remote embedders (``openai:``, ``ollama:``) against a real OpenAI-compatible server on loopback.

The server is llama.cpp's (``xllamacpp``) with embeddings on, serving the packaged answering model
(Qwen2.5-Coder-0.5B, mean-pooled: a model for writing, whose vectors are fine for checking a client) and
guarded by a key. Failures a remote service has are made real too: a loopback port nobody listens on,
and a socket that accepts connections but never answers.

There is no Ollama server here (no registry ships its binary), so ``ollama:`` is tested against what
does exist: its settings, an unreachable and a silent server, and a server without ``/api/embed``.
"""

from __future__ import annotations

import logging
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from citeline.answer.providers.local import packaged_model_path, server_params
from citeline.embed import get_embedder
from citeline.embed.http import MAX_RETRY_AFTER, RemoteEmbedder, _retry_after
from citeline.embed.ollama import OllamaEmbedder
from citeline.embed.openai import OpenAIEmbedder
from citeline.engine import Citeline
from citeline.errors import ConfigError, EmbeddingError, InvalidRequestError, ModelMismatchError
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings
from tests.conftest import write

KEY = "sk-test-" + secrets.token_hex(16)
#: The packaged model's hidden size: the dimension its mean-pooled vectors have.
QWEN_DIMENSION = 896
TEXTS = [
    "Before first use, prime the pump: fill the casing with clean water.",
    "Never run the pump dry; the mechanical seal fails within seconds.",
    "In winter, drain the volute so that frost cannot crack the casing.",
    "The motor is rated 230 V, 50 Hz, 750 W.",
    "The 2018 football world cup was won by France.",
]


@pytest.fixture(scope="module")
def server_url(data_dir: Path) -> Iterator[str]:
    """``http://127.0.0.1:<port>/v1`` of a llama.cpp server with embeddings on, which wants :data:`KEY`."""
    import xllamacpp

    # One thread each: llama.cpp's threads wait on each other, which costs dearly on a busy machine.
    model = packaged_model_path("qwen2.5-coder-0.5b-instruct", data_dir)
    params = server_params(model, threads=1, batch_threads=1, context=2048)
    params.embedding = True
    params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    params.api_keys = [KEY]
    server = xllamacpp.Server(params)
    yield f"{server.listening_address}/v1"
    del server


def remote(base: str | None, **overrides: object) -> Settings:
    """Settings for a remote embedder at ``base`` with :data:`KEY`, quick to give up unless overridden."""
    values: dict[str, object] = {
        "embed_base_url": base,
        "embed_api_key": SecretStr(KEY),
        "embed_retries": 2,
        "embed_retry_delay": 0.05,
        "embed_timeout": 120.0,
    }
    values.update(overrides)
    return Settings.model_validate(values)


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel completes them) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


# -- openai: against the real server -----------------------------------------------------------------


def test_an_openai_compatible_server_embeds_in_order_as_unit_vectors_of_the_models_dimension(
    server_url: str,
) -> None:
    embedder = get_embedder("openai:qwen-embed", remote(server_url))

    vectors = embedder.embed(TEXTS)

    assert (embedder.model_id, embedder.dimension) == ("openai:qwen-embed", QWEN_DIMENSION)
    assert vectors.shape == (len(TEXTS), QWEN_DIMENSION)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Each row is its own text's vector: the same text embedded alone gives it again.
    for i in (0, 4):
        assert float(embedder.embed([TEXTS[i]])[0] @ vectors[i]) > 0.999


def test_batches_of_any_size_give_the_same_vectors(server_url: str) -> None:
    whole = OpenAIEmbedder("qwen-embed", remote(server_url, embed_batch_size=32))
    in_twos = OpenAIEmbedder("qwen-embed", remote(server_url, embed_batch_size=2))

    assert np.allclose(whole.embed(TEXTS[:3]), in_twos.embed(TEXTS[:3]), atol=1e-4)
    assert in_twos.embed([]).shape == (0, QWEN_DIMENSION)
    whole.close()
    in_twos.close()


def test_a_refused_key_is_a_config_error_naming_the_setting_and_never_the_key(
    server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "sk-wrong-" + secrets.token_hex(16)

    with pytest.raises(
        ConfigError, match=r"answered HTTP 401: Invalid API Key; check CITELINE_EMBED_API_KEY"
    ) as e:
        OpenAIEmbedder("qwen-embed", remote(server_url, embed_api_key=SecretStr(wrong)))

    assert wrong not in str(e.value)
    assert wrong not in caplog.text


def test_the_key_appears_in_no_log_line_or_error_of_a_whole_session(
    server_url: str, closed_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    embedder = OpenAIEmbedder("qwen-embed", remote(server_url, embed_batch_size=2))
    embedder.embed(TEXTS[:3])
    with pytest.raises(InvalidRequestError) as refused:
        embedder.embed(["a text", ""])
    with pytest.raises(EmbeddingError) as unreachable:
        OpenAIEmbedder("qwen-embed", remote(f"http://127.0.0.1:{closed_port}/v1"))
    embedder.close()

    assert "HTTP Request: POST" in caplog.text  # httpx logged every request, at INFO
    assert "retry 1 of 2" in caplog.text
    for text in (caplog.text, str(refused.value), str(unreachable.value), repr(embedder.__dict__)):
        assert KEY not in text


def test_a_text_the_server_refuses_is_an_invalid_request_sent_once(
    server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = OpenAIEmbedder("qwen-embed", remote(server_url))
    caplog.set_level(logging.WARNING, logger="citeline")

    with pytest.raises(
        InvalidRequestError, match=r"answered HTTP 400: Input content cannot be empty for a batch of 2"
    ):
        embedder.embed(["a pump", ""])

    assert "retry" not in caplog.text
    embedder.close()


def test_a_wrong_base_url_is_a_config_error_saying_what_to_check(server_url: str) -> None:
    with pytest.raises(
        ConfigError, match=r"/embeddings answered HTTP 404.*check embed_base_url and the model"
    ):
        OpenAIEmbedder("qwen-embed", remote(server_url.removesuffix("/v1") + "/nope"))


def test_openai_itself_needs_a_key_before_anything_is_sent() -> None:
    with pytest.raises(
        ConfigError, match=r"openai:text-embedding-3-small needs an API key: set CITELINE_EMBED_API_KEY"
    ):
        get_embedder("openai:text-embedding-3-small", Settings())


def test_a_malformed_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"embed_base_url 'localhost:8080' must be an http"):
        get_embedder("openai:m", Settings(embed_base_url="localhost:8080"))


def test_the_store_never_mixes_the_remote_models_vectors_with_anothers(
    server_url: str, settings: Settings, tmp_path: Path
) -> None:
    remote_settings = remote(server_url).model_copy(
        update={
            "embedding_model": "openai:qwen-embed",
            "data_dir": settings.data_dir,
            "namespace": settings.namespace,
        }
    )
    with Citeline(remote_settings) as cl:
        cl.ingest([write(tmp_path / "pump.txt", " ".join(TEXTS[:4])), write(tmp_path / "cup.txt", TEXTS[4])])
        hits = cl.search(SearchRequest("how do I prime the pump", top_k=1))
        assert hits[0].document_name == "pump.txt"
        # Configured with another model, an instance still embeds queries and new documents with the
        # model the namespace serves, until a migration switches it (docs/ingesting.md).
        with cl.derive(embedding_model="onnx:all-MiniLM-L6-v2") as local:
            assert local.served_model() == "openai:qwen-embed"
            found = local.search(SearchRequest("how do I prime the pump", top_k=1))
            assert found[0].document_name == "pump.txt"
            [added] = local.ingest([write(tmp_path / "seal.txt", "The seal is replaced every 2,000 hours.")])
            assert added.document is not None and added.document.embedding_model == "openai:qwen-embed"
        # A version of another model in the catalog (written behind citeline's back) is refused.
        with cl.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE documents SET embedding_model = 'openai:another-name' WHERE name = 'cup.txt'")
            )
        with pytest.raises(ModelMismatchError, match="embedded with openai:another-name"):
            cl.search(SearchRequest("how do I prime the pump"))


# -- transient failures, for both remote providers ----------------------------------------------------


@pytest.mark.parametrize("provider", [OpenAIEmbedder, OllamaEmbedder])
def test_an_unreachable_server_is_retried_with_growing_waits_then_an_embedding_error(
    provider: Callable[[str, Settings], RemoteEmbedder], closed_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="citeline")
    started = time.perf_counter()

    with pytest.raises(
        EmbeddingError, match=r"127\.0\.0\.1:\d+/\S+ cannot be reached: ConnectError.*after 3 tries"
    ):
        provider("m", remote(f"http://127.0.0.1:{closed_port}", embed_retry_delay=0.2))

    # Waits of 0.2 s, then 0.4 s.
    assert time.perf_counter() - started >= 0.6
    assert [r.getMessage().split("; ")[-1] for r in caplog.records] == [
        "retry 1 of 2 in 0.2 s",
        "retry 2 of 2 in 0.4 s",
    ]


@pytest.mark.parametrize("provider", [OpenAIEmbedder, OllamaEmbedder])
def test_a_server_that_never_answers_times_out(
    provider: Callable[[str, Settings], RemoteEmbedder], silent_port: int
) -> None:
    with pytest.raises(
        EmbeddingError, match=r"did not answer within 0\.3 s \(embed_timeout\) \(after 1 try\)"
    ):
        provider("m", remote(f"http://127.0.0.1:{silent_port}", embed_timeout=0.3, embed_retries=0))


# -- ollama: ---------------------------------------------------------------------------------------


def test_ollama_defaults_to_a_local_server_and_its_native_path(closed_port: int) -> None:
    with pytest.raises(
        EmbeddingError, match=r"ollama:nomic-embed-text: http://127\.0\.0\.1:11434/api/embed "
    ):
        get_embedder("ollama:nomic-embed-text", remote(None, embed_retries=0, embed_api_key=None))
    with pytest.raises(
        EmbeddingError, match=rf"http://127\.0\.0\.1:{closed_port}/api/embed cannot be reached"
    ):
        get_embedder("ollama:nomic-embed-text", remote(f"http://127.0.0.1:{closed_port}/", embed_retries=0))


def test_ollama_against_a_server_without_its_api_is_a_config_error(server_url: str) -> None:
    with pytest.raises(
        ConfigError, match=r"/api/embed answered HTTP 404: File Not Found; check embed_base_url"
    ):
        OllamaEmbedder("nomic-embed-text", remote(server_url.removesuffix("/v1")))


@pytest.mark.parametrize(
    ("header", "wait"),
    [("2", 2.0), ("0.5", 0.5), ("3600", MAX_RETRY_AFTER), ("-4", 0.0), ("soon", None), (None, None)],
)
def test_a_servers_retry_after_sets_the_wait_up_to_a_minute(header: str | None, wait: float | None) -> None:
    headers = {"Retry-After": header} if header is not None else {}
    assert _retry_after(httpx.Response(429, headers=headers)) == wait


def test_a_retry_after_date_is_a_wait_until_then() -> None:
    in_ten_seconds = format_datetime(datetime.now(UTC) + timedelta(seconds=10), usegmt=True)
    wait = _retry_after(httpx.Response(503, headers={"Retry-After": in_ten_seconds}))
    assert wait is not None
    assert 8.0 < wait <= 10.0
