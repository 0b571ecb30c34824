"""Each limit, crossed: a 4xx that names the limit and its setting."""

from __future__ import annotations

from collections.abc import Iterator

from tests.api.conftest import LIMITS, Server


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
