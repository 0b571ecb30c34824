"""Providers chosen by ``provider:model`` strings: one shape for embedders, answering models and rerankers.

Every pluggable part is named the same way: a provider, a colon, and the model it should run
(``onnx:all-MiniLM-L6-v2``, ``openai:text-embedding-3-small``, ``local:qwen2.5-coder-0.5b-instruct``,
``cross-encoder:/models/ms-marco``). A provider declares itself once with :class:`Provider`: its name,
how to build one of its models from the settings, which models it knows and what they can do. Each
kind of part has one :class:`Registry` (``citeline.embed.EMBEDDERS``, ``citeline.answer.llm.LLMS``,
``citeline.retrieve.rerank.RERANKERS``); :meth:`Registry.parse` is the one parser of the strings, and
its errors name the string and the providers that exist.

A provider of one's own is registered the way the built-in ones are::

    EMBEDDERS.register(Provider("mine", build=MyEmbedder, about="my team's embedding service",
                                example="mine:v2"))

and is then chosen by setting ``CITELINE_EMBEDDING_MODEL=mine:v2``. A registration under a built-in
provider's name replaces it.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, Literal, TypeVar

from citeline.errors import ConfigError
from citeline.settings import Settings

T = TypeVar("T")


class Capability(StrEnum):
    """What a provider's model can be trusted with, beyond its kind's protocol."""

    FOLLOW_UP_REWRITE = "follow-up-rewrite"
    """An answering model good enough to turn follow-up questions into search queries (the
    ``follow_up_rewrite=auto`` setting asks it to)."""


@dataclass(frozen=True, slots=True)
class Spec:
    """A parsed ``provider:model`` string; ``model`` is empty for providers that take none (``prf``)."""

    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}" if self.model else self.provider


# Without slots: a slotted generic dataclass cannot be built as Provider[X](...).
@dataclass(frozen=True)
class Provider(Generic[T]):
    """One provider of a kind of part, declared once.

    ``build(model, settings)`` returns the ready part for ``model`` (the text after ``name:``); it
    raises :class:`ConfigError` for a model it does not know and the kind's own error (such as
    :class:`~citeline.errors.EmbeddingError`) when the model cannot be loaded or reached.

    - ``about``: one line saying what the provider is, shown by ``citeline providers``.
    - ``example``: a spec that works, shown in errors.
    - ``model``: whether the part after the colon is ``required`` or takes ``none`` (``prf``);
      ``placeholder`` names it in usage lines (``cross-encoder:<folder>``).
    - ``models``: the models the provider knows by name, each with its capabilities; a name not
      listed (a path, or a model a remote service serves) has ``capabilities``.
    - ``settings``: the settings ``build`` reads, so a part built once can be shared by every caller
      whose settings agree on them.
    - ``extra``: the pip extra that installs what the provider needs, if the base install lacks it
      (shown by ``citeline providers``).
    """

    name: str
    build: Callable[[str, Settings], T]
    about: str
    example: str
    model: Literal["required", "none"] = "required"
    placeholder: str = "model"
    models: Mapping[str, frozenset[Capability]] = field(default_factory=dict)
    capabilities: frozenset[Capability] = frozenset()
    settings: tuple[str, ...] = ()
    extra: str | None = None

    @property
    def usage(self) -> str:
        """How a spec of this provider is written: ``prf``, ``onnx:<model>``."""
        return self.name if self.model == "none" else f"{self.name}:<{self.placeholder}>"

    def capabilities_of(self, model: str) -> frozenset[Capability]:
        """What ``model`` of this provider can do."""
        return self.models.get(model, self.capabilities)


class Registry(Generic[T]):
    """The providers of one kind of part (``kind`` names it in errors: "embedding", "LLM", "reranker").

    ``builtins`` is a module whose import registers the built-in providers; it is imported on first
    use, so that declaring them costs nothing to a process that never looks one up, and before any
    registration of one's own, which therefore replaces a built-in of the same name. ``reserved`` are
    words a setting may hold that are no provider (``extractive``, ``none``); they are listed in
    errors so that the list of what can be written is whole.
    """

    def __init__(self, kind: str, *, builtins: str | None = None, reserved: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.reserved = reserved
        self._builtins = builtins
        self._providers: dict[str, Provider[T]] = {}
        self._lock = threading.RLock()
        self._importing = False

    def _loaded(self) -> dict[str, Provider[T]]:
        if self._builtins is not None:
            with self._lock:
                # The builtins module registers through this registry: that nested call, on the
                # importing thread, must not import it again. Other threads wait here until it is done.
                module = self._builtins
                if module is not None and not self._importing:
                    self._importing = True
                    try:
                        importlib.import_module(module)
                    finally:
                        self._importing = False
                    self._builtins = None
        return self._providers

    def register(self, provider: Provider[T]) -> None:
        """Make specs ``provider.name:<model>`` resolve to ``provider``, replacing any of that name."""
        self._loaded()[provider.name] = provider

    def remove(self, name: str) -> None:
        """Forget the provider ``name`` (no error if there is none)."""
        self._loaded().pop(name, None)

    def providers(self) -> list[Provider[T]]:
        """Every registered provider, by name."""
        return sorted(self._loaded().values(), key=lambda p: p.name)

    def parse(self, spec: str) -> tuple[Provider[T], Spec]:
        """The provider ``spec`` names and the spec's parts.

        Raises :class:`ConfigError` naming ``spec`` for an unknown provider (listing the known ones), a
        missing model, or a model given to a provider that takes none.
        """
        name, _, model = spec.strip().partition(":")
        provider = self._loaded().get(name)
        if provider is None:
            raise ConfigError(self._unknown(spec, name))
        if provider.model == "none" and model:
            raise ConfigError(
                f"{self.kind} provider {name} takes no model, got {spec!r}: write {name!r} alone"
            )
        if provider.model == "required" and not model:
            raise ConfigError(
                f"{self.kind} {spec!r} names no {provider.placeholder}: write {provider.usage}, "
                f"e.g. {provider.example}"
            )
        return provider, Spec(name, model)

    def build(self, spec: str, settings: Settings) -> T:
        """The part ``spec`` names, built by its provider from ``settings`` (see :meth:`parse`)."""
        provider, parsed = self.parse(spec)
        return provider.build(parsed.model, settings)

    def capabilities(self, spec: str) -> frozenset[Capability]:
        """What the model ``spec`` names can do (see :class:`Capability`)."""
        provider, parsed = self.parse(spec)
        return provider.capabilities_of(parsed.model)

    def _unknown(self, spec: str, name: str) -> str:
        providers = self.providers()
        known = ", ".join(sorted([*(p.usage for p in providers), *self.reserved]))
        examples = ", ".join(p.example for p in providers)
        if name:
            what = f"unknown {self.kind} provider {name!r} in {spec!r}"
        else:
            what = f"{self.kind} {spec!r} names no provider"
        return f"{what} (a spec is provider:model); known providers: {known} (e.g. {examples})"
