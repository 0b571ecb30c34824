"""Celery workers under fire (``make soak``) and against the thread runner (``make bench``, ``workers``).

Both build the same documents: ``--documents`` files of real text, each 20 SciFact abstracts (about
30 KB, some 40 chunks), so a document takes long enough to be killed in the middle of.

- ``--soak``: two ``citeline worker`` processes (one process each) build every document while a
  killer SIGKILLs a random worker (its whole process group, as a machine that dies) ``--kills``
  times at random moments, starting a new one each time. Then every document must be completed with
  exactly one version whose chunks are all there, no chunk of another version anywhere, and every
  stored original present: anything else is counted as lost, stuck or duplicated, and the run fails.
- Throughput: the same documents built by the thread runner (``CITELINE_JOB_WORKERS=2`` in this
  process) and by two Celery worker processes, in documents per second from the first queued to
  the last completed; and the Celery pickup latency (enqueue to processing, the catalog's own clock
  at both ends) over documents sent one at a time to warm, idle workers.

Run alone with ``.venv/bin/python -m bench.workers [--soak] [--documents 50] [--kills 20]``.
Redis is Debian's ``redis-server`` (``make install``), started here on a free loopback port.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.run import SCIFACT
from citeline.engine import Citeline
from citeline.jobs.submit import Upload
from citeline.settings import Settings
from citeline.store.database import schema_name

ABSTRACTS_PER_DOCUMENT = 20


def documents(count: int) -> list[tuple[str, str]]:
    """``count`` markdown documents of ``ABSTRACTS_PER_DOCUMENT`` SciFact abstracts each."""
    out: list[tuple[str, str]] = []
    parts: list[str] = []
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            item = json.loads(line)
            parts.append(f"## {item['title']}\n\n{item['text']}")
            if len(parts) == ABSTRACTS_PER_DOCUMENT:
                out.append((f"abstracts-{len(out):03d}.md", "\n\n".join(parts)))
                parts = []
                if len(out) == count:
                    break
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def redis_server() -> Iterator[str]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is missing: `make install` installs it")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


class Workers:
    """``citeline worker`` processes, each in its own process group so a kill takes its pool too."""

    def __init__(self, settings: Settings, logs: Path) -> None:
        self.settings = settings
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_of: dict[int, Path] = {}
        self.started = 0

    def start(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CITELINE_")}
        env.update(
            CITELINE_DATA_DIR=str(self.settings.data_dir),
            CITELINE_NAMESPACE=self.settings.namespace,
            CITELINE_JOB_RUNNER="celery",
            CITELINE_REDIS_URL=self.settings.redis_url or "",
            CITELINE_JOB_POLL_SECONDS=str(self.settings.job_poll_seconds),
            CITELINE_JOB_RETRIES=str(self.settings.job_retries),
            CITELINE_JOB_RETRY_DELAY=str(self.settings.job_retry_delay),
            CITELINE_EMBED_THREADS="1",
        )
        path = self.logs / f"worker-{self.started}.log"
        log = path.open("wb")
        self.started += 1
        proc = subprocess.Popen(
            [sys.executable, "-m", "citeline.cli", "worker", "--concurrency", "1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        self.log_of[proc.pid] = path
        return proc

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def building(self) -> list[subprocess.Popen[bytes]]:
        """Live workers in the middle of a version: their log has a "building version V" line
        without its "finished version V"."""
        busy = []
        for proc in self.alive():
            text = self.log_of[proc.pid].read_text(errors="replace")
            started = set(re.findall(r"building version ([0-9a-f-]{36})", text))
            if started - set(re.findall(r"finished version ([0-9a-f-]{36})", text)):
                busy.append(proc)
        return busy

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.alive():
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _wait_ready(workers: Workers, count: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = sorted(workers.logs.glob("worker-*.log"))
        if sum(" ready." in p.read_text(errors="replace") for p in logs) >= count:
            return
        time.sleep(0.2)
    raise SystemExit(f"{count} workers were not ready within {timeout} s; logs in {workers.logs}")


def _submit_all(cl: Citeline, docs: list[tuple[str, str]]) -> list[uuid.UUID]:
    return [cl.submit(Upload(name, io.BytesIO(text.encode()))).document.id for name, text in docs]


def _wait_done(cl: Citeline, ids: list[uuid.UUID], timeout: float) -> dict[str, int]:
    """Wait until no document is queued or processing (or ``timeout``); the documents per status."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = [cl.document(str(i)).status for i in ids]
        if not {"queued", "processing", "pending"} & set(statuses) or time.monotonic() > deadline:
            return {s: statuses.count(s) for s in sorted(set(statuses))}
        time.sleep(0.5)


