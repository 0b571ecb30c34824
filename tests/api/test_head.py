"""HEAD answered as GET: the GET route's status and headers, and no body made where none is needed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from citeline.api.head import HeadAsGet
from citeline.api.routes.documents import StoredFile


def _served(app: ASGIApp, method: str) -> tuple[list[Message], int]:
    """What ``app`` behind :class:`HeadAsGet` answers ``method`` on ``/file``, and how many body bytes
    the app itself made (the middleware drops a HEAD's, so only this says whether they were read)."""
    made = 0

    async def counting(scope: Scope, receive: Receive, send: Send) -> None:
        async def counted(message: Message) -> None:
            nonlocal made
            if message["type"] == "http.response.body":
                made += len(message.get("body", b""))
            await send(message)

        await app(scope, receive, counted)

    sent: list[Message] = []

    asked = False

    async def receive() -> Message:
        # The request once, then nothing more until the response is sent (a response listening for the
        # client's disconnect waits here, and is cancelled once done).
        nonlocal asked
        if asked:
            await asyncio.Event().wait()
        asked = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": "/file",
        "raw_path": b"/file",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"test")],
        "server": ("test", 80),
        "client": ("test", 1),
    }
    asyncio.run(HeadAsGet(counting)(scope, receive, send))
    return sent, made


def test_head_of_a_stored_file_reads_none_of_it(tmp_path: Path) -> None:
    big = tmp_path / "manual.pdf"
    big.write_bytes(b"%PDF-1.7\n" + b"0" * 3_000_000)

    def download(request: Request) -> StoredFile:
        return StoredFile(
            big, media_type="application/pdf", filename=big.name, content_disposition_type="inline"
        )

    app = Starlette(routes=[Route("/file", download, methods=["GET"])])
    got, got_made = _served(app, "GET")
    head, head_made = _served(app, "HEAD")
    assert got_made == big.stat().st_size
    # The headers of the GET, its length included; before, the 3 MB were read to be thrown away.
    assert head[0]["status"] == got[0]["status"] == 200
    assert head[0]["headers"] == got[0]["headers"]
    assert head_made == 0
    assert b"".join(m.get("body", b"") for m in head if m["type"] == "http.response.body") == b""
