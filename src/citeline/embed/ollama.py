"""The ``ollama`` embedding provider: Ollama's native API, ``POST /api/embed``.

``ollama:<model>`` (``ollama:nomic-embed-text``) posts batches of texts as ``input`` to
``<embed_base_url>/api/embed`` (default ``http://127.0.0.1:11434``, a local Ollama) and reads the
``embeddings`` of the reply. Ollama cuts a text longer than the model's context (``truncate``). Ollama
itself needs no key; ``embed_api_key``, when set, is sent as a bearer token for a proxy in front of it.
Ollama's OpenAI-compatible endpoint works too, through ``openai:`` with
``CITELINE_EMBED_BASE_URL=http://127.0.0.1:11434/v1``; the two name different vector spaces in the store
(``ollama:...`` and ``openai:...``), so pick one.
"""

from __future__ import annotations

from typing import Any

from citeline.embed.http import RemoteEmbedder
from citeline.remote import base_url
from citeline.settings import Settings

DEFAULT_BASE_URL = "http://127.0.0.1:11434"


class OllamaEmbedder(RemoteEmbedder):
    """Embeddings from Ollama's ``/api/embed`` (see the module docstring).

    Raises :class:`~citeline.errors.ConfigError` when the base URL is malformed, and the errors of
    :class:`~citeline.embed.http.RemoteEmbedder` when the probe request fails.
    """

    path = "/api/embed"

    def __init__(self, model: str, settings: Settings) -> None:
        model_id = f"ollama:{model}"
        base = base_url(model_id, settings.embed_base_url or DEFAULT_BASE_URL, "embed_base_url")
        super().__init__(
            model_id, model, base, settings, key=settings.embed_api_key, key_setting="CITELINE_EMBED_API_KEY"
        )

    def body(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": texts, "truncate": True}

    def vectors(self, reply: Any, count: int) -> list[Any]:
        embeddings = reply["embeddings"]
        if not isinstance(embeddings, list):
            raise TypeError(f"embeddings is {type(embeddings).__name__}, not a list")
        return embeddings