def _unfinished(cl: Citeline) -> int:
    with cl.engine.connect() as conn:
        query = "SELECT count(*) FROM documents WHERE status IN ('queued', 'processing')"
        return int(conn.execute(sa.text(query)).scalar_one())


def audit(cl: Citeline, ids: list[uuid.UUID]) -> dict[str, int]:
    """What a soak must leave: each document completed once, with all its chunks and its original."""
    lost = stuck = duplicated = 0
    with cl.engine.connect() as conn:
        chunks = {
            r[0]: int(r[1])
            for r in conn.execute(sa.text("SELECT document_id, count(*) FROM chunks GROUP BY document_id"))
        }
        for doc_id in ids:
            versions = cl.versions(doc_id)
            active = [v for v in versions if v.is_active]
            status = cl.document(str(doc_id)).status
            if status in ("queued", "processing", "pending"):
                stuck += 1
            elif status != "completed" or len(active) != 1:
                lost += 1
            if len(versions) != 1 or any(chunks.get(v.version_id, 0) and not v.is_active for v in versions):
                duplicated += 1
            for version in active:
                if chunks.get(version.version_id, 0) != version.vector_count or version.vector_count == 0:
                    lost += 1
                if version.file_path and not Path(version.file_path).is_file():
                    lost += 1
        orphans = int(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM chunks c LEFT JOIN documents d ON d.id = c.document_id "
                    "WHERE d.id IS NULL OR NOT d.is_active"
                )
            ).scalar_one()
        )
    return {"lost": lost, "stuck": stuck, "duplicated": duplicated, "orphan_chunks": orphans}


@contextmanager
def celery_namespace(
    base: Settings, prefix: str, logs: Path, **updates: Any
) -> Iterator[tuple[Citeline, Workers]]:
    """A fresh namespace served by two ready ``citeline worker`` processes over a Redis of its own;
    the workers stopped and the namespace dropped at the end."""
    with redis_server() as url:
        settings = base.model_copy(
            update={
                "namespace": f"{prefix}_{uuid.uuid4().hex[:8]}",
                "job_runner": "celery",
                "redis_url": url,
                "job_poll_seconds": 0.5,
                **updates,
            }
        )
        workers = Workers(settings, logs)
        with Citeline(settings) as cl:
            try:
                for _ in range(2):
                    workers.start()
                _wait_ready(workers, 2)
                yield cl, workers
            finally:
                workers.stop()
                with cl.engine.begin() as conn:
                    conn.execute(
                        sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE')
                    )


