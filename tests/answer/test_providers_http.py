"""The openai and anthropic providers against a real server on loopback: llama.cpp's own server (inside
xllamacpp) serving the packaged 0.5B model, which speaks both OpenAI chat completions and Anthropic
Messages. Also: keys are required where they must be, refused keys and unreachable servers are
GenerationErrors naming the URL, and a key never appears in an error."""

from __future__ import annotations

import re
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import xllamacpp
from pydantic import SecretStr

from citeline.answer.llm import LLM, GenerationOptions, Message, complete, get_llm
from citeline.answer.providers.http_stream import StreamingClient
from citeline.answer.providers.local import packaged_model_path, server_params
from citeline.errors import ConfigError, GenerationError
from citeline.settings import Settings

KEY = secrets.token_urlsafe(24)
QUESTION = [
    Message("system", "Answer the question from the passage only. Be brief."),
    Message(
        "user",
        "Passage: The Harlow Bridge over the river Ness opened in 1932 and is 412 metres long.\n\n"
        "Question: In which year did the Harlow Bridge open?",
    ),
]
PERSONA = "You are a pirate named Captain Redbeard."
NAME = [Message("system", PERSONA), Message("user", "What is your name?")]
SHORT = GenerationOptions(max_tokens=24, timeout=60)


@pytest.fixture(scope="session")
def server_url(data_dir: Path) -> Iterator[str]:
    """llama.cpp's HTTP server on a free loopback port, requiring :data:`KEY`; stopped after the session."""
    params = server_params(
        packaged_model_path("qwen2.5-coder-0.5b-instruct", data_dir), threads=1, context=2048
    )
    params.api_keys = [KEY]
    server = xllamacpp.Server(params)
    url = str(server.listening_address)
    assert url.startswith("http://127.0.0.1:")
    yield url
    del server  # the last reference: stops the server and frees the model


def openai(url: str, key: str | None = KEY) -> LLM:
    return get_llm(
        "openai:qwen2.5-coder", Settings(llm_base_url=url, openai_api_key=SecretStr(key) if key else None)
    )


def anthropic(url: str, key: str | None = KEY) -> LLM:
    return get_llm(
        "anthropic:qwen2.5-coder",
        Settings(anthropic_base_url=url, anthropic_api_key=SecretStr(key) if key else None),
    )


Provider = Callable[[str, str | None], LLM]


def closed_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.slow
def test_openai_streams_an_answer_from_the_server(server_url: str) -> None:
    llm = openai(f"{server_url}/v1/")
    pieces = list(llm.stream(QUESTION, SHORT))
    llm.close()

    assert len(pieces) > 1
    assert "1932" in "".join(pieces)
    assert llm.model_id == "openai:qwen2.5-coder"


@pytest.mark.slow
def test_anthropic_streams_an_answer_and_sends_the_system_prompt_in_its_own_field(server_url: str) -> None:
    llm = anthropic(server_url)
    pieces = list(llm.stream(QUESTION, SHORT))
    named = complete(llm, NAME, SHORT)
    unnamed = complete(llm, NAME[1:], SHORT)
    llm.close()

    assert len(pieces) > 1
    assert "1932" in "".join(pieces)
    assert "Redbeard" in named
    assert "Redbeard" not in unnamed


@pytest.mark.slow
def test_openai_passes_the_system_prompt_too(server_url: str) -> None:
    assert "Redbeard" in complete(openai(f"{server_url}/v1"), NAME, SHORT)


@pytest.mark.slow
@pytest.mark.parametrize("provider", [openai, anthropic])
def test_a_refused_key_is_an_http_401_naming_the_url_and_never_the_key(
    server_url: str, provider: Provider
) -> None:
    wrong = secrets.token_urlsafe(24)
    llm = provider(f"{server_url}/v1" if provider is openai else server_url, wrong)

    with pytest.raises(GenerationError, match=rf"{re.escape(server_url)}/v1/\S+ answered HTTP 401") as caught:
        complete(llm, QUESTION, SHORT)
    message = str(caught.value)
    assert wrong not in message
    assert KEY not in message
    assert "API_KEY" in message


@pytest.mark.slow
def test_a_wrong_base_path_is_an_http_404_naming_the_url(server_url: str) -> None:
    with pytest.raises(
        GenerationError, match=rf"{re.escape(server_url)}/nowhere/chat/completions answered HTTP 404"
    ):
        complete(openai(f"{server_url}/nowhere"), QUESTION, SHORT)


@pytest.mark.slow
def test_a_server_too_slow_for_the_timeout_is_a_generation_error(server_url: str) -> None:
    with pytest.raises(GenerationError, match=r"did not answer within 0\.01 s"):
        complete(openai(f"{server_url}/v1"), QUESTION, GenerationOptions(max_tokens=24, timeout=0.01))


@pytest.mark.parametrize("provider", [openai, anthropic])
def test_a_refused_connection_is_a_generation_error_naming_the_url(provider: Provider) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    llm = provider(url, KEY)

    with pytest.raises(
        GenerationError, match=rf"{re.escape(url)}/\S+ cannot be reached: ConnectError"
    ) as caught:
        complete(llm, QUESTION, SHORT)
    assert KEY not in str(caught.value)


def test_the_public_apis_need_a_key_before_anything_is_sent() -> None:
    with pytest.raises(ConfigError, match="openai:gpt-4o-mini needs an API key: set CITELINE_OPENAI_API_KEY"):
        get_llm("openai:gpt-4o-mini", Settings())
    with pytest.raises(ConfigError, match="needs an API key: set CITELINE_ANTHROPIC_API_KEY"):
        get_llm("anthropic:claude-3-5-haiku-latest", Settings())


def test_a_server_of_ones_own_needs_no_key() -> None:
    assert openai("http://127.0.0.1:8080/v1", key=None).model_id == "openai:qwen2.5-coder"
    assert anthropic("http://127.0.0.1:8080", key=None).model_id == "anthropic:qwen2.5-coder"


def test_malformed_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"llm_base_url 'ftp://example\.com' must be an http"):
        openai("ftp://example.com")
    with pytest.raises(ConfigError, match="anthropic_base_url 'localhost:8080' must be an http"):
        anthropic("localhost:8080")
    with pytest.raises(ConfigError, match="LLM 'openai:' names no model: write openai:<model>"):
        get_llm("openai:", Settings(openai_api_key=SecretStr(KEY)))


def test_a_key_a_server_echoes_back_is_masked() -> None:
    client = StreamingClient("openai:m", "http://127.0.0.1:1/v1/chat/completions", {}, SecretStr(KEY))

    assert str(client.error(f"answered HTTP 401: bad key {KEY}")) == (
        "openai:m: http://127.0.0.1:1/v1/chat/completions answered HTTP 401: bad key ***"
    )
    client.close()
