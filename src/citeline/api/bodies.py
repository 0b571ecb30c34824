"""What every JSON request body of the API shares, so each route refuses the same mistakes the same way.

- A field the route does not take is refused, not ignored: a misspelt filter (``scope`` for
  ``scopes``) would otherwise run a wider search than the client asked for, without a word.
- A scope is never empty or blank: ``""`` names no scope anyone can hold, so a document or key
  labelled with it would silently mean something else than the client meant.
- Metadata values are strings, because they are stored and compared as strings (docs/scopes.md):
  a number stored as a JSON number would never match a filter, which always compares strings.
- No text holds a NUL character (``\\u0000``): PostgreSQL can neither store nor compare one, so it
  would otherwise fail the request deep in the store (a 500) instead of naming the field (a 422).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

Body = TypeVar("Body", bound="RequestBody")


NUL_MESSAGE = "must not contain a NUL (0x00) character"


def nul_at(value: Any, where: str = "") -> str | None:
    """Where in ``value`` (a JSON value: text, list, object) a text holds a NUL character, as a dotted
    path (``metadata.site``; ``""`` for ``value`` itself), or None when none does."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        inner = f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and "\x00" in key:
            return inner
        found = nul_at(item, inner)
        if found is not None:
            return found
    return None


class RequestBody(BaseModel):
    """The base of every JSON request body: unknown fields are a 422 naming them, and so is a text
    holding a NUL character."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        where = nul_at(data)
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

#: Metadata labels: string keys and string values.
Metadata = dict[str, str]


async def json_body(request: Request, model: type[Body]) -> Body:
    """``request``'s JSON body as ``model``, for a route that cannot declare its body (it also takes
    other content types). Invalid JSON or fields are a :class:`RequestValidationError`, answered
    exactly as FastAPI answers a declared body's: 422 ``invalid_request`` naming each field."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        problems = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)]
        raise RequestValidationError(problems) from exc
