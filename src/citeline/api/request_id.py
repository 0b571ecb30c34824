"""A request id on every response (``X-Request-ID``), in error bodies and in the server's log lines.

An operator told "my search failed" needs to find the line the server logged for that request: a 500
says only that "the server log has the details". Every response now carries ``X-Request-ID``; errors
carry it in their body as well (``error.request_id``), and citeline's log lines written while a
request is served end with ``[request <id>]``.

An id a proxy or the caller already set (``X-Request-ID`` on the request) is kept, so one id follows
the request through a load balancer's log and citeline's; one that is not a short printable token
(up to 128 characters of letters, digits and ``._:-``) is replaced, since it ends up in log lines and
headers. Otherwise the id is 16 random hex digits.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from contextvars import ContextVar
from dataclasses import dataclass

from starlette.datastructures import Headers, MutableHeaders
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-ID"

_ACCEPTED = re.compile(r"[A-Za-z0-9._:-]{1,128}")


@dataclass(frozen=True)
class Served:
    """The request being served: its id, its ASGI scope (which routing fills in with the route and the
    authentication with the key's id, see :func:`route_template` and :func:`key_id`) and when it came."""

    request_id: str
    scope: Scope
    started: float


_current: ContextVar[Served | None] = ContextVar("citeline_request", default=None)


def current_request_id() -> str | None:
    """The id of the request being served in this context, if any."""
    served = _current.get()
    return None if served is None else served.request_id


def current_request() -> Served | None:
    """The request being served in this context, if any."""
    return _current.get()


def route_template(scope: Scope) -> str:
    """The route a request matched, as declared (``/documents/{document_id}``), never its raw path: a
    label of the request metrics and a field of the access log, which must not grow with every id
    requested. ``unmatched`` when no route took it (a 404 for an unknown path)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return "unmatched"
    return f"{path}/{{path}}" if isinstance(route, Mount) else path


#: Where :func:`citeline.api.deps.get_access` leaves the id of the key a request carries (the key
#: itself is never kept): ``scope["state"]``, which ``request.state`` writes to.
KEY_ID = "key_id"


def key_id(scope: Scope) -> str | None:
    """The id of the API key the request was served under (``open`` in open mode); None before the
    key was checked, or for a route that needs none."""
    value = scope.get("state", {}).get(KEY_ID)
    return None if value is None else str(value)


def _new_id() -> str:
    return secrets.token_hex(8)


class RequestIdMiddleware:
    """ASGI middleware: give each HTTP request an id, expose it to handlers and put it on the response.

    Pure ASGI rather than ``BaseHTTPMiddleware``, so streamed answers (server-sent events) pass through
    unbuffered. The id is kept in ``scope["state"]`` too, where the error handlers that run outside
    this middleware (a 500 from an unexpected exception) find it through ``request.state``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get(HEADER.lower(), "")
        request_id = given if _ACCEPTED.fullmatch(given) else _new_id()
        scope.setdefault("state", {})["request_id"] = request_id
        token = _current.set(Served(request_id, scope, time.perf_counter()))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if HEADER.lower() not in headers:
                    headers.append(HEADER, request_id)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _current.reset(token)


class RequestIdLogFilter(logging.Filter):
    """Ends a log record's message with ``[request <id>]`` while a request is served, and gives every
    record a ``request_id`` attribute (``-`` outside a request) for formats that place it themselves,
    as uvicorn's access lines must: their formatter rebuilds the line from the record's arguments.
    ``suffix`` False leaves the message alone, for a format that writes the id as a field of its own."""

    def __init__(self, suffix: bool = True) -> None:
        super().__init__()
        self.suffix = suffix

    def filter(self, record: logging.LogRecord) -> bool:
        if hasattr(record, "request_id"):  # a record passes each handler's filter: mark it once
            return True
        request_id = current_request_id()
        record.request_id = request_id or "-"
        if self.suffix and request_id is not None and record.name != "uvicorn.access":
            record.msg = f"{record.msg} [request {request_id}]"
        return True
