"""Request metrics: every HTTP request counted by route template, method and status, and timed to the
end of its response (a streamed answer's included), in :mod:`citeline.metrics`."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from citeline.api.request_id import route_template
from citeline.metrics import metrics

#: Methods counted by name; any other is counted as ``other``, so a client cannot grow the label set.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestMetrics:
    """ASGI middleware counting and timing every HTTP request. Pure ASGI, as the request ids: streamed
    answers pass through unbuffered. Its cost is a clock read and two updates of this process's values."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        # Unless a response starts, what reaches the client is Starlette's 500 (sent outside this one).
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            metrics().request_ended(route_template(scope), method, status, time.perf_counter() - started)
