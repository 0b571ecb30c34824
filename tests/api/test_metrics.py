"""``GET /metrics`` and the server's log lines, as an operator sees them: a real ``citeline serve`` (one
process, and two), scraped as Prometheus scrapes it, its log read as a collector reads it."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import Server, create_key, own_admin, start_server, stop_server

Labels = dict[str, str]


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` in exposition ``text`` whose labels include ``labels``."""
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def scrape(client: httpx.Client) -> str:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return response.text


def test_metrics_are_for_admin_keys_only(server: Server) -> None:
    with server.as_("none") as anonymous, server.as_("reader") as reader:
        assert anonymous.get("/metrics").status_code == 401
        assert reader.get("/metrics").status_code == 403


def test_a_scrape_counts_the_searches_answers_and_ingest_jobs_since_the_last(server: Server) -> None:
    with own_admin(server, "metrics") as admin:
        before = scrape(admin)
        for query in ("relief valve", "boiler", "assembly point"):
            assert admin.get("/search", params={"q": query}).status_code == 200
        document = server.documents["acme_note"]
        assert admin.get(f"/documents/{document}").status_code == 200
        answer = admin.post("/chat", json={"question": "At what pressure does the ACME relief valve open?"})
        assert answer.status_code == 200, answer.text
        upload = admin.post("/documents", files={"file": ("metrics-note.md", b"# Pumps\n\nPumps run daily.")})
        assert upload.status_code in (201, 202), upload.text
        uploaded = upload.json()["id"]
        try:
            deadline = time.monotonic() + 120
            while admin.get(f"/documents/{uploaded}").json()["status"] != "completed":
                assert time.monotonic() < deadline, "the upload was not built within 120 s"
                time.sleep(0.5)
            time.sleep(5.1)  # the catalog's counts are read at most every 5 s
            after = scrape(admin)
        finally:
            # The server's store is shared by the module's tests (tests/api/test_reading.py counts it).
            assert admin.delete(f"/documents/{uploaded}").status_code == 200

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    search = {"route": "/search", "method": "GET"}
    assert delta("citeline_http_requests_total", **search, status="200") == 3
    assert delta("citeline_http_request_duration_seconds_count", **search) == 3
    # By the route's template: a raw path (a document id) never becomes a label.
    assert delta("citeline_http_requests_total", route="/documents/{document_id}", method="GET") >= 1
    assert document not in after and uploaded not in after
    # The answer searches too.
    assert delta("citeline_searches_total", outcome="ok") >= 4
    assert delta("citeline_search_duration_seconds_count") >= 4
    assert delta("citeline_answers_started_total") == 1
    assert delta("citeline_answers_ended_total", outcome="finished") == 1
    assert delta("citeline_answer_duration_seconds_count") == 1
    assert value(after, "citeline_answer_slots_in_use") == 0
    assert value(after, "citeline_answer_slots") >= 1
    assert delta("citeline_ingest_jobs_total", outcome="done") == 1
    assert delta("citeline_document_versions", status="completed") == 1
    assert delta("citeline_documents") == 1
    assert delta("citeline_chunks") >= 1
    assert value(after, "citeline_document_versions", status="queued") == 0


@pytest.fixture(scope="module")
def two_workers_json(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``serve --workers 2`` over the test store, logging JSON."""
    env = {**server.env, "CITELINE_LOG_FORMAT": "json"}
    started = start_server(env, tmp_path_factory.mktemp("metrics") / "serve.log", "--workers", "2")
    started.keys["admin"] = server.keys["admin"]
    yield started
    stop_server(started)


def counting_processes(server: Server) -> set[int]:
    """The server processes that have counted something (their files in the serve's metrics folder)."""
    children = psutil.Process(server.process.pid).children()
    folder = Path(children[0].environ()["PROMETHEUS_MULTIPROC_DIR"])
    pids = {int(f.stem.rsplit("_", 1)[1]) for f in folder.glob("counter_*.db")}
    return pids & {c.pid for c in children}


def test_with_two_server_processes_every_scrape_adds_up_both(two_workers_json: Server) -> None:
    server = two_workers_json
    query = f"valve {uuid.uuid4().hex[:8]}"

    def searches(client: httpx.Client) -> float:
        return value(scrape(client), "citeline_http_requests_total", route="/search", method="GET")

    with server.as_("admin") as admin:
        start = searches(admin)
    made = 0
    # A new connection each time, so the kernel hands requests to either process.
    while made < 10 or (len(counting_processes(server)) < 2 and made < 200):
        with server.as_("admin") as admin:
            assert admin.get("/search", params={"q": query}).status_code == 200
        made += 1
    assert len(counting_processes(server)) == 2, "one process served every request"
    for _ in range(6):
        with server.as_("admin") as admin:
            assert searches(admin) - start == made


def json_lines(server: Server) -> list[dict[str, Any]]:
    lines = [line for line in server.log_text().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line: one JSON object


def test_json_log_lines_carry_the_request_and_never_the_query_or_the_key(
    two_workers_json: Server,
) -> None:
    server = two_workers_json
    secret = f"patient {uuid.uuid4().hex}"
    key = create_key(server.env, "--role", "admin", "--name", "json-log")
    with server.client(key["key"]) as client:
        response = client.get("/search", params={"q": secret, "n": 3})
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]
    deadline = time.monotonic() + 10
    while request_id not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = json_lines(server)
    assert all({"time", "level", "logger", "message", "request_id"} <= line.keys() for line in lines)
    (access,) = [
        line for line in lines if line["request_id"] == request_id and line["logger"] == "uvicorn.access"
    ]
    assert access["method"] == "GET" and access["route"] == "/search" and access["status"] == 200
    assert access["path"] == "/search?q=…&n=…"
    assert access["key_id"] == key["id"] and access["duration_ms"] > 0
    text = server.log_text()
    assert secret.split()[1] not in text and key["key"] not in text
    assert any(line["logger"].startswith("uvicorn.error") for line in lines)


def test_a_query_value_is_not_in_the_text_access_log_by_default(server: Server) -> None:
    secret = uuid.uuid4().hex
    with server.as_("admin") as admin:
        response = admin.get("/search", params={"q": f"valve {secret}"})
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]
    deadline = time.monotonic() + 10
    while request_id not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    (line,) = [line for line in server.log_text().splitlines() if request_id in line]
    assert '"GET /search?q=… HTTP/1.1" 200' in line
    assert secret not in server.log_text()
