"""One error shape for every response that is not a success: ``{"error": {"code", "message"}}``.

The status comes from the library's error hierarchy (each :class:`CitelineError` carries its own); the
code is the error's class name in snake case without ``Error`` (``NotFoundError`` -> ``not_found``).
Unexpected exceptions are logged with their stack trace and answered with a plain 500. Every error
body carries the request's id (``error.request_id``, also the ``X-Request-ID`` header), which the log
lines for the request carry too.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from citeline.api.request_id import HEADER, current_request_id
from citeline.errors import AuthenticationError, CitelineError, InvalidRequestError, LimitExceededError

log = logging.getLogger("citeline.api")

#: Codes of the HTTP errors the framework raises itself (unknown route, wrong method, ...).
_HTTP_CODES = {
    400: "bad_request",
    401: "authentication",
    403: "access_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "limit_exceeded",
    415: "unsupported_media_type",
    416: "range_not_satisfiable",
}


def error_code(exc: CitelineError) -> str:
    """``LimitExceededError`` -> ``limit_exceeded``."""
    name = type(exc).__name__.removesuffix("Error") or "citeline"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def error_body(code: str, message: str, request_id: str | None = None) -> dict[str, Any]:
    """The error shape; ``request_id`` defaults to the id of the request being served (see
    :mod:`citeline.api.request_id`), which the server's log lines for it carry too."""
    error = {"code": code, "message": message}
    if (request_id := request_id or current_request_id()) is not None:
        error["request_id"] = request_id
    return {"error": error}


def error_response(exc: CitelineError) -> JSONResponse:
    """The response for a library error: its status, its code and message, and the headers it implies."""
    headers: dict[str, str] = {}
    if isinstance(exc, AuthenticationError):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, LimitExceededError) and exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    return JSONResponse(error_body(error_code(exc), str(exc)), exc.http_status, headers=headers)


#: The field a library message begins with (``content_types: ...``, ``metadata.year: ...``).
_LIBRARY_FIELD = re.compile(r"([a-z_]+)((?:\.[^\s:]+)?): ")


def field_named(exc: InvalidRequestError, names: Mapping[str, str]) -> InvalidRequestError:
    """The library's refusal of one of its fields (``content_types: unknown content type 'docx'``),
    naming the field as the request sent it (``names["content_types"]``: ``body.content_types``), as
    the API names every other field. The library's messages name its own fields, whichever shell
    calls it; a message that begins with no field of ``names`` is returned as it is."""
    message = str(exc)
    match = _LIBRARY_FIELD.match(message)
    if match is None or match[1] not in names:
        return exc
    return InvalidRequestError(f"{names[match[1]]}{match[2]}: {message[match.end() :]}")


async def _citeline_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, CitelineError)
    if exc.http_status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
    return error_response(exc)


#: Pydantic's error types for a body that is not an object at all (bytes of another content type).
_NOT_AN_OBJECT = frozenset({"model_attributes_type", "dict_type", "model_type"})


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _problem(request: Request, error: Any) -> str:
    """One validation error as ``where: why``, in words a client can act on where the framework's
    are not: its ``body.9: JSON decode error`` names a character offset as if it were a field."""
    loc = tuple(error.get("loc", ()))
    if error.get("type") == "json_invalid" and len(loc) == 2 and loc[0] == "body":
        # Pydantic's own (a body parsed by json_body) says where already: "Invalid JSON: EOF ... column 7".
        reason = (error.get("ctx") or {}).get("error", "not JSON")
        return f"body: Invalid JSON at character {loc[1]}: {reason}"
    content_type = request.headers.get("content-type")
    if loc == ("body",) and error.get("type") in _NOT_AN_OBJECT and not _is_json(content_type):
        # FastAPI reads a JSON route's body as JSON only under a JSON content type; anything else
        # arrives as bytes, and pydantic's word for it says nothing about the header.
        got = content_type or "no Content-Type"
        route = f"{request.method} {request.url.path}"
        return f"body: {route} takes JSON (Content-Type: application/json), not {got}"
    where = ".".join(str(part) for part in loc)
    return f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg"))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = [_problem(request, error) for error in exc.errors()]
    return JSONResponse(error_body("invalid_request", "; ".join(problems) or "invalid request"), 422)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # The framework's word for a body it cannot parse (JSON that is not UTF-8, a multipart form
        # with too many files or fields): a malformed request, answered as every other one is.
        return JSONResponse(error_body("invalid_request", f"body: {exc.detail}"), 422)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = str(exc.detail)
    # The router's own words ("Not Found", "Method Not Allowed") name neither the request nor what
    # would do: say which route was asked for, and for a method what the route takes.
    asked = f"{request.method} {request.url.path}"
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route {asked}; the API's routes are listed at /docs and /openapi.json"
    headers = dict(exc.headers or {})
    if exc.status_code == 405 and message == "Method Not Allowed":
        # The router names the methods of the first route matching the path only (GET /search's, not
        # POST /search's too), where HTTP wants every method the path takes.
        allowed = _methods_of(request) or headers.get("Allow")
        if allowed:
            headers["Allow"] = allowed
        message = f"{asked} is not allowed" + (f"; {request.url.path} takes {allowed}" if allowed else "")
    return JSONResponse(error_body(code, message), exc.status_code, headers=headers)


#: The order methods are listed in an ``Allow`` header.
_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _methods_of(request: Request) -> str:
    """Every method some route takes at the request's path, as an ``Allow`` header lists them.

    Each method is asked of the router as a request would be (FastAPI nests included routers, whose
    routes are not listed one by one), so the answer is what routing would do."""
    routes = request.app.router.routes
    allowed = [
        method
        for method in _METHOD_ORDER
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    ]
    if "GET" in allowed and "HEAD" not in allowed:
        allowed.insert(allowed.index("GET") + 1, "HEAD")  # every GET route serves HEAD (api/head.py)
    return ", ".join(allowed)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # This handler runs outside the request-id middleware (Starlette answers unexpected exceptions
    # last), so the id comes from the request's state and goes on the response here.
    request_id: str | None = getattr(request.state, "request_id", None)
    log.error("%s %s failed [request %s]", request.method, request.url.path, request_id, exc_info=exc)
    message = "internal error; the server log has the details (look for the request id)"
    headers = {HEADER: request_id} if request_id else None
    return JSONResponse(error_body("internal", message, request_id), 500, headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every error into the one JSON shape."""
    app.add_exception_handler(CitelineError, _citeline_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
