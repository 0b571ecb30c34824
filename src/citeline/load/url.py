"""Fetching a web page over http(s), refusing addresses on the caller's own networks.

A loader that fetches any URL it is given is a server-side request forgery hole: a document URL of
``http://169.254.169.254/`` or ``http://localhost:5432/`` would reach cloud metadata or internal
services. So every connection, including each redirect, resolves the host, refuses it if any address is
loopback, private, link-local, multicast, reserved or otherwise not global, and then connects to the
address it checked (never resolving again, which would let DNS rebinding swap in another address).
"""

from __future__ import annotations

import functools
import http.client
import ipaddress
import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any
from urllib.parse import urlsplit

from citeline import __version__
from citeline.errors import LoadError, UnsupportedTypeError

DEFAULT_TIMEOUT = 20.0
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
_SCHEMES = ("http", "https")
_USER_AGENT = f"citeline/{__version__}"


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched response: the final URL after redirects, its media type, charset and body."""

    url: str
    media_type: str
    charset: str | None
    body: bytes


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Built on first https fetch: loading the CA store costs ~20 ms that most imports never need.
    return ssl.create_default_context()


class _AddressRefusedError(OSError):
    """The host resolves to an address the guard refuses."""


def _refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why connecting to ``ip`` is refused, or ``None`` if it is a public address."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    # Most specific first: the private ranges also contain loopback, link-local and the rest.
    for label, flag in (
        ("the unspecified address", ip.is_unspecified),
        ("a loopback address", ip.is_loopback),
        ("a link-local address", ip.is_link_local),
        ("a multicast address", ip.is_multicast),
        ("a reserved address", ip.is_reserved),
        ("a private address", ip.is_private),
        ("not a public address", not ip.is_global),
    ):
        if flag:
            return label
    return None


def _vetted_addresses(host: str, port: int, allow_private: bool) -> list[tuple[Any, ...]]:
    """Resolve ``host`` and return its socket addresses, refusing any non-public one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve host {host!r} ({exc.strerror})") from exc
    if not allow_private:
        for info in infos:
            address = str(info[4][0]).split("%", 1)[0]  # drop an IPv6 zone such as %eth0
            reason = _refusal(ipaddress.ip_address(address))
            if reason:
                raise _AddressRefusedError(
                    f"refusing to fetch from {host}: {address} is {reason}; "
                    "to load from your own network, set CITELINE_URL_ALLOW_PRIVATE=true (citeline ingest: "
                    "--allow-private-urls; Python: allow_private=True)"
                )
    return [info for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]


def _connect(host: str, port: int, timeout: float | None, allow_private: bool) -> socket.socket:
    last_error: OSError | None = None
    for family, kind, proto, _, address in _vetted_addresses(host, port, allow_private):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            last_error = exc
            continue
        return sock
    raise last_error or OSError(f"no address found for {host!r}")


class _GuardedHTTPConnection(http.client.HTTPConnection):
    allow_private = False

    def connect(self) -> None:
        self.sock = _connect(self.host, self.port, self.timeout, self.allow_private)


class _GuardedHTTPSConnection(http.client.HTTPSConnection):
    allow_private = False

    def connect(self) -> None:
        sock = _connect(self.host, self.port, self.timeout, self.allow_private)
        self.sock = _tls_context().wrap_socket(sock, server_hostname=self.host)


class _UnguardedHTTPConnection(_GuardedHTTPConnection):
    allow_private = True


class _UnguardedHTTPSConnection(_GuardedHTTPSConnection):
    allow_private = True


class _GuardedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, connection: type[_GuardedHTTPConnection]) -> None:
        super().__init__()
        self._connection = connection

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _GuardedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, connection: type[_GuardedHTTPSConnection]) -> None:
        super().__init__()
        self._connection = connection

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


def _opener(allow_private: bool) -> urllib.request.OpenerDirector:
    # No ProxyHandler: through a proxy the address check would vet the proxy, not the target. And no
    # handlers for file:, ftp: or data: URLs, which a redirect could otherwise reach.
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.UnknownHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPRedirectHandler(),
        urllib.request.HTTPErrorProcessor(),
        _GuardedHTTPHandler(_UnguardedHTTPConnection if allow_private else _GuardedHTTPConnection),
        _GuardedHTTPSHandler(_UnguardedHTTPSConnection if allow_private else _GuardedHTTPSConnection),
    ):
        opener.add_handler(handler)
    return opener


def check_url(url: str) -> None:
    """Raise :class:`UnsupportedTypeError` unless ``url`` is an http or https URL with a host."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in _SCHEMES:
        raise UnsupportedTypeError(url, f"unsupported URL scheme {parts.scheme!r}; only http and https")
    if not parts.hostname:
        raise LoadError(url, "URL has no host")


def fetch(
    url: str,
    *,
    allow_private: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Fetched:
    """GET ``url`` and return the response, refusing non-public addresses unless ``allow_private``.

    Raises :class:`LoadError` naming the URL for a refused address, a failed connection, a timeout
    (``timeout`` seconds per connect and per read), an HTTP error status or a body over ``max_bytes``.
    """
    check_url(url)
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    try:
        with _opener(allow_private).open(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > max_bytes:
                raise LoadError(url, f"page too large ({int(length)} bytes; the limit is {max_bytes})")
            body = response.read(max_bytes + 1)
            if len(body) > max_bytes:
                raise LoadError(url, f"page too large (over {max_bytes} bytes)")
            headers: Message = response.headers
            return Fetched(
                url=response.geturl(),
                media_type=headers.get_content_type(),
                charset=headers.get_content_charset(),
                body=body,
            )
    except urllib.error.HTTPError as exc:
        raise LoadError(url, f"HTTP error {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, _AddressRefusedError):
            raise LoadError(url, str(reason)) from exc
        if isinstance(reason, TimeoutError):
            raise LoadError(url, f"timed out after {timeout:g} s") from exc
        raise LoadError(url, f"cannot fetch ({reason})") from exc
    except TimeoutError as exc:
        raise LoadError(url, f"timed out after {timeout:g} s") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise LoadError(url, f"cannot fetch ({exc})") from exc
