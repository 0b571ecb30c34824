"""Answer slots over HTTP with a real OpenAI-compatible model server that answers when a test lets it:
what may be refused without the model is refused before a slot is taken, whatever the slots hold; and a
model whose stream breaks off midway is said to have broken off."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.api.conftest import Server, read_events, start_server, stop_server

QUESTION = "When does the ACME relief valve open?"
REPLY = "The ACME relief valve opens at 6 bar [1]."


class ModelServer(ThreadingHTTPServer):
    """``POST /v1/chat/completions``, streamed: the first word at once, the rest once ``go`` is set;
    with ``break_off`` set, the connection is dropped after the first word instead."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Model)
        self.go = threading.Event()
        self.break_off = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Model(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        first, rest = REPLY.split(" ", 1)
        self._event({"choices": [{"delta": {"content": first + " "}}]})
        if self.server.break_off:
            # A chunked body cut short: the client sees the connection end mid-stream.
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.server.go.wait(timeout=120)
        self._event({"choices": [{"delta": {"content": rest}}]})
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _event(self, data: dict[str, Any]) -> None:
        self._chunk(f"data: {json.dumps(data)}\n\n".encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    instance = ModelServer()
    thread = threading.Thread(target=instance.serve_forever, daemon=True)
    thread.start()
    yield instance
    instance.go.set()
    instance.shutdown()
    instance.server_close()


@pytest.fixture(scope="module")
def one_slot(
    server: Server, model: ModelServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The test store answered by ``model``, one answer at a time and none waiting."""
    env = dict(
        server.env,
        CITELINE_LLM="openai:scripted",
        CITELINE_LLM_BASE_URL=model.url,
        CITELINE_API_MAX_GENERATIONS="1",
        CITELINE_API_GENERATION_QUEUE="0",
        CITELINE_LLM_TIMEOUT="120",
    )
    started = start_server(env, tmp_path_factory.mktemp("one-slot") / "serve.log")
    started.keys = server.keys
    started.documents = server.documents
    yield started
    stop_server(started)


def test_a_request_refused_without_the_model_is_refused_while_the_slot_is_busy(
    one_slot: Server, model: ModelServer
) -> None:
    model.go.clear()
    with one_slot.as_("admin") as client:
        holder = client.send(
            client.build_request("POST", "/chat/stream", json={"question": QUESTION}), stream=True
        )
        try:
            assert holder.status_code == 200
            events = read_events(holder.iter_lines())
            # From the evidence on the answer holds the slot: the model is asked, and answers when let.
            assert next(e for e in events if e.name == "evidence")
            before = one_slot.ready()["generations"]
            persona = client.post("/chat/stream", json={"question": QUESTION, "persona": "pirate"})
            unknown = client.post(
                "/chat/stream", json={"question": QUESTION, "conversation_id": str(uuid.uuid4())}
            )
            no_document = client.post("/chat", json={"question": QUESTION, "document_ids": ["ffffffff"]})
            blank = client.post("/chat", json={"question": "   "})
            busy = client.post("/chat", json={"question": QUESTION})
            after = one_slot.ready()["generations"]
        finally:
            model.go.set()
            rest = [e.name for e in events if e.name != ":"]
            holder.close()
    assert persona.status_code == 422 and "pirate" in persona.json()["error"]["message"]
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert no_document.status_code == 404 and "ffffffff" in no_document.json()["error"]["message"]
    assert blank.status_code == 422 and "empty" in blank.json()["error"]["message"]
    # Only a valid request meets the busy slot, and says how many answers hold it in words that agree.
    assert busy.status_code == 503 and busy.json()["error"]["code"] == "limit_exceeded"
    assert "1 answer is being generated and 0 waiting" in busy.json()["error"]["message"]
    assert int(busy.headers["Retry-After"]) >= 1
    assert (after["started"], after["finished"]) == (before["started"], before["finished"])
    assert rest[-1] == "complete"


def test_a_model_stream_that_breaks_off_midway_is_said_to_have_broken_off(
    one_slot: Server, model: ModelServer
) -> None:
    model.break_off = True
    try:
        with one_slot.as_("admin") as client:
            deadline = time.monotonic() + 30
            while one_slot.ready()["generations"]["running"] and time.monotonic() < deadline:
                time.sleep(0.1)
            body = client.post("/chat", json={"question": QUESTION}).json()
    finally:
        model.break_off = False
    assert body["fell_back"], body
    reason = body["fallback_reason"]
    assert "broke off its answer midway" in reason and "cannot be reached" not in reason, reason
