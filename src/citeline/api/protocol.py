"""The HTTP protocol ``citeline serve`` runs: uvicorn's httptools protocol, letting a long URL through.

httptools cannot split a URL over 65,535 bytes into path and query, and uvicorn answers such a request
with a bare ``400 Invalid HTTP request received.`` in plain text, before the app sees it. Here the URL
is kept up to :data:`~citeline.api.limits.MAX_URL_BYTES` and its full length recorded in the scope, so
the app refuses it in its own error shape (a 414 naming the limit, with the request's id), whatever its
length. The rest of the URL is read and dropped as it arrives: a URL of megabytes holds no more memory
than the limit.
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from citeline.api.limits import MAX_URL_BYTES, URL_BYTES_EXTENSION
from citeline.api.uvicorn_internals import Uses

#: The most a request's head may hold besides its URL (which ``MAX_URL_BYTES`` bounds as it arrives):
#: httptools keeps header lines without a limit, so a client sending endless headers held the server's
#: memory. Browsers send a few kilobytes; h11 allows 16 KiB.
MAX_HEADER_BYTES = 65_536
#: After refusing a head, what is still read and dropped, and for how long, before the connection is
#: closed: closed at once with the client's bytes unread, the kernel resets it and the client loses
#: the answer (a lingering close, as web servers do).
_LINGER_BYTES = 64 * 1024 * 1024
_LINGER_SECONDS = 5.0


def _head_part(data: bytes) -> int:
    """How many of the bytes of a read that began a request, still unfinished, are counted as its head.

    The parser does not say where in a read a request began, and the read may first end the requests
    before it (pipelined). The unfinished head holds no blank line, so it lies after the read's last
    one: what follows that line is counted. Exact when the request before ended with its head or with
    a chunked body; after a body of a ``Content-Length``, that body's last bytes are counted too (a read
    is at most 256 KiB)."""
    blank = data.rfind(b"\r\n\r\n")
    return len(data) - (blank + 4 if blank >= 0 else 0)


#: What :class:`HttpProtocol` overrides or reads of uvicorn's (checked as ``citeline serve`` starts).
UVICORN_USES = (
    Uses(
        HttpToolsProtocol,
        methods=(
            "on_message_begin",
            "data_received",
            "send_400_response",
            "on_url",
            "on_headers_complete",
            "on_body",
            "on_message_complete",
        ),
        attributes={
            "__init__": ("loop", "logger"),
            "connection_made": ("transport",),
            "on_message_begin": ("url", "headers", "scope"),
        },
    ),
)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, but a URL over ``MAX_URL_BYTES`` reaches the app cut, not a 400,
    and a head over ``MAX_HEADER_BYTES`` besides its URL is refused with a 431 as it arrives."""

    _url_bytes = 0
    #: Bytes of the current request's head received so far, whether the parser is inside a head, and
    #: whether the current read began a request.
    _head_bytes = 0
    _in_head = False
    _began = False
    #: Bytes dropped since the head was refused (None: not refused).
    _dropped: int | None = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._url_bytes = 0
        self._head_bytes = 0
        self._in_head = self._began = True

    def data_received(self, data: bytes) -> None:
        if self._dropped is not None:
            self._dropped += len(data)
            if self._dropped > _LINGER_BYTES:
                self.transport.close()
            return
        self._began = False
        super().data_received(data)
        if self._dropped is not None or not self._in_head or self.transport.is_closing():
            return  # answered (a request the parser refused), or not inside a head
        self._head_bytes += _head_part(data) if self._began else len(data)
        if self._head_bytes - self._url_bytes > MAX_HEADER_BYTES:
            self._refuse_head()

    def send_400_response(self, msg: str) -> None:
        # uvicorn's answer to bytes that are no HTTP request ("Invalid HTTP request received.") in plain
        # text: in the error shape every other refusal has. Bytes after a refused head are not read.
        if self._dropped is not None:
            return
        self._answer(
            400, "Bad Request", "invalid_request", f"not an HTTP/1.1 request the server can read: {msg}"
        )

    def _refuse_head(self) -> None:
        self.logger.warning("refused a request whose headers are over %d bytes", MAX_HEADER_BYTES)
        self._answer(
            431,
            "Request Header Fields Too Large",
            "limit_exceeded",
            f"the request's header lines are over {MAX_HEADER_BYTES} bytes; send fewer or shorter headers",
        )

    def _answer(self, status: int, reason: str, code: str, message: str) -> None:
        """Answer before the app sees the request, in the API's error shape, and close the connection
        once the client has stopped sending (see ``_LINGER_BYTES``)."""
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        self.transport.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n".encode()
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        self._dropped = 0
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(_LINGER_SECONDS, self.transport.close)

    def on_url(self, url: bytes) -> None:
        # The parser hands the URL over in pieces, as it arrives.
        self._url_bytes += len(url)
        room = MAX_URL_BYTES - len(self.url)
        if room > 0:
            super().on_url(url[:room])

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._dropped is not None:
            return  # a request after a refused one, in the same read: dropped with the rest
        # A head that ends in the read it began in was never counted in data_received: its header
        # lines, as parsed, are measured here, before the app sees the request.
        if sum(len(name) + len(value) + 4 for name, value in self.headers) > MAX_HEADER_BYTES:
            self._refuse_head()
            return
        if self._url_bytes > MAX_URL_BYTES:
            # Set before the request cycle starts: the app (citeline.api.limits.UrlLengthLimit) reads it.
            self.scope.setdefault("extensions", {})[URL_BYTES_EXTENSION] = {"length": self._url_bytes}
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._dropped is None:  # else the body of a refused request, which no app reads
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._dropped is None:
            super().on_message_complete()
