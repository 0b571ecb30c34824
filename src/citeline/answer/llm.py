"""The LLM protocol: one small interface every answering model implements.

A provider is chosen by a ``provider:model`` string (``local:qwen2.5-coder-0.5b-instruct``,
``openai:gpt-4o-mini``, ``anthropic:claude-3-5-haiku-latest``) and declared in :data:`LLMS` (the
built-in ones in :mod:`citeline.answer.providers`); adding one touches no other module.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from citeline.registry import Registry
from citeline.settings import Settings

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    """One chat message."""

    role: Role
    content: str


@dataclass(frozen=True)
class AnswerShape:
    """The form a cited answer takes, for providers that can hold their output to it (local models).

    One to ``sentences`` sentences, each ending with a full stop followed by the number of a given
    passage in brackets (``... within seconds. [2]``, numbers 1 to ``passages``), separated by spaces,
    and not opening with ``not_opening``; or exactly ``refusal``. Providers that cannot constrain their
    output ignore it.
    """

    passages: int
    sentences: int = 3
    refusal: str = ""
    not_opening: str = ""


@dataclass(frozen=True)
class GenerationOptions:
    """Per-call generation knobs; defaults come from the settings. ``shape``: see :class:`AnswerShape`."""

    temperature: float = 0.0
    max_tokens: int = 512
    timeout: float = 120.0
    shape: AnswerShape | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> GenerationOptions:
        return cls(
            temperature=settings.llm_temperature,
            max_tokens=settings.llm_max_tokens,
            timeout=settings.llm_timeout,
        )


@runtime_checkable
class LLM(Protocol):
    """A chat model that streams text.

    ``stream`` yields text pieces as the model produces them; joining them gives the whole reply.
    It raises :class:`citeline.errors.GenerationError` (naming the provider) when the model cannot be
    reached or fails mid-way.
    """

    model_id: str

    def stream(self, messages: Sequence[Message], options: GenerationOptions) -> Iterator[str]: ...

    def close(self) -> None: ...


def complete(llm: LLM, messages: Sequence[Message], options: GenerationOptions) -> str:
    """The whole reply at once."""
    return "".join(llm.stream(messages, options))


#: The answering-model providers; ``extractive`` (answers without a model) is a setting, not a provider.
LLMS: Registry[LLM] = Registry("LLM", builtins="citeline.answer.providers", reserved=("extractive",))


def get_llm(spec: str, settings: Settings) -> LLM:
    """The LLM named by ``spec`` (``provider:model``), built from ``settings``.

    Raises :class:`ConfigError` for an unknown provider or model (see :meth:`Registry.parse`).
    """
    return LLMS.build(spec, settings)
