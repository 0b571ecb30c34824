"""Shared fixtures: one real embedded PostgreSQL for the session, a fresh namespace (schema) per test,
and a real Redis for the tests that need one."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.database import release_server, schema_name

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
PDFS = SHARED / "fixtures" / "pdfs"


@contextmanager
def own_data_dir(prefix: str = "citeline-test-") -> Iterator[Path]:
    """A data directory for an embedded PostgreSQL of its own, removed afterwards with its server.

    Outside pytest's temporary folders: a pytest session starting meanwhile (another suite on the
    machine) makes /tmp/pytest-of-<user> private again, and a server started after that, running as
    the wheel's own system user, can no longer reach a folder below it."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        release_server(Settings(data_dir=path, database_url=None))
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def fresh_data_dir() -> Iterator[Callable[[str], Path]]:
    """Makes data directories as :func:`own_data_dir` does, for module fixtures that start servers;
    removed when the session ends, after those servers have stopped."""
    with ExitStack() as stack:
        yield lambda prefix: stack.enter_context(own_data_dir(prefix))


@pytest.fixture(scope="session")
def data_dir() -> Iterator[Path]:
    with own_data_dir() as path:
        yield path


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, namespace=f"t_{uuid.uuid4().hex[:12]}", database_url=None)


@pytest.fixture
def cl(settings: Settings) -> Iterator[Citeline]:
    with Citeline(settings) as instance:
        yield instance
        with instance.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@contextmanager
def namespace_again(settings: Settings) -> Iterator[Citeline]:
    """A second namespace beside that of ``settings``: to a process that holds arrays of the first, what
    a namespace dropped and made again looks like (another epoch, a keyword log started anew). Dropped
    on exit."""
    other = settings.model_copy(update={"namespace": settings.namespace + "_again"})
    with Citeline(other) as again:
        try:
            yield again
        finally:
            with again.engine.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(other.namespace)}" CASCADE'))


def ingest_until_the_log_reaches(cl: Citeline, folder: Path, position: int) -> None:
    """Ingest small files into ``cl`` one at a time until its keyword log's last position is
    ``position`` (asserted: it must not pass it)."""
    for i in range(position + 1):
        with cl.engine.connect() as conn:
            if catalog.log_positions(conn).last >= position:
                break
        cl.ingest([write(folder / f"salt{i}.txt", f"Less salt lowers blood pressure, {i} times.")])
    with cl.engine.connect() as conn:
        assert catalog.log_positions(conn).last == position


def free_port() -> int:
    """A loopback port nothing listens on now, for a server a test starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's redis-server on a free loopback port, keeping nothing on disk."""
    exe = shutil.which("redis-server")
    assert exe, "redis-server is missing: `make install` installs it"
    port = free_port()
    folder = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            f"{folder}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(10)
