"""HEAD answered as GET, without the body (RFC 9110, 9.3.2).

FastAPI routes a path's GET only, so ``curl -I``, a load balancer's HEAD probe of ``/health/live`` or
a link checker got 405 from every page and route. Answering HEAD with the GET route's status and
headers, and no body, serves them all, key checks and errors included; no route has to list HEAD.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The scope key saying the request the GET route serves was a HEAD: a response that can answer one
#: without making its body (a stored file's, which would otherwise be read through) looks for it.
HEAD_ASKED = "citeline.head"


class HeadAsGet:
    """ASGI middleware: a HEAD request is served by the GET route, and the body it answers is dropped.

    The response's headers (``content-length`` included) are the GET's, as a HEAD's must be. The
    body is produced and thrown away, cheap for every route but a file's download: that one sees
    :data:`HEAD_ASKED` and sends its headers only.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET", HEAD_ASKED: True}, receive, without_body)
