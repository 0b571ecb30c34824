"""A real ``citeline serve`` process on a free loopback port, over its own data directory (embedded
PostgreSQL, the real embedder), with documents ingested and keys created by the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import PDFS, REPO, free_port, own_data_dir, write

# The shared fixtures sit beside the main checkout; a worktree is one level further down.
SAMPLE_PDF = next(
    (
        folder / "multicol_latex_pypdf_sample.pdf"
        for folder in (PDFS, *(p / "shared" / "fixtures" / "pdfs" for p in REPO.parents))
        if (folder / "multicol_latex_pypdf_sample.pdf").is_file()
    ),
    PDFS / "multicol_latex_pypdf_sample.pdf",
)
STARTUP_SECONDS = 180
NAMESPACE = "api"
#: Tight limits, so each can be crossed in a few requests.
LIMITS = {
    "CITELINE_API_MAX_BODY_BYTES": "65536",
    "CITELINE_API_MAX_QUESTION_CHARS": "500",
    "CITELINE_API_RATE_LIMIT": "120",
}


def base_env(data_dir: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITELINE_")}
    env.update(CITELINE_DATA_DIR=str(data_dir), CITELINE_NAMESPACE=NAMESPACE, **more)
    return env


def cli(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``citeline`` command against the server's data directory."""
    return subprocess.run(
        [sys.executable, "-m", "citeline.cli", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def create_key(env: Mapping[str, str], *args: str) -> dict[str, Any]:
    done = cli(env, "keys", "create", *args, "--json")
    assert done.returncode == 0, done.stderr
    created: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return created


@dataclass
class Server:
    """A running ``citeline serve`` and what the tests need to talk to it."""

    url: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path
    keys: dict[str, str] = field(default_factory=dict)
    documents: dict[str, str] = field(default_factory=dict)
    #: The status and body of a request made before any key existed.
    before_keys: tuple[int, dict[str, Any]] | None = None

    def client(self, key: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120, **kwargs)

    def as_(self, who: str) -> httpx.Client:
        """A client carrying the key of ``who`` (``none`` carries no key)."""
        return self.client(self.keys.get(who))

    def ready(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.url}/health/ready", timeout=30).json()
        return body

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def launch_server(env: dict[str, str], log: Path, *args: str, main: str = "citeline.cli") -> Server:
    """Start ``citeline serve`` on a free loopback port without waiting for it (see :func:`wait_ready`);
    ``main`` is the module run as ``citeline`` (one of the tests' own, to start a server with a fault)."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", main, "serve", "--port", str(port), *args],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Server(f"http://127.0.0.1:{port}", env, process, log)


def wait_ready(server: Server) -> Server:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"citeline serve exited with {server.process.returncode}:\n{server.log_text()}"
            )
        try:
            if httpx.get(f"{server.url}/health/ready", timeout=5).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    stop_server(server)
    raise RuntimeError(f"citeline serve was not ready within {STARTUP_SECONDS} s:\n{server.log_text()}")


def start_server(env: dict[str, str], log: Path, *args: str, main: str = "citeline.cli") -> Server:
    return wait_ready(launch_server(env, log, *args, main=main))


def add_keys(server: Server, env: Mapping[str, str], readers: Mapping[str, list[str]]) -> None:
    """An admin key (``server.keys["admin"]``, made with the CLI) and a reader key of each scope list in
    ``readers``, by name, made over HTTP as an admin makes them."""
    server.keys["admin"] = create_key(env, "--role", "admin")["key"]
    with server.as_("admin") as admin:
        for name, scopes in readers.items():
            server.keys[name] = admin.post("/keys", json={"role": "reader", "scopes": scopes}).json()["key"]


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


def ingest(env: Mapping[str, str], path: Path, *args: str) -> dict[str, str]:
    """Ingest a file or folder with the CLI; the document id of each file, by file name."""
    done = cli(env, "ingest", str(path), *args, "--json")
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert all(r["outcome"] == "added" for r in results), results
    return {Path(r["source"]).name: r["document_id"] for r in results}


@pytest.fixture(scope="session")
def api_data() -> Iterator[Path]:
    with own_data_dir("citeline-api-") as path:
        yield path


@pytest.fixture(scope="session")
def server(api_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The server most tests use: the extractive answerer, tight limits, three labelled sources.

    ``keys``: admin, reader (scope acme), other (a reader of scope globex), revoked (a revoked acme
    reader). ``documents``: acme (a 3-page PDF in scope acme), acme_note (scope acme), globex (scope
    globex), universal (no scope).
    """
    env = base_env(api_data, CITELINE_LLM="extractive", **LIMITS)
    corpus = tmp_path_factory.mktemp("api-corpus")
    write(
        corpus / "acme" / "acme-valves.md",
        "# ACME valves\n\nThe ACME relief valve opens at 6 bar. The site engineer tests it every year.",
    )
    (corpus / "acme" / "latex-sample.pdf").write_bytes(SAMPLE_PDF.read_bytes())
    write(
        corpus / "globex-boiler.md",
        "# Globex boiler\n\nThe Globex boiler relief valve opens at 12 bar. It is serviced in spring.",
    )
    write(
        corpus / "assembly.txt",
        "In a fire, everyone gathers at the north car park assembly point. Relief valves are never blocked.",
    )
    # The first ingest starts the database; the server then boots while the others run.
    acme = ingest(env, corpus / "acme", "--scope", "acme", "--category", "plant/valves", "--tag", "safety")
    started = launch_server(env, tmp_path_factory.mktemp("api-log") / "serve.log")
    try:
        documents = {
            "acme_note": acme["acme-valves.md"],
            "acme": acme["latex-sample.pdf"],
            "globex": ingest(
                env, corpus / "globex-boiler.md", "--scope", "globex", "--category", "plant/boilers"
            )["globex-boiler.md"],
            "universal": ingest(env, corpus / "assembly.txt", "--category", "site")["assembly.txt"],
        }
        wait_ready(started)
        # Before any key exists, the server (not in open mode) refuses requests.
        no_keys = httpx.get(f"{started.url}/stats", timeout=30)
        started.before_keys = (no_keys.status_code, no_keys.json())
        # The first key from the command line (test_serve tests it further), the rest from the API.
        started.keys["admin"] = create_key(env, "--role", "admin")["key"]
        with started.as_("admin") as admin:

            def made(body: dict[str, Any]) -> dict[str, Any]:
                response = admin.post("/keys", json=body)
                assert response.status_code == 201, response.text
                key: dict[str, Any] = response.json()
                return key

            started.keys["reader"] = made({"role": "reader", "scopes": ["acme"]})["key"]
            started.keys["other"] = made({"role": "reader", "scopes": ["globex"]})["key"]
            revoked = made({"role": "reader", "scopes": ["acme"]})
            assert admin.delete(f"/keys/{revoked['id']}").status_code == 200
        started.keys["revoked"] = revoked["key"]
        started.documents.update(documents)
        yield started
    finally:
        stop_server(started)


@dataclass(frozen=True)
class Sse:
    """One server-sent event; ``name`` is ``:`` for a comment line (the heartbeat)."""

    name: str
    data: dict[str, Any]


def read_events(lines: Iterator[str]) -> Iterator[Sse]:
    """Parse a text/event-stream as it arrives."""
    name, data = "message", ""
    for line in lines:
        if line.startswith(":"):
            yield Sse(":", {"comment": line[1:].strip()})
        elif line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data += line.removeprefix("data:").strip()
        elif not line and data:
            yield Sse(name, json.loads(data))
            name, data = "message", ""


@contextmanager
def own_admin(server: Server, name: str) -> Iterator[httpx.Client]:
    """A client with an admin key of its own, named ``name``: a test module's requests then count
    against no other module's rate limit."""
    with server.as_("admin") as first:
        made = first.post("/keys", json={"role": "admin", "name": name})
    assert made.status_code == 201, made.text
    with server.client(made.json()["key"]) as client:
        yield client
