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
from contextvars import ContextVar

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-ID"

_current: ContextVar[str | None] = ContextVar("citeline_request_id", default=None)
_ACCEPTED = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def current_request_id() -> str | None:
    """The id of the request being served in this context, if any."""
    return _current.get()


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
        token = _current.set(request_id)

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
    as uvicorn's access lines must: their formatter rebuilds the line from the record's arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if hasattr(record, "request_id"):  # a record passes each handler's filter: mark it once
            return True
        request_id = _current.get()
        record.request_id = request_id or "-"
        if request_id is not None and record.name != "uvicorn.access":
            record.msg = f"{record.msg} [request {request_id}]"
        return True
