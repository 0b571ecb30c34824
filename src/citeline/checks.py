"""Checks every request makes of the text a caller gives it, whichever shell it comes through.

A NUL character (``\\x00``) is refused in any text a request carries: PostgreSQL can neither store
nor compare one, so it would otherwise fail the request deep in the store, as the database's error
rather than the caller's malformed request. So is a lone surrogate, which is no character, in the
labels, names and questions of a request (a file's name or text is cleaned instead: see
:mod:`citeline.load.clean`). The request types (:class:`~citeline.retrieve.filters.Filters`,
:class:`~citeline.ingest.IngestOptions`, ...) and :class:`~citeline.engine.Citeline`'s entry points
call :func:`refuse_nul`; the API calls :func:`nul_at` too, to refuse a body by its own field names
before it is turned into a request.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from collections.abc import Mapping, Set
from typing import Any

from citeline.errors import InvalidRequestError
from citeline.load.clean import LONE_SURROGATES

#: Why a text is refused, after the name of the field that holds it.
NUL_MESSAGE = "must not contain a NUL (0x00) character"
#: A lone UTF-16 surrogate (from a Python caller, or a JSON ``"\ud800"`` escape) is no character: it
#: cannot be encoded as UTF-8, so the database connection cannot send it.
SURROGATE_MESSAGE = "must not contain a lone surrogate (U+D800 to U+DFFF), which is not a character"


def nul_at(value: Any, where: str = "", *, dotted: bool = False, surrogates: bool = False) -> str | None:
    """Where in ``value`` a text holds a NUL character, as a path from ``where`` (``where`` itself
    when ``value`` is such a text), or None when none does.

    ``value`` may be a text or hold texts: a mapping (a key is a text too), a list or tuple, a set (the
    path names the set: its items have no place), a dataclass. Items are named ``[0]`` and
    ``['key']``, fields ``.name``; ``dotted`` names items ``.0`` and ``.key``, as a JSON body's
    fields are named (``metadata.site``).
    """
    steps = _nul_steps(value, surrogates)
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


def _unstorable(text: str) -> bool:
    return "\x00" in text or (not text.isascii() and LONE_SURROGATES.search(text) is not None)


def _nul_steps(value: Any, surrogates: bool = True) -> list[object] | None:
    """The steps from ``value`` to a text holding a NUL character or a lone surrogate, last step first
    (paths are named only once one is found: a bulk load checks every chunk), or None when no text
    holds one."""
    if isinstance(value, str):
        return [] if ("\x00" in value or (surrogates and _unstorable(value))) else None
    found: list[object] | None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if (found := _nul_steps(item, surrogates)) is not None:
                found.append(index)
                return found
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and ("\x00" in key or (surrogates and _unstorable(key))):
                return [key]
            if (found := _nul_steps(item, surrogates)) is not None:
                found.append(key)
                return found
    elif isinstance(value, Set):
        return [] if any(_nul_steps(item, surrogates) is not None for item in value) else None
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for name in _field_names(type(value)):
            if (found := _nul_steps(getattr(value, name), surrogates)) is not None:
                found.append(_Field(name))
                return found
    return None


@functools.cache
def _field_names(cls: type[Any]) -> tuple[str, ...]:
    # Cached: a bulk load checks every chunk of every document, and fields() builds its tuple per call.
    return tuple(field.name for field in dataclasses.fields(cls))


def refuse_nul(value: Any, field: str, *, surrogates: bool = True) -> None:
    """Raise :class:`InvalidRequestError` naming where in ``value`` (the request's ``field``) a text
    holds a NUL character, ``filters.tags_any[0]: must not contain a NUL (0x00) character``, or a lone
    surrogate (:data:`SURROGATE_MESSAGE`), unless ``surrogates`` is False: for texts that are cleaned
    rather than refused (a file name that is not UTF-8, text given to be indexed)."""
    where = nul_at(value, field, surrogates=surrogates)
    if where is not None:
        raise InvalidRequestError(f"{where}: {_message(value)}")


def _message(value: Any) -> str:
    # Which of the two the text holds: a NUL, unless the only unstorable texts hold surrogates.
    return NUL_MESSAGE if _holds(value, "\x00") else SURROGATE_MESSAGE


def _holds(value: Any, character: str) -> bool:
    if isinstance(value, str):
        return character in value
    if isinstance(value, Mapping):
        return any(_holds(k, character) or _holds(v, character) for k, v in value.items())
    if isinstance(value, list | tuple | Set):
        return any(_holds(item, character) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_holds(getattr(value, name), character) for name in _field_names(type(value)))
    return False


def check_names(value: object, field: str, what: str) -> None:
    """Refuse ``value`` unless it is None or a list (tuple, set) of strings: the request's ``field``,
    naming ``what`` it lists (``scopes``). A string is itself a sequence of strings, so
    ``scopes="guide"`` would be the scopes g, u, i, d and e."""
    if value is None:
        return
    if isinstance(value, str | bytes):
        raise InvalidRequestError(f"{field}: give a list of {what}, not the string {value!r}")
    if not isinstance(value, list | tuple | Set):
        raise InvalidRequestError(f"{field}: give a list of {what}, not {value!r}")
    for item in value:
        if not isinstance(item, str):
            raise InvalidRequestError(f"{field}: a {what.rstrip('s')} must be a string, got {item!r}")


def check_text(value: object, field: str) -> None:
    """Refuse ``value`` unless it is None or a string."""
    if value is not None and not isinstance(value, str):
        raise InvalidRequestError(f"{field}: give a string, not {value!r}")


def check_mapping(value: object, field: str) -> None:
    """Refuse ``value`` unless it is None or a mapping (its values are checked where they are used)."""
    if value is not None and not isinstance(value, Mapping):
        raise InvalidRequestError(f"{field}: give a mapping of names to strings, not {value!r}")


def check_number(value: object, field: str, *, whole: bool) -> None:
    """Refuse ``value`` unless it is None or a number (a whole one, with ``whole``): ``"10"`` would
    fail later as a bare TypeError, ``True`` be taken for 1, and 2.5 cut chunks of a fractional size."""
    if value is None:
        return
    kind = numbers.Integral if whole else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InvalidRequestError(f"{field}: give a {'whole number' if whole else 'number'}, not {value!r}")
