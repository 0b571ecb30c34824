"""The built-in embedding providers, declared in :data:`~citeline.embed.base.EMBEDDERS`.

Each ``build`` imports its module when a model of it is first asked for, so a process pays only for
the provider it uses.
"""

from __future__ import annotations

from citeline.embed.base import EMBEDDERS, Embedder
from citeline.registry import Provider
from citeline.settings import Settings

#: The settings every remote embedding provider reads (besides the batch size).
_REMOTE_SETTINGS = ("embed_base_url", "embed_api_key", "embed_timeout", "embed_retries", "embed_retry_delay")


def _onnx(model: str, settings: Settings) -> Embedder:
    from citeline.embed.onnx import OnnxEmbedder

    return OnnxEmbedder(model, batch_size=settings.embed_batch_size, threads=settings.embed_threads)


def _openai(model: str, settings: Settings) -> Embedder:
    from citeline.embed.openai import OpenAIEmbedder

    return OpenAIEmbedder(model, settings)


def _ollama(model: str, settings: Settings) -> Embedder:
    from citeline.embed.ollama import OllamaEmbedder

    return OllamaEmbedder(model, settings)


def _sentence_transformers(model: str, settings: Settings) -> Embedder:
    from citeline.embed.sentence_transformers import SentenceTransformersEmbedder

    return SentenceTransformersEmbedder(model, settings)


EMBEDDERS.register(
    Provider(
        "onnx",
        build=_onnx,
        # The packaged models named here, not read from embed/onnx.py: importing it costs every command
        # a tenth of a second (tests/embed keep the two lists in step).
        about="packaged sentence-transformer models run on this machine by onnxruntime: all-MiniLM-L6-v2 "
        "(the default) or paraphrase-MiniLM-L3-v2",
        example="onnx:all-MiniLM-L6-v2",
    )
)
EMBEDDERS.register(
    Provider(
        "openai",
        build=_openai,
        about="OpenAI's embeddings API, or an OpenAI-compatible server (Ollama, vLLM, LM Studio, llama.cpp)",
        example="openai:text-embedding-3-small",
        settings=(*_REMOTE_SETTINGS, "openai_api_key"),
    )
)
EMBEDDERS.register(
    Provider(
        "ollama",
        build=_ollama,
        about="Ollama's native embedding API (/api/embed)",
        example="ollama:nomic-embed-text",
        settings=_REMOTE_SETTINGS,
    )
)
EMBEDDERS.register(
    Provider(
        "sentence-transformers",
        build=_sentence_transformers,
        about="a local sentence-transformers model folder, run on torch",
        example="sentence-transformers:/models/all-MiniLM-L6-v2",
        placeholder="folder",
        extra="sentence-transformers",
    )
)
