"""The ``openai`` provider: chat completions, streamed, from OpenAI or any OpenAI-compatible server.

``openai:<model>`` posts to ``<llm_base_url>/chat/completions`` (default ``https://api.openai.com/v1``)
with ``stream: true`` and yields each ``delta.content``. Ollama, vLLM, LM Studio and llama.cpp's server
speak the same protocol. The key (``openai_api_key``) is required for OpenAI itself and optional for a
server of the user's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from citeline.answer.llm import GenerationOptions, Message
from citeline.answer.providers.http_stream import StreamingClient
from citeline.errors import ConfigError
from citeline.remote import base_url, error_detail
from citeline.settings import Settings

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIChat:
    """An :class:`~citeline.answer.llm.LLM` talking to an OpenAI-compatible chat completions endpoint.

    Raises :class:`ConfigError` when the model is missing, the base URL is malformed, or OpenAI's own
    endpoint is used without a key.
    """

    def __init__(self, model: str, settings: Settings) -> None:
        if not model:
            raise ConfigError("openai: needs a model name, e.g. openai:gpt-4o-mini")
        self.model_id = f"openai:{model}"
        self._model = model
        base = base_url(self.model_id, settings.llm_base_url or DEFAULT_BASE_URL, "llm_base_url")
        key = settings.openai_api_key
        if key is None and base == DEFAULT_BASE_URL:
            raise ConfigError(
                f"{self.model_id} needs an API key: set CITELINE_OPENAI_API_KEY, or set "
                "CITELINE_LLM_BASE_URL to an OpenAI-compatible server that needs none"
            )
        headers = {"Accept": "text/event-stream"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key.get_secret_value()}"
        self._client = StreamingClient(self.model_id, f"{base}/chat/completions", headers, key)

    def stream(self, messages: Sequence[Message], options: GenerationOptions) -> Iterator[str]:
        """Stream the reply; raises :class:`GenerationError` naming the URL and any HTTP status."""
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "stream": True,
            "temperature": options.temperature,
            "max_tokens": options.max_tokens,
        }
        for event in self._client.events(body, options, "CITELINE_OPENAI_API_KEY"):
            if not isinstance(event, dict):
                continue
            if "error" in event:
                raise self._client.error(f"reported an error mid-stream: {error_detail(event)}")
            for choice in event.get("choices") or ():
                text = (choice.get("delta") or {}).get("content")
                if text:
                    yield text

    def close(self) -> None:
        self._client.close()
