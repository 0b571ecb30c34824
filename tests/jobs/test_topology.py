"""The production topology on one machine: two ``citeline serve`` processes and two ``citeline worker``
processes sharing one PostgreSQL by URL and one Redis, with the stored originals on a shared folder
(compose.yaml's volume). A document uploaded to either server is built by a worker and found through
either server."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from citeline.access import Role
from citeline.engine import Citeline
from citeline.settings import Settings
from citeline.store.database import server_url
from tests.api.conftest import Server, launch_server, stop_server, wait_ready
from tests.jobs.conftest import Workers

MANUALS = {
    f"pump-{model}.md": f"# Pump {model}\n\nTo prime the {model} pump, open valve V{i} and run it for "
    f"{i + 2} minutes. The {model} pump is serviced every {i + 3} months."
    for i, model in enumerate(("AX-100", "BX-200", "CX-300", "DX-400", "EX-500", "FX-600"))
}


def _serve_env(settings: Settings, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITELINE_")}
    env.update(
        CITELINE_DATA_DIR=str(data_dir),
        CITELINE_DATABASE_URL=settings.database_url or "",
        CITELINE_NAMESPACE=settings.namespace,
        CITELINE_JOB_RUNNER="celery",
        CITELINE_REDIS_URL=settings.redis_url or "",
        CITELINE_LLM="extractive",
    )
    return env


def _wait_ready_log(workers: Workers, count: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = [p.read_text(errors="replace") for p in sorted(workers.logs.glob("worker-*.log"))]
        if len(logs) == count and all(" ready." in text for text in logs):
            return
        time.sleep(0.2)
    raise AssertionError(f"the workers did not start:\n{workers.log()}")


def test_two_servers_and_two_workers_share_one_database_by_url_and_one_redis(
    celery_settings: Settings, workers: Workers, tmp_path: Path
) -> None:
    # The test's embedded server, reached by URL as a managed PostgreSQL would be.
    shared = celery_settings.model_copy(update={"database_url": server_url(celery_settings)})
    with Citeline(shared) as cl:
        _, key = cl.create_key(Role.ADMIN, name="topology")
    for _ in range(2):
        workers.start(shared)
    servers: list[Server] = []
    try:
        for i in range(2):
            servers.append(launch_server(_serve_env(shared, shared.data_dir), tmp_path / f"serve-{i}.log"))
        for server in servers:
            wait_ready(server)
        _wait_ready_log(workers, 2)
        auth = {"Authorization": f"Bearer {key}"}
        uploaded: dict[str, str] = {}
        for i, (name, text) in enumerate(MANUALS.items()):
            response = httpx.post(
                f"{servers[i % 2].url}/documents",
                headers=auth,
                files={"file": (name, text.encode(), "text/markdown")},
                timeout=60,
            )
            assert response.status_code == 202, response.text
            uploaded[name] = response.json()["id"]
        # Each document is read back through the server it was not uploaded to.
        deadline = time.monotonic() + 300
        pending = dict(uploaded)
        while pending and time.monotonic() < deadline:
            for i, (name, doc_id) in enumerate(list(pending.items())):
                body = httpx.get(
                    f"{servers[(i + 1) % 2].url}/documents/{doc_id}", headers=auth, timeout=30
                ).json()
                assert body["status"] in {"queued", "processing", "completed"}, body
                if body["status"] == "completed":
                    del pending[name]
            time.sleep(0.2)
        assert not pending, f"not completed: {pending}\n{workers.log()}"
        for server in servers:
            hits = httpx.get(
                f"{server.url}/search", params={"q": "prime the CX-300 pump", "n": 3}, headers=auth
            )
            assert hits.status_code == 200 and hits.json()["results"][0]["document_name"] == "pump-CX-300.md"
            stats = httpx.get(f"{server.url}/stats", headers=auth).json()
            assert stats["documents"] == len(MANUALS), stats
        # Both workers took jobs off the one queue.
        for log in sorted(workers.logs.glob("worker-*.log")):
            assert ".md: added" in log.read_text(errors="replace"), workers.log()
    finally:
        for server in servers:
            stop_server(server)
