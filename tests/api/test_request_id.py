"""Every response names its request (``X-Request-ID``), so an operator can find the server's log lines
for a failure a user reports: the error body repeats the id, and the log lines carry it."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import AsyncGenerator, Iterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from citeline.answer import Error
from citeline.api import errors
from citeline.api.request_id import HEADER, RequestIdMiddleware
from citeline.api.routes.chat import EventStream, _error_payload, _format
from citeline.errors import GenerationError
from tests.api.conftest import Server
from tests.conftest import free_port


def test_every_response_carries_an_id_and_an_error_body_repeats_it(server: Server) -> None:
    with server.as_("admin") as admin:
        found = admin.get("/stats")
        missing = admin.get("/documents/no-such-document")
    assert re.fullmatch(r"[0-9a-f]{16}", found.headers[HEADER])
    assert missing.status_code == 404
    assert missing.json()["error"]["request_id"] == missing.headers[HEADER] != found.headers[HEADER]
    # Refused before any route runs: no key at all.
    refused = httpx.get(f"{server.url}/stats", timeout=30)
    assert refused.status_code == 401 and refused.json()["error"]["request_id"] == refused.headers[HEADER]


def test_an_id_set_by_a_proxy_is_kept_and_a_malformed_one_replaced(server: Server) -> None:
    with server.as_("admin") as admin:
        kept = admin.get("/stats", headers={HEADER: "lb-7f3a:42"})
        replaced = admin.get("/stats", headers={HEADER: "two words\tand a tab"})
        too_long = admin.get("/stats", headers={HEADER: "x" * 129})
    assert kept.headers[HEADER] == "lb-7f3a:42"
    assert re.fullmatch(r"[0-9a-f]{16}", replaced.headers[HEADER])
    assert re.fullmatch(r"[0-9a-f]{16}", too_long.headers[HEADER])


def test_the_server_log_names_the_request_of_each_line(server: Server) -> None:
    with server.as_("admin") as admin:
        admin.get("/documents/no-such-document", headers={HEADER: "find-me-17"})
    deadline = time.monotonic() + 10
    while "find-me-17" not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    line = next(line for line in server.log_text().splitlines() if "find-me-17" in line)
    assert '"GET /documents/no-such-document HTTP/1.1" 404' in line and line.endswith("[request find-me-17]")


@pytest.fixture
def failing_app() -> Iterator[str]:
    """The API's error handling and request-id middleware around a route with a bug, served by uvicorn
    over HTTP: a 500 cannot be provoked from the real routes without one."""
    app = FastAPI()
    errors.install(app)
    app.add_middleware(RequestIdMiddleware)

    @app.get("/bug")
    def bug() -> None:
        raise ZeroDivisionError("the bug's own words, kept out of the response")

    @app.get("/stream")
    def stream() -> EventStream:
        async def events() -> AsyncGenerator[str, None]:
            # As the chat stream reports a failure once the answer has started (headers already sent).
            yield _format("error", _error_payload(Error("the model failed", GenerationError("failed"))))

        return EventStream(events())

    port = free_port()
    served = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not served.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        served.should_exit = True
        thread.join(timeout=10)


def test_an_unexpected_error_gives_the_id_to_the_caller_and_to_the_log_line_with_the_trace(
    failing_app: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="citeline.api"):
        response = httpx.get(f"{failing_app}/bug", headers={HEADER: "user-report-9"}, timeout=30)
    assert response.status_code == 500
    body = response.json()["error"]
    assert body["code"] == "internal" and "the bug's own words" not in response.text
    assert body["request_id"] == response.headers[HEADER] == "user-report-9"
    logged = [r for r in caplog.records if "[request user-report-9]" in r.getMessage()]
    assert logged and logged[0].exc_info is not None and logged[0].exc_info[0] is ZeroDivisionError


def test_an_error_event_of_a_stream_names_the_request_as_its_headers_do(failing_app: str) -> None:
    response = httpx.get(f"{failing_app}/stream", headers={HEADER: "stream-3"}, timeout=30)
    assert response.headers[HEADER] == "stream-3"
    data = json.loads(response.text.split("data: ", 1)[1])
    assert data["code"] == "generation" and data["request_id"] == "stream-3"