def soak(base: Settings, count: int, kills: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    docs = documents(count)
    logs = tempfile.mkdtemp(prefix="citeline-soak-")  # kept: the workers' logs tell what each kill hit
    # job_retries 8: a document may be hit by several of the kills; each hit costs it an attempt.
    with celery_namespace(base, "soak", Path(logs), job_retry_delay=0.5, job_retries=8) as (cl, workers):
        began = time.monotonic()
        ids = _submit_all(cl, docs)
        killed: list[float] = []

        def killer() -> None:
            while len(killed) < kills and time.monotonic() - began < 1800:
                # A worker starting up or between documents has nothing to lose: wait until one
                # is building, then kill it at a random moment of its build.
                if not workers.building():
                    if not _unfinished(cl):
                        return  # every document was built before the kills ran out
                    time.sleep(0.1)
                    continue
                time.sleep(rng.uniform(0.0, 2.0))
                candidates = workers.building()
                if not candidates:
                    continue
                workers.kill(rng.choice(candidates))
                killed.append(time.monotonic() - began)
                workers.start()

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        thread.join()
        statuses = _wait_done(cl, ids, timeout=1800)
        elapsed = time.monotonic() - began
        result = audit(cl, ids)
        attempts = [cl.document(str(i)).attempts for i in ids]
        builds = Counter(
            v
            for path in Path(logs).glob("worker-*.log")
            for v in re.findall(r"building version ([0-9a-f-]{36})", path.read_text(errors="replace"))
        )
    return {
        "soak_documents": count,
        "soak_worker_logs": logs,
        # Every kill hits a worker in the middle of a version (see Workers.building).
        "soak_kills_mid_build": len(killed),
        "soak_last_kill_s": max(killed) if killed else 0.0,
        "soak_statuses": statuses,
        "soak_seconds": elapsed,
        # Versions whose build was started more than once (the workers' logs), and the catalog's
        # attempts (a build killed before its claim committed is not counted there).
        "soak_versions_built_again": sum(n > 1 for n in builds.values()),
        "soak_builds_started": sum(builds.values()),
        "soak_documents_retried": sum(a > 1 for a in attempts),
        "soak_max_attempts": max(attempts),
        **{f"soak_{k}": v for k, v in result.items()},
    }


def throughput(base: Settings, count: int) -> dict[str, Any]:
    docs = documents(count)
    out: dict[str, Any] = {"workers_documents": count}
    # The thread runner: two job threads in this process, one embedder thread each.
    thread_settings = base.model_copy(
        update={"namespace": f"wthr_{uuid.uuid4().hex[:8]}", "job_workers": 2, "embed_threads": 1}
    )
    with Citeline(thread_settings) as cl:
        cl.warm_up()
        cl.start_jobs()
        began = time.monotonic()
        ids = _submit_all(cl, docs)
        statuses = _wait_done(cl, ids, timeout=1800)
        out["thread_documents_per_s"] = count / (time.monotonic() - began)
        out["thread_statuses"] = statuses
        out["thread_errors"] = sorted({e for i in ids if (e := cl.document(str(i)).error)})
        with cl.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(thread_settings.namespace)}" CASCADE'))
    with (
        tempfile.TemporaryDirectory(prefix="citeline-workers-") as logs,
        celery_namespace(base, "wcel", Path(logs)) as (cl, _workers),
    ):
        began = time.monotonic()
        ids = _submit_all(cl, docs)
        statuses = _wait_done(cl, ids, timeout=1800)
        out["celery_documents_per_s"] = count / (time.monotonic() - began)
        out["celery_statuses"] = statuses
        out["celery_errors"] = sorted({e for i in ids if (e := cl.document(str(i)).error)})
        pickups = []
        for i in range(10):
            name, text = docs[i % len(docs)]
            doc = cl.submit(Upload(f"again-{i}-{name}", io.BytesIO(f"{text}\n\nCopy {i}.".encode())))
            info = cl.wait(doc.document.id, timeout=300)
            if info.started_at and info.queued_at:
                pickups.append((info.started_at - info.queued_at).total_seconds() * 1e3)
        out["celery_pickup_p50_ms"] = statistics.median(pickups)
        out["celery_pickup_max_ms"] = max(pickups)
    out["celery_vs_thread"] = out["celery_documents_per_s"] / out["thread_documents_per_s"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--soak", action="store_true", help="Kill workers during an ingest and audit.")
    parser.add_argument("--documents", type=int, default=50)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    report = (
        soak(Settings(), args.documents, args.kills, args.seed)
        if args.soak
        else throughput(Settings(), args.documents)
    )
    report["load_average_at_start"] = load
    width = max(len(k) for k in report)
    for key, value in report.items():
        print(f"{key:<{width}}  {value:.3f}" if isinstance(value, float) else f"{key:<{width}}  {value}")
    print(json.dumps(report))
    if args.soak and any(report[f"soak_{k}"] for k in ("lost", "stuck", "duplicated", "orphan_chunks")):
        raise SystemExit("soak: documents were lost, stuck or duplicated (see above)")


if __name__ == "__main__":
    main()
