"""Streamed answers from the real local model over HTTP: event order, the heartbeat, the bounded
queue of generations, and a client that goes away stopping its generation."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import Server, Sse, read_events, start_server, stop_server

pytestmark = pytest.mark.slow

QUESTION = "When does the ACME relief valve open?"


@pytest.fixture(scope="module")
def model_server(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The same store answered by the default local model, one generation at a time, one waiting."""
    env = {k: v for k, v in server.env.items() if k != "CITELINE_LLM"}
    env.update(
        CITELINE_API_MAX_GENERATIONS="1",
        CITELINE_API_GENERATION_QUEUE="1",
        CITELINE_API_GENERATION_WAIT="1",
        CITELINE_API_HEARTBEAT_SECONDS="0.1",
        # These tests are about the stream, not the model's speed: on a busy 2-core machine the
        # default 120 s timeout was seen to run out and the answer fell back to quoting.
        CITELINE_LLM_TIMEOUT="900",
    )
    started = start_server(env, tmp_path_factory.mktemp("model") / "serve.log")
    started.keys = server.keys
    started.documents = server.documents
    yield started
    stop_server(started)


def test_a_streamed_answer_from_the_local_model(model_server: Server) -> None:
    with (
        model_server.as_("reader") as client,
        client.stream("POST", "/chat/stream", json={"question": QUESTION}) as response,
    ):
        events = list(read_events(response.iter_lines()))
    names = [e.name for e in events if e.name != ":"]
    assert re.fullmatch(
        r"start rewrite evidence token( token| citation)*( unsupported)* complete", " ".join(names)
    ), names
    complete = events[-1].data
    assert complete["provider"].startswith("local:"), complete["fallback_reason"]
    assert not complete["fell_back"], complete["fallback_reason"]
    evidence = next(e for e in events if e.name == "evidence").data
    assert evidence["provider"] == complete["provider"]
    given = {p["chunk_id"] for p in evidence["passages"]}
    assert {c["chunk_id"] for c in complete["citations"]} <= given
    # The model reads its prompt before it writes: the stream says it is alive meanwhile.
    first_token = next(i for i, e in enumerate(events) if e.name == "token")
    assert any(e.name == ":" for e in events[:first_token])


def _open_stream(server: Server, until: str = "token") -> tuple[httpx.Client, httpx.Response, Iterator[Sse]]:
    """A streamed answer read up to its first ``until`` event: its generation slot is held."""
    client = server.as_("admin")
    response = client.send(
        client.build_request("POST", "/chat/stream", json={"question": QUESTION}), stream=True
    )
    assert response.status_code == 200
    events = read_events(response.iter_lines())
    assert next(e for e in events if e.name == until)
    return client, response, events


def test_answers_beyond_the_queue_get_503_with_retry_after(model_server: Server) -> None:
    # Held from the evidence on: the model has yet to read its prompt and write the answer, which takes
    # seconds here, well beyond the queue's wait.
    client, response, events = _open_stream(model_server, until="evidence")
    try:
        waited: list[httpx.Response] = []
        waiter = threading.Thread(
            target=lambda: waited.append(
                model_server.as_("reader").post("/chat", json={"question": QUESTION})
            )
        )
        waiter.start()
        time.sleep(0.3)  # the waiter is in the queue now
        with model_server.as_("reader") as other:
            refused = other.post("/chat", json={"question": QUESTION})
        waiter.join()
        rest = [e.name for e in events if e.name != ":"]
    finally:
        response.close()
        client.close()
    assert refused.status_code == 503
    assert "CITELINE_API_GENERATION_QUEUE" in refused.json()["error"]["message"]
    assert waited[0].status_code == 503
    assert "CITELINE_API_GENERATION_WAIT" in waited[0].json()["error"]["message"]
    for busy in (refused, waited[0]):
        assert busy.json()["error"]["code"] == "limit_exceeded" and int(busy.headers["Retry-After"]) >= 1
    assert rest[-1] == "complete"  # the answer holding the slot went on undisturbed


def test_a_client_that_goes_away_stops_its_generation(model_server: Server) -> None:
    before = model_server.ready()["generations"]
    client, response, _ = _open_stream(model_server)
    response.close()
    client.close()
    deadline = time.monotonic() + 10
    while model_server.ready()["generations"]["running"] and time.monotonic() < deadline:
        time.sleep(0.1)
    after = model_server.ready()["generations"]
    assert after["running"] == 0
    assert after["stopped_early"] == before["stopped_early"] + 1
    assert after["finished"] == before["finished"]
    assert "stopped: the client went away" in model_server.log_text()


def test_a_client_that_goes_away_stops_its_whole_answer_too(model_server: Server) -> None:
    # POST /chat sends nothing before the answer is complete: the client's leaving is the only signal.
    before = model_server.ready()["generations"]
    logged = model_server.log_text().count("stopped: the client went away")
    body = json.dumps({"question": QUESTION}).encode()
    host, port = model_server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(
            b"POST /chat HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (host.encode(), model_server.keys["admin"].encode(), len(body), body)
        )
        deadline = time.monotonic() + 30
        while model_server.ready()["generations"]["running"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert model_server.ready()["generations"]["running"] == 1
    left = time.monotonic()
    while model_server.ready()["generations"]["running"] and time.monotonic() < left + 10:
        time.sleep(0.05)
    after = model_server.ready()["generations"]
    assert after["running"] == 0
    assert after["stopped_early"] == before["stopped_early"] + 1
    assert after["finished"] == before["finished"]
    assert model_server.log_text().count("stopped: the client went away") == logged + 1
