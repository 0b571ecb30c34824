"""Embed: texts -> unit vectors, through a provider chosen by a ``provider:model`` string.

Built-in providers (declared in :mod:`citeline.embed.providers`): ``onnx:`` (packaged models, local),
``openai:`` (OpenAI and OpenAI-compatible servers), ``ollama:`` (Ollama's native API) and
``sentence-transformers:`` (a local model folder, with the ``sentence-transformers`` extra).
"""

from citeline.embed.base import EMBEDDERS, Embedder, get_embedder

__all__ = ["EMBEDDERS", "Embedder", "get_embedder"]
