"""``citeline keys`` and ``citeline serve``'s open mode, through the real command."""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from citeline.cli import app
from citeline.settings import Settings
from tests.api.conftest import STARTUP_SECONDS, Server, base_env, cli, start_server, stop_server
from tests.conftest import free_port

runner = CliRunner()


def test_keys_create_prints_the_key_once_as_the_last_json_line(server: Server) -> None:
    done = cli(server.env, "keys", "create", "--role", "reader", "--scope", "a", "--scope", "b", "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout.strip().splitlines()[-1])
    assert made["key"].startswith("cl_") and made["scopes"] == ["a", "b"] and made["role"] == "reader"
    listed = cli(server.env, "keys", "list", "--json")
    assert made["id"] in {k["id"] for k in json.loads(listed.stdout)}
    assert made["prefix"] in listed.stdout and made["key"] not in listed.stdout
    with server.client(made["key"]) as client:
        assert client.get("/stats").status_code == 200
    assert cli(server.env, "keys", "revoke", made["id"]).returncode == 0
    # Revoked by another process: the server trusts what it checked for CITELINE_API_KEY_CACHE_SECONDS
    # (5 s by default), then refuses the key.
    deadline = time.monotonic() + Settings().api_key_cache_seconds + 5
    with server.client(made["key"]) as client:
        while (status := client.get("/stats").status_code) == 200 and time.monotonic() < deadline:
            time.sleep(0.25)
    assert status == 401


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--role", "reader"), "--scope"),
        (("--role", "admin", "--scope", "a"), "every scope"),
        (("--role", "reader", "--scope", "a", "--all-scopes"), "not both"),
    ],
)
def test_keys_create_refuses_a_key_whose_reach_is_unclear(args: tuple[str, ...], message: str) -> None:
    # Refused before the store is opened: the command runs in this process.
    result = runner.invoke(app, ["keys", "create", *args])
    assert result.exit_code == 2
    assert message in result.stderr


def test_open_mode_is_refused_on_a_public_address(api_data: Path) -> None:
    result = runner.invoke(app, ["--data-dir", str(api_data), "serve", "--open", "--host", "0.0.0.0"])
    assert result.exit_code == 78
    assert "open mode" in result.stderr and "0.0.0.0" in result.stderr


@pytest.mark.parametrize("port", ["0", "70000"])
def test_a_port_out_of_range_is_refused_not_wrapped_around(api_data: Path, port: str) -> None:
    # 70000 would bind 70000 mod 65536 = 4464 while the log said 70000.
    result = runner.invoke(app, ["--data-dir", str(api_data), "serve", "--port", port])
    assert result.exit_code == 2 and "--port" in result.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_start_up_failure_is_one_error_line_and_its_exit_code(tmp_path: Path, workers: str) -> None:
    """A database out of reach at start-up is reported as every command reports it (docs/troubleshooting):
    one ``error:`` line and StoreError's 69. It was a traceback and exit 3 (0 with two workers)."""
    closed = f"postgresql://citeline@127.0.0.1:{free_port()}/citeline"
    env = base_env(tmp_path / "data", CITELINE_DATABASE_URL=closed)
    done = cli(env, "serve", "--open", "--port", str(free_port()), "--workers", workers)
    assert done.returncode == 69, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot reach PostgreSQL at" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert "Waiting for application startup." in done.stderr  # uvicorn's own lines stay


@pytest.fixture(scope="module")
def open_server(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server in open mode over the same store as ``server``."""
    started = start_server(server.env, tmp_path_factory.mktemp("open") / "serve.log", "--open")
    yield started
    stop_server(started)


def test_open_mode_answers_without_a_key_and_says_so_loudly(open_server: Server) -> None:
    response = httpx.get(f"{open_server.url}/keys", timeout=30)
    assert response.status_code == 200
    assert "OPEN MODE" in open_server.log_text()


def test_an_idle_connection_is_kept_open_longer_than_uvicorns_five_seconds(server: Server) -> None:
    """A pooled connection reused after a pause must still be open: uvicorn's default keep-alive of 5 s
    dropped requests of clients (and would of a load balancer) reusing a connection it was closing."""
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/health/live")
        assert conn.getresponse().read() == b'{"status":"live"}'
        time.sleep(6.5)
        conn.request("GET", "/health/live")  # on the same socket: RemoteDisconnected if it was closed
        assert conn.getresponse().read() == b'{"status":"live"}'
    finally:
        conn.close()


def gone(path: Path, timeout: float = 30.0) -> bool:
    """Whether ``path`` (a server's pid file) is gone within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return not path.exists()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_server_stopped_by_sigterm_stops_its_embedded_database(tmp_path: Path, workers: int) -> None:
    # A store of its own: the session's other servers hold theirs.
    data = tmp_path / "data"
    started = start_server(base_env(data), tmp_path / "serve.log", "--open", "--workers", str(workers))
    postmaster = data / "pg" / "postmaster.pid"
    assert postmaster.exists()

    started.process.terminate()  # SIGTERM, as systemd, docker stop and kill send it
    started.process.wait(timeout=60)

    assert gone(postmaster), "the embedded PostgreSQL outlived citeline serve"
    assert json.loads((data / "pg" / ".handle_pids.json").read_text()) == []


def test_a_server_killed_outright_does_not_keep_the_embedded_database_running(tmp_path: Path) -> None:
    """SIGKILL leaves the killed server's pid in the list of holders; the next process to let go must
    not wait for it, or the database runs on with no citeline process left."""
    data = tmp_path / "data"
    postmaster = data / "pg" / "postmaster.pid"
    killed = start_server(base_env(data), tmp_path / "killed.log", "--open")
    killed.process.kill()  # SIGKILL: it never lets go
    killed.process.wait(timeout=60)
    assert postmaster.exists()  # nothing stops the database in the meantime
    assert killed.process.pid in json.loads((data / "pg" / ".handle_pids.json").read_text())

    started = start_server(base_env(data), tmp_path / "serve.log", "--open")
    started.process.terminate()
    started.process.wait(timeout=60)

    assert gone(postmaster), "a holder killed outright kept the embedded PostgreSQL running"
    assert json.loads((data / "pg" / ".handle_pids.json").read_text()) == []


def test_a_reranker_model_that_cannot_be_loaded_stops_the_server_at_start_up(
    server: Server, tmp_path: Path
) -> None:
    """A misconfigured reranker was found by the first search (500 ``config``) of a server that said
    it was ready; it is refused at start-up as every setting is: one ``error:`` line and exit 78."""
    env = dict(server.env, CITELINE_RERANKER="cross-encoder:/nonexistent")
    log, port = tmp_path / "serve.log", free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "citeline.cli", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    deadline = time.monotonic() + STARTUP_SECONDS
    ready = False
    while process.poll() is None and not ready and time.monotonic() < deadline:
        time.sleep(0.5)
        with contextlib.suppress(httpx.TransportError):
            ready = httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=5).status_code == 200
    if process.poll() is None:
        process.kill()
        process.wait()
        pytest.fail(
            f"citeline serve started (ready: {ready}) with a reranker it cannot load:\n{log.read_text()}"
        )
    code, stderr = process.returncode, log.read_text()
    assert code == 78, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "/nonexistent" in errors[0] and "reranker" in errors[0], stderr
    assert "Traceback" not in stderr
