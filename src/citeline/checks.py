"""Checks every request makes of the text a caller gives it, whichever shell it comes through.

A NUL character (``\\x00``) is refused in any text a request carries: PostgreSQL can neither store
nor compare one, so it would otherwise fail the request deep in the store, as the database's error
rather than the caller's malformed request. The request types (:class:`~citeline.retrieve.filters.Filters`,
:class:`~citeline.ingest.IngestOptions`, ...) and :class:`~citeline.engine.Citeline`'s entry points
call :func:`refuse_nul`; the API calls :func:`nul_at` too, to refuse a body by its own field names
before it is turned into a request.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Set
from typing import Any

from citeline.errors import InvalidRequestError

#: Why a text is refused, after the name of the field that holds it.
NUL_MESSAGE = "must not contain a NUL (0x00) character"


def nul_at(value: Any, where: str = "", *, dotted: bool = False) -> str | None:
    """Where in ``value`` a text holds a NUL character, as a path from ``where`` (``where`` itself
    when ``value`` is such a text), or None when none does.

    ``value`` may be a text or hold texts: a mapping (a key is a text too), a list or tuple, a set (the
    path names the set: its items have no place), a dataclass. Items are named ``[0]`` and
    ``['key']``, fields ``.name``; ``dotted`` names items ``.0`` and ``.key``, as a JSON body's
    fields are named (``metadata.site``).
    """
    steps = _nul_steps(value)
    if steps is None:
        return None
    for step in reversed(steps):
        if isinstance(step, _Field):
            where = f"{where}.{step.name}" if where else step.name
        elif dotted:
            where = f"{where}.{step}" if where else str(step)
        else:
            where = f"{where}[{step!r}]"
    return where


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str


def _nul_steps(value: Any) -> list[object] | None:
    """The steps from ``value`` to a text holding a NUL character, last step first (paths are named
    only once one is found: a bulk load checks every chunk), or None when no text holds one."""
    if isinstance(value, str):
        return [] if "\x00" in value else None
    found: list[object] | None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if (found := _nul_steps(item)) is not None:
                found.append(index)
                return found
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                return [key]
            if (found := _nul_steps(item)) is not None:
                found.append(key)
                return found
    elif isinstance(value, Set):
        return [] if any(_nul_steps(item) is not None for item in value) else None
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for name in _field_names(type(value)):
            if (found := _nul_steps(getattr(value, name))) is not None:
                found.append(_Field(name))
                return found
    return None


@functools.cache
def _field_names(cls: type[Any]) -> tuple[str, ...]:
    # Cached: a bulk load checks every chunk of every document, and fields() builds its tuple per call.
    return tuple(field.name for field in dataclasses.fields(cls))


def refuse_nul(value: Any, field: str) -> None:
    """Raise :class:`InvalidRequestError` naming where in ``value`` (the request's ``field``) a text
    holds a NUL character: ``filters.tags_any[0]: must not contain a NUL (0x00) character``."""
    where = nul_at(value, field)
    if where is not None:
        raise InvalidRequestError(f"{where}: {NUL_MESSAGE}")
