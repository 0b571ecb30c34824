"""What every JSON request body of the API shares, so each route refuses the same mistakes the same way.

- A field the route does not take is refused, not ignored: a misspelt filter (``scope`` for
  ``scopes``) would otherwise run a wider search than the client asked for, without a word.
- A scope is never empty or blank: ``""`` names no scope anyone can hold, so a document or key
  labelled with it would silently mean something else than the client meant.
- Metadata values are strings, because they are stored and compared as strings (docs/scopes.md):
  a number stored as a JSON number would never match a filter, which always compares strings.
- A number is a JSON number: ``"top_k": true`` is not a count of one, nor ``"mmr_lambda": true`` a
  weight of 1.0 (pydantic would take both), and ``"top_k": "5"`` is a string, refused as such.
- A flag (a boolean field) is JSON ``true`` or ``false``: pydantic would read ``"yes"``, ``"off"``,
  ``1`` or ``"false"`` as a boolean too, and a client that sends ``"dry_run": "False"`` or
  ``"index": 0`` has a form's habits, not the API's. Every boolean field of every body is checked, so a
  flag a route adds later cannot be lax by forgetting to say so.
- No text holds a NUL character (``\\u0000``): PostgreSQL can neither store nor compare one. The
  library's request types refuse one too (:mod:`citeline.checks`), under their own field names; the
  body is checked as it is parsed, by the same rule, so that the 422 names the field as the client
  sent it (``tags.0``) and covers fields that never reach the library as text.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from citeline.checks import NUL_MESSAGE, nul_at

Body = TypeVar("Body", bound="RequestBody")

#: The annotations of a flag: a ``list[bool]`` is not one (its items would need checking, not it).
_FLAG: tuple[object, ...] = (bool, bool | None)


class RequestBody(BaseModel):
    """The base of every JSON request body: unknown fields are a 422 naming them, and so are a text
    holding a NUL character and a boolean field given anything but ``true`` or ``false``."""

    model_config = ConfigDict(extra="forbid")

    #: The names of this body's boolean fields (``bool`` or ``bool | None``).
    _flags: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._flags = frozenset(name for name, field in cls.model_fields.items() if field.annotation in _FLAG)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_flag(cls, value: Any, info: ValidationInfo) -> Any:
        # A before-validator, not Strict() on each field: it covers every subclass's flags, and the
        # error is the field's own, so the 422 names it (``body.dry_run``) as it names a number's.
        if info.field_name in cls._flags and value is not None and not isinstance(value, bool):
            raise PydanticCustomError("bool_type", "Input should be a valid boolean, JSON true or false")
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        where = nul_at(data, dotted=True)
        if where is not None:
            field = where or "the body"
            raise PydanticCustomError("nul_character", "{field} " + NUL_MESSAGE, {"field": field})
        return data


def _not_blank(scope: str) -> str:
    if not scope.strip():
        raise PydanticCustomError("blank_scope", "a scope must not be empty or blank")
    return scope


#: A scope name as a request gives it (a body field's item or a query parameter).
Scope = Annotated[str, AfterValidator(_not_blank)]


def _has_text(text: str) -> str:
    if not text.strip():
        raise PydanticCustomError("blank_text", "must not be empty or blank")
    return text


#: A query or a question: refused here when blank, so the 422 names the field (``body.query``), where
#: the library's own refusal ("the search query is empty") names none.
Text = Annotated[str, AfterValidator(_has_text)]

#: Metadata labels: string keys and string values.
Metadata = dict[str, str]

#: A count or a size: a JSON integer, never a boolean or a string.
Count = Annotated[int, Strict()]

#: A weight or a distance: a JSON number (an integer too), never a boolean or a string.
Number = Annotated[float, Strict()]


async def json_body(request: Request, model: type[Body]) -> Body:
    """``request``'s JSON body as ``model``, for a route that cannot declare its body (it also takes
    other content types). Invalid JSON or fields are a :class:`RequestValidationError`, answered
    exactly as FastAPI answers a declared body's: 422 ``invalid_request`` naming each field."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        problems = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)]
        raise RequestValidationError(problems) from exc
