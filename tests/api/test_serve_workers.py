"""``citeline serve --workers N``: its processes survive being busy, one that dies is logged with why,
and a stop refuses new connections at once, as one process does. Each test runs the real command over
the session server's store."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import uvicorn

from citeline.api import supervisor
from tests.api.conftest import Server, start_server, stop_server
from tests.conftest import free_port


def server_processes(server: Server) -> list[psutil.Process]:
    """The processes that answer requests: the children uvicorn's supervisor spawned."""
    return [
        child
        for child in psutil.Process(server.process.pid).children()
        if "multiprocessing.spawn" in " ".join(child.cmdline())
    ]


def searches(server: Server, key: str) -> int:
    """The status of a search, on a new connection."""
    with server.client(key) as client:
        return client.get("/search", params={"q": "relief valve"}).status_code


@pytest.fixture
def two_workers(server: Server, tmp_path: Path) -> Iterator[Server]:
    started = start_server(server.env, tmp_path / "serve.log", "--workers", "2")
    started.keys = server.keys
    yield started
    stop_server(started)


def test_a_server_process_busy_for_longer_than_five_seconds_is_not_killed(two_workers: Server) -> None:
    """uvicorn's supervisor killed a child that had not answered its health check for 5 s, which the
    local answering model, holding the GIL, made it miss under load: the chats it served were reset.
    A stopped process answers no health check either, as a busy one does not."""
    busy, other = server_processes(two_workers)
    busy.suspend()  # SIGSTOP: its health-check thread cannot answer, as when a C call holds the GIL
    try:
        time.sleep(8)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):  # killed meanwhile: asserted below
            busy.resume()
    time.sleep(1.5)  # a few of the supervisor's rounds of health checks, each every 0.5 s
    assert busy.is_running() and busy.status() != psutil.STATUS_ZOMBIE
    assert {p.pid for p in server_processes(two_workers)} == {busy.pid, other.pid}
    assert "Child process" not in two_workers.log_text()  # no process died, nor was replaced
    assert searches(two_workers, two_workers.keys["reader"]) == 200


def test_a_server_process_that_dies_is_logged_with_why_and_replaced(server: Server, tmp_path: Path) -> None:
    started = start_server(
        {**server.env, "CITELINE_API_WORKER_HEALTHCHECK_SECONDS": "2"},
        tmp_path / "serve.log",
        "--workers",
        "2",
    )
    try:
        hung, killed = server_processes(started)
        hung.suspend()  # answers no health check: killed after the 2 s set
        killed.kill()  # killed from outside (as the OOM killer does)
        lines = (
            f"Child process [{hung.pid}] did not answer its health check within 2 s",
            f"Child process [{killed.pid}] was killed by SIGKILL",
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(line in started.log_text() for line in lines):
            time.sleep(0.2)
        assert all(line in started.log_text() for line in lines), started.log_text()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(server_processes(started)) < 2:
            time.sleep(0.5)
        assert {p.pid for p in server_processes(started)}.isdisjoint({hung.pid, killed.pid})
    finally:
        stop_server(started)


def test_uvicorns_supervisor_is_given_the_health_check_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn applies it too where it checks processes itself (a new process after SIGHUP)."""
    configs: list[uvicorn.Config] = []

    class Recorder:
        def __init__(self, config: uvicorn.Config, sockets: list[socket.socket], **_: object) -> None:
            configs.append(config)
            sockets[0].close()

        def run(self) -> None:
            pass

    monkeypatch.setattr(supervisor, "Supervisor", Recorder)
    app = "citeline.api.app:app_from_env"
    supervisor.run(app, workers=2, healthcheck_seconds=60, port=free_port(), log_config=None)
    assert configs[0].timeout_worker_healthcheck == 60


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def test_a_stopping_server_refuses_new_connections_at_once_and_finishes_the_requests_in_flight(
    two_workers: Server,
) -> None:
    """With one process, a stop closes the port and a new connection is refused at once, which clients
    and load balancers retry elsewhere. With --workers 2 the supervisor held the port open while its
    children finished: new connections waited unanswered until the server exited, then were reset."""
    body = json.dumps({"query": "relief valve"}).encode()
    in_flight = connect(two_workers.url)
    in_flight.sendall(
        b"POST /search HTTP/1.1\r\nhost: citeline\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {two_workers.keys['reader']}\r\n".encode()
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body[:5]  # the rest is sent after the stop: the request is in flight until then
    )
    time.sleep(0.5)
    os.kill(two_workers.process.pid, signal.SIGTERM)

    try:
        refused_after: float | None = None
        stopped_at = time.monotonic()
        while time.monotonic() - stopped_at < 5 and refused_after is None:
            try:
                connect(two_workers.url).close()
            except ConnectionRefusedError:
                refused_after = time.monotonic() - stopped_at
            time.sleep(0.1)
        assert refused_after is not None and refused_after < 2, "new connections were still taken"

        in_flight.sendall(body[5:])
        answer = in_flight.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    finally:
        in_flight.close()
    two_workers.process.wait(timeout=30)
