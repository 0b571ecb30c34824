"""Job tests' parts: the real packaged model with faults a remote provider would have, Debian's
redis-server, and real ``citeline worker`` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import pytest
import redis
import sqlalchemy as sa

from citeline.embed import EMBEDDERS, Embedder
from citeline.embed.onnx import OnnxEmbedder
from citeline.engine import Citeline
from citeline.errors import EmbeddingError, StoreError
from citeline.registry import Provider
from citeline.settings import Settings
from citeline.store.catalog import DocumentInfo
from citeline.store.database import schema_name
from citeline.store.index import VersionVectors
from citeline.store.vectors import PgVectorIndex
from tests.conftest import REPO

#: ``gated:<name>`` embedders wait for their gate to open before embedding.
GATES: dict[str, threading.Event] = {}
_PACKAGED: list[Embedder] = []
_PACKAGED_LOCK = threading.Lock()


def _packaged(batch_size: int, threads: int) -> Embedder:
    """One packaged model for all these embedders (built here: a factory must not call get_embedder)."""
    with _PACKAGED_LOCK:
        if not _PACKAGED:
            _PACKAGED.append(OnnxEmbedder("all-MiniLM-L6-v2", batch_size=batch_size, threads=threads))
        return _PACKAGED[0]


class _Faulty:
    """The packaged embedder, failing its first ``failures`` batches of chunks as a remote provider that
    timed out. Single texts (queries, the warm-up's) always pass and are not counted, so a worker that
    warms up its query path first does not use up a failure."""

    def __init__(self, model: str, *, batch_size: int, threads: int) -> None:
        self.inner = _packaged(batch_size, threads)
        self.model_id = f"faulty:{model}"
        self.dimension, self.max_tokens = self.inner.dimension, self.inner.max_tokens
        self.failures = int(model.split("-", 1)[0])
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if len(texts) > 1:
            self.calls += 1
            if self.calls <= self.failures:
                raise EmbeddingError(f"{self.model_id}: the embedding server timed out (call {self.calls})")
        return self.inner.embed(texts)


class _Gated(_Faulty):
    """The packaged embedder, holding every batch of more than one text until its gate opens."""

    def __init__(self, model: str, *, batch_size: int, threads: int) -> None:
        super().__init__("0-" + model, batch_size=batch_size, threads=threads)
        self.model_id = f"gated:{model}"
        self.gate = GATES.setdefault(model, threading.Event())

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if len(texts) > 1:
            self.gate.wait(60)
        return self.inner.embed(texts)


class _GatedFailing(_Gated):
    """The gated embedder, failing every batch once its gate opens, as a remote provider that went away:
    a build that fails after what happened while it waited."""

    def __init__(self, model: str, *, batch_size: int, threads: int) -> None:
        super().__init__(model, batch_size=batch_size, threads=threads)
        self.model_id = f"gatedfail:{model}"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if len(texts) > 1:
            self.gate.wait(60)
            raise EmbeddingError(f"{self.model_id}: the embedding server went away")
        return self.inner.embed(texts)


def _gatedfail(model: str, settings: Settings) -> Embedder:
    return _GatedFailing(model, batch_size=settings.embed_batch_size, threads=settings.embed_threads)


def _faulty(model: str, settings: Settings) -> Embedder:
    return _Faulty(model, batch_size=settings.embed_batch_size, threads=settings.embed_threads)


def _gated(model: str, settings: Settings) -> Embedder:
    return _Gated(model, batch_size=settings.embed_batch_size, threads=settings.embed_threads)


@pytest.fixture(autouse=True)
def fault_injecting_providers() -> Iterator[None]:
    """``faulty:``, ``gated:``, ``gatedfail:`` and ``filegate:`` embedders, registered for these tests
    only (others list providers)."""
    register_test_providers()
    yield
    for name in ("faulty", "gated", "gatedfail", "filegate"):
        EMBEDDERS.remove(name)


def register_test_providers() -> None:
    """Register the fault-injecting embedders (in the tests, and in the workers they start)."""
    builds = (("faulty", _faulty), ("gated", _gated), ("gatedfail", _gatedfail), ("filegate", _filegated))
    for name, build in builds:
        EMBEDDERS.register(
            Provider(name, build=build, about="the packaged embedder, with faults", example=f"{name}:0-a")
        )


@pytest.fixture
def gate() -> Iterator[tuple[str, threading.Event]]:
    """A gated embedder's model name and its gate (opened at the end, whatever happened)."""
    name = f"g{len(GATES)}"
    event = GATES.setdefault(name, threading.Event())
    yield name, event
    event.set()


class _FileGated(_Faulty):
    """The packaged embedder, holding every batch of more than one text until the file ``<model>``
    exists in ``$CITELINE_TEST_GATES``: a gate that the test opens for a worker in another process."""

    def __init__(self, model: str, *, batch_size: int, threads: int) -> None:
        super().__init__("0-" + model, batch_size=batch_size, threads=threads)
        self.model_id = f"filegate:{model}"
        self.gate = Path(os.environ.get("CITELINE_TEST_GATES", "/nonexistent")) / model

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        deadline = time.monotonic() + 120
        while len(texts) > 1 and not self.gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.inner.embed(texts)


def _filegated(model: str, settings: Settings) -> Embedder:
    return _FileGated(model, batch_size=settings.embed_batch_size, threads=settings.embed_threads)


#: Settings a worker is started with (as CITELINE_* variables), taken from the test's settings.
_WORKER_SETTINGS = (
    "data_dir",
    "namespace",
    "embedding_model",
    "redis_url",
    "job_runner",
    "job_poll_seconds",
    "job_retries",
    "job_retry_delay",
    "job_soft_time_limit",
    "job_hard_time_limit",
)


@pytest.fixture
def broker(redis_server: str) -> str:
    """The Redis URL, emptied of what earlier tests left."""
    redis.Redis.from_url(redis_server).flushall()
    return redis_server


class Workers:
    """``citeline worker`` processes, each in a process group of its own so a kill takes its pool too."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, settings: Settings, *, concurrency: int = 1) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CITELINE_")}
        for name in _WORKER_SETTINGS:
            env[f"CITELINE_{name.upper()}"] = str(getattr(settings, name))
        if settings.database_url:  # a server shared by URL, as workers on other machines reach it
            env["CITELINE_DATABASE_URL"] = settings.database_url
        env["CITELINE_EMBED_THREADS"] = "1"
        env["CITELINE_TEST_GATES"] = str(self.logs)
        log = (self.logs / f"worker-{len(self.procs)}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.jobs.worker_main", "worker", "--concurrency", str(concurrency)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker and its pool processes, as a machine that dies would."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("worker-*.log")))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    started = Workers(tmp_path)
    yield started
    started.stop()


@pytest.fixture
def celery_settings(settings: Settings, broker: str) -> Iterator[Settings]:
    """The test's namespace with the celery runner; its schema dropped at the end."""
    yield settings.model_copy(
        update={
            "job_runner": "celery",
            "redis_url": broker,
            "job_poll_seconds": 0.2,
            "job_retry_delay": 0.2,
        }
    )
    with Citeline(settings) as cl, cl.engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))


