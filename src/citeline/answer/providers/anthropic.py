"""The ``anthropic`` provider: Anthropic's Messages API, streamed.

``anthropic:<model>`` posts to ``<anthropic_base_url>/v1/messages`` (default
``https://api.anthropic.com``) with ``stream: true`` and yields the text of each ``text_delta``. System
messages go in the request's top-level ``system`` field, as the API wants. The key
(``anthropic_api_key``) is required for Anthropic itself and optional for a compatible server of the
user's own (llama.cpp's server speaks this API too).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from citeline.answer.llm import GenerationOptions, Message
from citeline.answer.providers.http_stream import StreamingClient
from citeline.errors import ConfigError
from citeline.remote import base_url, error_detail
from citeline.settings import Settings

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


class AnthropicChat:
    """An :class:`~citeline.answer.llm.LLM` talking to an Anthropic Messages API endpoint.

    Raises :class:`ConfigError` when the model is missing, the base URL is malformed, or Anthropic's
    own endpoint is used without a key.
    """

    def __init__(self, model: str, settings: Settings) -> None:
        if not model:
            raise ConfigError("anthropic: needs a model name, e.g. anthropic:claude-3-5-haiku-latest")
        self.model_id = f"anthropic:{model}"
        self._model = model
        base = base_url(self.model_id, settings.anthropic_base_url or DEFAULT_BASE_URL, "anthropic_base_url")
        key = settings.anthropic_api_key
        if key is None and base == DEFAULT_BASE_URL:
            raise ConfigError(
                f"{self.model_id} needs an API key: set CITELINE_ANTHROPIC_API_KEY, or set "
                "CITELINE_ANTHROPIC_BASE_URL to a compatible server that needs none"
            )
        headers = {"Accept": "text/event-stream", "anthropic-version": API_VERSION}
        if key is not None:
            headers["x-api-key"] = key.get_secret_value()
        self._client = StreamingClient(self.model_id, f"{base}/v1/messages", headers, key)

    def stream(self, messages: Sequence[Message], options: GenerationOptions) -> Iterator[str]:
        """Stream the reply; raises :class:`GenerationError` naming the URL and any HTTP status."""
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [{"role": m.role, "content": m.content} for m in messages if m.role != "system"],
            "max_tokens": options.max_tokens,
            "temperature": options.temperature,
            "stream": True,
        }
        if system:
            body["system"] = system
        for event in self._client.events(body, options, "CITELINE_ANTHROPIC_API_KEY"):
            if not isinstance(event, dict):
                continue
            kind = event.get("type")
            if kind == "error":
                raise self._client.error(f"reported an error mid-stream: {error_detail(event)}")
            if kind == "content_block_delta":
                delta = event.get("delta") or {}
                if delta.get("type") == "text_delta" and delta.get("text"):
                    yield delta["text"]
            elif kind == "message_stop":
                return

    def close(self) -> None:
        self._client.close()
