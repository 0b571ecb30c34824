"""Each limit, crossed: a 4xx that names the limit and its setting."""

from __future__ import annotations

import http.client
import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from citeline.api.limits import MAX_URL_BYTES, RateLimiter
from citeline.api.protocol import MAX_HEADER_BYTES
from citeline.errors import ConfigError, LimitExceededError
from citeline.settings import Settings
from tests.api.conftest import LIMITS, Server, start_server, stop_server


def assert_limit(response_json: dict[str, dict[str, str]], setting: str) -> None:
    assert response_json["error"]["code"] == "limit_exceeded"
    assert setting in response_json["error"]["message"]


def test_a_body_over_the_limit_is_refused_before_it_is_read(server: Server) -> None:
    limit = int(LIMITS["CITELINE_API_MAX_BODY_BYTES"])
    with server.as_("admin") as client:
        response = client.post("/search", json={"query": "valve", "metadata": {"pad": "x" * limit}})
    assert response.status_code == 413
    assert_limit(response.json(), "CITELINE_API_MAX_BODY_BYTES")


def test_a_chunked_body_over_the_limit_is_refused_as_it_arrives(server: Server) -> None:
    def body() -> Iterator[bytes]:
        yield b'{"query": "valve", "metadata": {"pad": "'
        for _ in range(20):
            yield b"x" * 8192
        yield b'"}}'

    with server.as_("admin") as client:
        response = client.post("/search", content=body(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert_limit(response.json(), "CITELINE_API_MAX_BODY_BYTES")


def test_a_question_or_query_over_the_limit_is_refused(server: Server) -> None:
    long = "valve " * 100
    with server.as_("reader") as client:
        chat = client.post("/chat", json={"question": long})
        stream = client.post("/chat/stream", json={"question": long})
        search = client.get("/search", params={"q": long})
    for response in (chat, stream, search):
        assert response.status_code == 413, response.text
        assert_limit(response.json(), "CITELINE_API_MAX_QUESTION_CHARS")


@pytest.mark.parametrize("size", [MAX_URL_BYTES + 1, 1_000_000, 10_000_000])
def test_a_url_over_the_limit_is_refused_in_the_error_shape_however_long(server: Server, size: int) -> None:
    # httpx refuses to send a URL over 64 KiB; http.client sends what it is given.
    connection = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=120)
    try:
        query = "/search?q="
        connection.request("GET", query + "a" * (size - len(query)), headers={"X-Request-ID": "long-url"})
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    assert response.status == 414, raw
    body = json.loads(raw)
    assert response.getheader("X-Request-ID") == "long-url" == body["error"]["request_id"]
    assert body["error"]["code"] == "limit_exceeded"
    assert f"the URL is {size} bytes long, over the limit of {MAX_URL_BYTES}" in body["error"]["message"]


def _raw(server: Server, head: list[bytes]) -> tuple[int, bytes]:
    """Send a request's head in the pieces given, and read the status and body of the answer."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        try:
            for piece in head:
                sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the head was all sent
        answer = b""
        while chunk := sock.recv(65_536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize(
    "pad",
    [
        [b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(2_000)],  # many lines, 2 MB
        [b"X-Pad: "] + [b"a" * 65_536] * 32 + [b"\r\n"],  # one line of 2 MB
    ],
    ids=["many-lines", "one-line"],
)
def test_a_request_with_headers_over_the_limit_is_refused_as_they_arrive(
    server: Server, pad: list[bytes]
) -> None:
    # httptools keeps header lines without a limit: a client sending endless headers held the server's
    # memory, and was answered only once it stopped.
    status, body = _raw(server, [b"GET /health/live HTTP/1.1\r\nHost: citeline\r\n", *pad, b"\r\n"])
    assert status == 431
    error = json.loads(body)["error"]
    assert error["code"] == "limit_exceeded" and f"over {MAX_HEADER_BYTES} bytes" in error["message"]
    # Headers under the limit, and the next request, are served.
    padded = b"X-Pad: " + b"a" * 40_000 + b"\r\n"
    fine = [b"GET /health/live HTTP/1.1\r\nHost: citeline\r\n" + padded + b"Connection: close\r\n\r\n"]
    assert _raw(server, fine)[0] == 200


@pytest.mark.parametrize(
    ("request_line", "size", "status"),
    [
        (b"GET /health/live", 70_000, 431),
        (b"GET /health/live", 220_000, 431),
        (b"POST /search", 70_000, 431),  # its body in the same read is dropped, not served
        (b"GET /health/live", 60_000, 200),
        (b"POST /search", 60_000, 401),  # served: refused for want of a key
    ],
)
def test_the_header_limit_holds_from_the_first_byte_of_a_request(
    server: Server, request_line: bytes, size: int, status: int
) -> None:
    # The server's first read of a request (up to 256 KiB) was not counted: a 220,000-byte header sent
    # at once was served.
    body = b'{"query": "valve"}'
    request = (
        request_line
        + b" HTTP/1.1\r\nHost: citeline\r\nX-Big: "
        + b"a" * size
        + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        + b"Connection: close\r\n\r\n"
        + body
    )
    assert _raw(server, [request])[0] == status


def test_pipelined_requests_are_each_held_to_the_header_limit_not_together(server: Server) -> None:
    # Requests arriving in one read: the bytes of the ones before do not count against the last.
    one = b"GET /health/live HTTP/1.1\r\nHost: citeline\r\nX-Pad: " + b"a" * 40_000 + b"\r\n\r\n"
    last = one.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(one + one + last)
        answer = b""
        while chunk := sock.recv(65_536):
            answer += chunk
    assert answer.count(b"HTTP/1.1 200 OK") == 3, answer[:300]


def test_bytes_that_are_no_http_request_are_refused_in_the_error_shape(server: Server) -> None:
    # uvicorn answered them "Invalid HTTP request received." in plain text.
    status, body = _raw(server, [b"GET /health/live HTTP/1.1\r\nHost citeline\r\n\r\n"])
    assert status == 400
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_request" and "not an HTTP/1.1 request" in error["message"]
    assert (
        _raw(server, [b"GET /health/live HTTP/1.1\r\nHost: citeline\r\nConnection: close\r\n\r\n"])[0] == 200
    )


def test_a_url_at_the_limit_is_served(server: Server) -> None:
    query = "/search?q=valve&pad="
    with server.as_("reader") as client:
        response = client.get(query + "a" * (MAX_URL_BYTES - len(query)))
    # Served: refused by the route for its unknown parameter, not by the URL's length.
    assert response.status_code == 422 and "query.pad" in response.json()["error"]["message"]


def test_requests_over_the_per_key_rate_are_told_when_to_come_back(server: Server) -> None:
    per_minute = int(LIMITS["CITELINE_API_RATE_LIMIT"])
    with server.as_("admin") as admin:
        key = admin.post("/keys", json={"role": "reader", "all_scopes": True}).json()["key"]
    with server.client(key) as client:
        statuses = [client.get("/conversations").status_code for _ in range(per_minute)]
        over = client.get("/conversations")
        with server.as_("reader") as another:
            unaffected = another.get("/conversations")
    assert statuses == [200] * per_minute
    assert over.status_code == 429
    assert_limit(over.json(), "CITELINE_API_RATE_LIMIT")
    assert 1 <= int(over.headers["Retry-After"]) <= 60
    assert unaffected.status_code == 200


def test_with_a_shared_redis_a_key_is_counted_once_across_server_processes(
    server: Server, redis_server: str, tmp_path: Path
) -> None:
    per_minute = int(LIMITS["CITELINE_API_RATE_LIMIT"])
    with server.as_("admin") as admin:
        made = admin.post("/keys", json={"role": "reader", "all_scopes": True}).json()
    # Another replica, counting in the same Redis, has already served most of the key's minute.
    replica = RateLimiter(per_minute, redis_server)
    for _ in range(per_minute - 5):
        replica.hit(f"key:{made['id']}")
    shared = start_server(
        dict(server.env, CITELINE_API_RATE_LIMIT_REDIS_URL=redis_server), tmp_path / "shared.log"
    )
    try:
        with shared.client(made["key"]) as client:
            statuses = [client.get("/conversations").status_code for _ in range(5)]
            over = client.get("/conversations")
    finally:
        stop_server(shared)

    assert statuses == [200] * 5
    assert over.status_code == 429
    assert_limit(over.json(), "CITELINE_API_RATE_LIMIT")
    with pytest.raises(LimitExceededError):
        replica.hit(f"key:{made['id']}")


def test_a_rate_limit_redis_that_does_not_answer_lets_requests_through_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    limiter = RateLimiter(2, f"redis://127.0.0.1:{closed}/0")

    with caplog.at_level(logging.WARNING, logger="citeline.api"):
        for _ in range(5):
            limiter.hit("key:someone")

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once, not per request
    assert "CITELINE_API_RATE_LIMIT_REDIS_URL" in warnings[0]


def test_a_rate_limit_redis_url_of_another_scheme_is_refused() -> None:
    with pytest.raises(ConfigError, match="api_rate_limit_redis_url must be a redis://"):
        Settings(api_rate_limit_redis_url="http://127.0.0.1:6379")
