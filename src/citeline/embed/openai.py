"""The ``openai`` embedding provider: OpenAI's embeddings API, or any server that speaks it.

``openai:<model>`` posts batches to ``<embed_base_url>/embeddings`` (default
``https://api.openai.com/v1``). The OpenAI-compatible endpoints of Ollama
(``http://127.0.0.1:11434/v1``), vLLM, LM Studio and llama.cpp's server (``--embedding``) speak the same
protocol. The key is ``embed_api_key``, else ``openai_api_key``; it is required for OpenAI itself and
optional for a server of one's own.
"""

from __future__ import annotations

from typing import Any

from citeline.embed.http import RemoteEmbedder
from citeline.errors import ConfigError
from citeline.remote import base_url
from citeline.settings import Settings

DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: Where OpenAI's own models cut a text, in tokens (other servers do not say).
MAX_TOKENS = {"text-embedding-3-small": 8191, "text-embedding-3-large": 8191, "text-embedding-ada-002": 8191}


class OpenAIEmbedder(RemoteEmbedder):
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint (see the module docstring).

    Raises :class:`ConfigError` when the base URL is malformed or OpenAI's own endpoint is used without
    a key, and the errors of :class:`~citeline.embed.http.RemoteEmbedder` when the probe request fails.
    """

    path = "/embeddings"

    def __init__(self, model: str, settings: Settings) -> None:
        model_id = f"openai:{model}"
        base = base_url(model_id, settings.embed_base_url or DEFAULT_BASE_URL, "embed_base_url")
        key = settings.embed_api_key or settings.openai_api_key
        if key is None and base == DEFAULT_BASE_URL:
            raise ConfigError(
                f"{model_id} needs an API key: set CITELINE_EMBED_API_KEY (or CITELINE_OPENAI_API_KEY), "
                "or set CITELINE_EMBED_BASE_URL to an OpenAI-compatible server that needs none"
            )
        key_setting = "CITELINE_EMBED_API_KEY" if settings.embed_api_key else "CITELINE_OPENAI_API_KEY"
        super().__init__(
            model_id,
            model,
            base,
            settings,
            key=key,
            key_setting=key_setting,
            max_tokens=MAX_TOKENS.get(model, 0),
        )

    def body(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": texts, "encoding_format": "float"}

    def vectors(self, reply: Any, count: int) -> list[Any]:
        # Each item names the input it embeds; the API does not promise they come in order.
        items = sorted(reply["data"], key=lambda item: int(item["index"]))
        if [int(item["index"]) for item in items] != list(range(count)):
            raise ValueError(f"the reply's indices are not 0 to {count - 1}")
        return [item["embedding"] for item in items]
