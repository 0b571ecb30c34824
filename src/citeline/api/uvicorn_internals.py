"""The uvicorn internals ``citeline serve`` builds on, and the check that the installed uvicorn has them.

:class:`citeline.api.protocol.HttpProtocol` overrides hooks of uvicorn's ``HttpToolsProtocol`` and
:class:`citeline.api.supervisor.Supervisor` those of its ``Multiprocess``; both read attributes uvicorn
sets on itself. None of this is uvicorn's public API. A release that renames a hook does not fail: the
override is simply no longer called, and the server goes on without the limits it enforced. So
pyproject.toml pins the uvicorn these were written and tested against (:data:`TESTED`), and ``citeline
serve`` refuses to start, naming what is missing, on a uvicorn that lacks any of them (installed by hand
past the pin, say).
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version

from citeline.errors import ConfigError

#: The uvicorn releases the subclasses were checked against, as pyproject.toml pins them.
TESTED = ">=0.54,<0.55"


@dataclass(frozen=True)
class Uses:
    """What a subclass relies on in one uvicorn class: the methods it overrides or calls, the
    properties it reads, and the attributes uvicorn sets on its instances, by the method of uvicorn's
    that sets them."""

    owner: type
    methods: Sequence[str]
    properties: Sequence[str] = ()
    attributes: Mapping[str, Sequence[str]] = field(default_factory=dict)


def missing(uses: Uses) -> list[str]:
    """What of ``uses`` its class lacks, as ``Class.name``: a method, or an attribute no longer named
    by the method that set it (read from the method's compiled code, which lists every attribute it
    reads or sets)."""
    name = uses.owner.__name__
    gone = [f"{name}.{m}" for m in uses.methods if not callable(getattr(uses.owner, m, None))]
    gone += [f"{name}.{p}" for p in uses.properties if not isinstance(getattr(uses.owner, p, None), property)]
    for method, attributes in uses.attributes.items():
        function = getattr(uses.owner, method, None)
        if not isinstance(function, types.FunctionType):
            gone.append(f"{name}.{method}")
            continue
        named = set(function.__code__.co_names)
        gone += [f"{name}.{a} (set in {method})" for a in attributes if a not in named]
    return gone


def check(uses: Iterable[Uses]) -> None:
    """Refuse a uvicorn that lacks what ``uses`` names, saying what and which uvicorn to install."""
    gone = [item for u in uses for item in missing(u)]
    if gone:
        raise ConfigError(
            f"citeline serve cannot run on the installed uvicorn {version('uvicorn')}: it builds on "
            f"uvicorn internals that this release lacks ({', '.join(gone)}); install uvicorn{TESTED} "
            "as pyproject.toml pins it (make install)"
        )


def check_installed() -> None:
    """:func:`check` of everything ``citeline serve`` overrides in the installed uvicorn."""
    try:
        from citeline.api import protocol, supervisor
    except ImportError as exc:  # a module or name of uvicorn's that the subclasses import is gone
        raise ConfigError(
            f"citeline serve cannot run on the installed uvicorn {version('uvicorn')}: {exc}; install "
            f"uvicorn{TESTED} as pyproject.toml pins it (make install)"
        ) from exc
    check((*protocol.UVICORN_USES, *supervisor.UVICORN_USES))
