"""Built-in LLM providers. Each module registers one ``provider:`` prefix."""

from __future__ import annotations

from citeline.answer.llm import LLM, register_llm_provider
from citeline.settings import Settings


def _local(model: str, settings: Settings) -> LLM:
    from citeline.answer.providers.local import LocalLLM

    return LocalLLM(model, settings)


def _openai(model: str, settings: Settings) -> LLM:
    from citeline.answer.providers.openai import OpenAIChat

    return OpenAIChat(model, settings)


def _anthropic(model: str, settings: Settings) -> LLM:
    from citeline.answer.providers.anthropic import AnthropicChat

    return AnthropicChat(model, settings)


def register_builtins() -> None:
    """Register every built-in provider (imports stay inside each factory)."""
    register_llm_provider("local", _local)
    register_llm_provider("openai", _openai)
    register_llm_provider("anthropic", _anthropic)
