"""Named search configurations for ``citeline eval --compare``.

A configuration is a name and the settings it overrides, e.g. ``rrf -> {"fusion": "rrf"}``. Its settings
are validated by :class:`~citeline.settings.Settings` itself, so a configuration that names a setting
works as soon as that setting exists, and nothing here duplicates the settings' rules. Only settings read
at search time may differ, with one exception: ``vector_backend``. Configurations that name another
backend than the open store's are evaluated on a store of their own, the same corpus ingested into the
namespace :func:`backend_namespace` names, so that backends compare query by query like any two settings.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from citeline.errors import ConfigError, InvalidRequestError
from citeline.settings import Settings

#: The built-in configurations. ``default`` is the current settings unchanged.
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "rrf": {"fusion": "rrf"},
    "weighted": {"fusion": "weighted"},
    "dbsf": {"fusion": "dbsf"},
    # Weighted fusion with one weight left is that ranking alone: cosine similarity over all candidates.
    "dense": {"fusion": "weighted", "weight_semantic": 1.0, "weight_keyword": 0.0, "weight_source": 0.0},
    # BM25 alone. Dense-only candidates score 0 and trail every keyword match (see docs/evaluation.md).
    "keyword": {"fusion": "weighted", "weight_semantic": 0.0, "weight_keyword": 1.0, "weight_source": 0.0},
    # The keyword side as whole-document BM25 instead of chunk BM25, at the same weight.
    "doc": {"weight_keyword": 0.0, "weight_document": 0.2},
    # The same, each of the best documents bringing its first 8 chunks into the candidates.
    "doc-chunks": {"weight_keyword": 0.0, "weight_document": 0.2, "document_chunks": 8},
    "rerank": {"reranker": "maxsim"},
    "mmr": {"mmr_lambda": 0.7},
}

#: Settings fixed when the corpus is stored or the store is opened; a comparison cannot vary them.
FIXED_SETTINGS = frozenset({"data_dir", "database_url", "namespace", "chunk_size", "chunk_overlap"})
#: Settings a comparison may vary by giving a configuration a store of its own (see the module's docstring).
STORE_SETTINGS = frozenset({"vector_backend"})
#: Whole families of fixed settings: the embedding model and its runtime, the keyword index and its
#: analyzer (a namespace is searched with the analyzer it was indexed with), and Chroma's connection.
FIXED_PREFIXES = ("embed", "keyword_", "chroma_")


def is_fixed(setting: str) -> bool:
    """Whether ``setting`` is decided by the stored corpus or the open store, not per search."""
    return setting in FIXED_SETTINGS or setting.startswith(FIXED_PREFIXES)


@dataclass(frozen=True)
class Config:
    """One named configuration: its overrides as given and the full settings they produce."""

    name: str
    overrides: Mapping[str, Any]
    settings: Settings = field(repr=False)

    def describe(self) -> dict[str, Any]:
        """The overridden settings with their validated values, JSON-ready."""
        return self.settings.model_dump(mode="json", include=set(self.overrides))


def backend_namespace(namespace: str, backend: str) -> str:
    """The namespace holding the corpus of ``namespace`` for configurations on another vector backend."""
    return f"{namespace}_{backend}"


def missing_settings(overrides: Mapping[str, Any]) -> list[str]:
    """The keys of ``overrides`` that are not settings of this version of citeline."""
    return [key for key in overrides if key not in Settings.model_fields]


def available_configs() -> list[str]:
    """Built-in configuration names whose settings all exist in this version."""
    return [name for name, overrides in CONFIGS.items() if not missing_settings(overrides)]


def _names_hint() -> str:
    hint = f"valid configurations: {', '.join(available_configs())}"
    waiting = [name for name, overrides in CONFIGS.items() if missing_settings(overrides)]
    if waiting:
        hint += f" ({', '.join(waiting)} need settings this version lacks)"
    return hint + "; or define one as name=key:value;key:value"


def _settings_hint(unknown: str) -> str:
    """The closest setting a configuration may set, and all of them: the names it was meant to be."""
    allowed = [key for key in Settings.model_fields if not is_fixed(key)]
    close = difflib.get_close_matches(unknown, allowed, n=1)
    names = ", ".join(allowed)
    if close:
        return f"; did you mean {close[0]!r}? Settings a configuration may set: {names}"
    return f"; settings a configuration may set: {names}"


def make_config(name: str, overrides: Mapping[str, Any], base: Settings) -> Config:
    """``base`` with ``overrides`` applied and validated; errors name the configuration and the setting."""
    unknown = missing_settings(overrides)
    if unknown:
        raise InvalidRequestError(
            f"configuration {name!r} sets {', '.join(map(repr, unknown))}, which "
            f"{'is not a setting' if len(unknown) == 1 else 'are not settings'} of this citeline"
            + _settings_hint(unknown[0])
        )
    fixed = sorted(key for key in overrides if is_fixed(key))
    if fixed:
        raise InvalidRequestError(
            f"configuration {name!r} sets {', '.join(fixed)}, which is fixed when the corpus is stored or "
            "the store is opened; every configuration of a comparison searches the same stored corpus. "
            "Run a separate evaluation with --namespace instead."
        )
    try:
        settings = Settings.model_validate({**base.model_dump(), **overrides})
    except ConfigError as exc:
        # Named by the configuration's keys (weight_keyword), not by their variables as Settings names them.
        invalid = exc.__cause__
        reasons = (
            "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in invalid.errors())
            if isinstance(invalid, ValidationError)
            else str(exc)
        )
        raise InvalidRequestError(f"configuration {name!r} is invalid: {reasons}") from exc
    return Config(name, dict(overrides), settings)


def parse_configs(spec: str, base: Settings) -> list[Config]:
    """Configurations from ``--compare``: comma-separated built-in names or ``name=key:value;key:value``.

    Values are strings that the settings convert (``weight_keyword:0.3``, ``fusion:rrf``).
    """
    configs: list[Config] = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, sep, body = item.partition("=")
        name = name.strip()
        if not name:
            raise InvalidRequestError(f"configuration {item!r} has no name; write name=key:value;key:value")
        if sep:
            overrides: dict[str, Any] = {}
            for pair in (p.strip() for p in body.split(";")):
                key, colon, value = pair.partition(":")
                if not colon or not key.strip():
                    raise InvalidRequestError(
                        f"configuration {name!r}: {pair!r} is not key:value (write name=key:value;key:value)"
                    )
                key = key.strip()
                if key in overrides:
                    raise InvalidRequestError(
                        f"configuration {name!r} sets {key!r} twice ({overrides[key]!r}, then "
                        f"{value.strip()!r}); give each setting once"
                    )
                overrides[key] = value.strip()
        elif name in CONFIGS:
            overrides = CONFIGS[name]
        else:
            raise InvalidRequestError(f"unknown configuration {name!r}; " + _names_hint())
        if any(c.name == name for c in configs):
            raise InvalidRequestError(f"configuration {name!r} is named twice in {spec!r}")
        config = make_config(name, overrides, base)
        if sep and name in CONFIGS:
            _check_not_redefined(config, base)
        configs.append(config)
    if not configs:
        raise InvalidRequestError(f"--compare {spec!r} names no configuration; " + _names_hint())
    return configs


def _check_not_redefined(config: Config, base: Settings) -> None:
    """Refuse a defined configuration that takes a built-in's name for other settings: its rows would
    read as the built-in's. Spelling out the built-in's own settings is allowed (docs do it)."""
    builtin = CONFIGS[config.name]
    try:
        same = make_config(config.name, builtin, base).settings == config.settings
    except InvalidRequestError:
        same = False
    if not same:
        settings = ";".join(f"{key}:{value}" for key, value in builtin.items()) or "the current settings"
        raise InvalidRequestError(
            f"configuration {config.name!r} is a built-in configuration ({settings}); "
            "pick another name for the one you define"
        )
