"""Embed: texts -> unit vectors, through a provider chosen by a ``provider:model`` string.

Each provider module registers itself on import; the built-in ones are imported here.
"""

from citeline.embed import onnx as _onnx  # noqa: F401  (registers the onnx provider)
from citeline.embed.base import Embedder, get_embedder, register_provider

__all__ = ["Embedder", "get_embedder", "register_provider"]