def wait_for_status(cl: Citeline, doc: DocumentInfo, status: str, timeout: float = 120) -> DocumentInfo:
    """``doc`` as it is once its status is ``status``, or as it is when ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while (current := cl.document(str(doc.id))).status != status and time.monotonic() < deadline:
        time.sleep(0.05)
    return current


class UnreachableStore(PgVectorIndex):
    """pgvector written to as a vector store outside PostgreSQL is (Chroma): through :meth:`add` and
    :meth:`remove`, each of which fails with the :class:`StoreError` Chroma's client raises while its
    server is stopped, for as long as the file ``outage`` exists. Searches read the rows, as pgvector's do.
    """

    in_rows: ClassVar[bool] = False

    def __init__(self, outage: Path, settings: Settings) -> None:
        super().__init__(ef_search=settings.hnsw_ef_search, exact_below=settings.exact_search_below)
        self.outage = outage

    def _reach(self, action: str) -> None:
        if self.outage.exists():
            raise StoreError(
                f"the vector store failed to {action}: connection refused ({self.outage} exists)"
            )

    def add(self, conn: sa.Connection, model: str, batch: Sequence[VersionVectors]) -> None:
        self._reach(f"add {sum(len(v.chunk_ids) for v in batch)} vectors")
        rows = [{"id": i, "v": vec} for v in batch for i, vec in zip(v.chunk_ids, v.vectors, strict=True)]
        if rows:
            conn.execute(sa.text("UPDATE chunks SET embedding = :v WHERE id = :id"), rows)

    def remove(self, conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> None:
        self._reach(f"remove the vectors of {len(version_ids)} versions")
