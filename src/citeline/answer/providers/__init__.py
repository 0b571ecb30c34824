"""The built-in answering-model providers, declared in :data:`~citeline.answer.llm.LLMS`.

Each ``build`` imports its module when a model of it is first asked for, so importing this package
loads no model runtime.
"""

from __future__ import annotations

from citeline.answer.llm import LLM, LLMS
from citeline.answer.providers.local import MODELS as LOCAL_MODELS
from citeline.registry import Capability, Provider
from citeline.settings import Settings

#: Packaged local models under 1B parameters, too small to rewrite follow-ups well: the 0.5B one cost
#: ~4 s per follow-up here and had 1 of 4 rewrites accepted (see the follow_up_rewrite setting).
SMALL_LOCAL_MODELS = frozenset({"qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct"})

_REWRITES = frozenset({Capability.FOLLOW_UP_REWRITE})


def _local(model: str, settings: Settings) -> LLM:
    from citeline.answer.providers.local import LocalLLM

    return LocalLLM(model, settings)


def _openai(model: str, settings: Settings) -> LLM:
    from citeline.answer.providers.openai import OpenAIChat

    return OpenAIChat(model, settings)


def _anthropic(model: str, settings: Settings) -> LLM:
    from citeline.answer.providers.anthropic import AnthropicChat

    return AnthropicChat(model, settings)


LLMS.register(
    Provider(
        "local",
        build=_local,
        about="a GGUF model run on this machine by llama.cpp: a packaged one, or a .gguf path",
        example="local:qwen2.5-coder-0.5b-instruct",
        models={name: frozenset() if name in SMALL_LOCAL_MODELS else _REWRITES for name in LOCAL_MODELS},
        capabilities=_REWRITES,
    )
)
LLMS.register(
    Provider(
        "openai",
        build=_openai,
        about="OpenAI's chat completions, or an OpenAI-compatible server (Ollama, vLLM, llama.cpp)",
        example="openai:gpt-4o-mini",
        capabilities=_REWRITES,
        settings=("llm_base_url", "openai_api_key"),
    )
)
LLMS.register(
    Provider(
        "anthropic",
        build=_anthropic,
        about="Anthropic's Messages API, or a compatible server",
        example="anthropic:claude-3-5-haiku-latest",
        capabilities=_REWRITES,
        settings=("anthropic_base_url", "anthropic_api_key"),
    )
)
