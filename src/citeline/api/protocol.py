"""The HTTP protocol ``citeline serve`` runs: uvicorn's httptools protocol, letting a long URL through.

httptools cannot split a URL over 65,535 bytes into path and query, and uvicorn answers such a request
with a bare ``400 Invalid HTTP request received.`` in plain text, before the app sees it. Here the URL
is kept up to :data:`~citeline.api.limits.MAX_URL_BYTES` and its full length recorded in the scope, so
the app refuses it in its own error shape (a 414 naming the limit, with the request's id), whatever its
length. The rest of the URL is read and dropped as it arrives: a URL of megabytes holds no more memory
than the limit.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from citeline.api.limits import MAX_URL_BYTES, URL_BYTES_EXTENSION


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, but a URL over ``MAX_URL_BYTES`` reaches the app cut, not a 400."""

    _url_bytes = 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._url_bytes = 0

    def on_url(self, url: bytes) -> None:
        # The parser hands the URL over in pieces, as it arrives.
        self._url_bytes += len(url)
        room = MAX_URL_BYTES - len(self.url)
        if room > 0:
            super().on_url(url[:room])

    def on_headers_complete(self) -> None:
        if self._url_bytes > MAX_URL_BYTES:
            # Set before the request cycle starts: the app (citeline.api.limits.UrlLengthLimit) reads it.
            self.scope.setdefault("extensions", {})[URL_BYTES_EXTENSION] = {"length": self._url_bytes}
        super().on_headers_complete()
