"""A real ``citeline serve`` during a change of embedding model: searches answer from the old space and
say how far the migration is, ``GET /stats`` shows it, and after the switch the same server (which
read the old model at start) searches the new space."""

from __future__ import annotations

import time
from pathlib import Path

from tests.api.conftest import base_env, cli, create_key, ingest, start_server, stop_server
from tests.conftest import write
from tests.test_migrate_cli import DOCS

L6 = "onnx:all-MiniLM-L6-v2"
L3 = "onnx:paraphrase-MiniLM-L3-v2"


def test_the_api_reports_a_migration_and_follows_the_switch(api_data: Path, tmp_path: Path) -> None:
    env = {**base_env(api_data, CITELINE_LLM="extractive"), "CITELINE_NAMESPACE": "api_migration"}
    for name, text in DOCS.items():
        write(tmp_path / "docs" / name, text)
    ingest({**env, "CITELINE_EMBEDDING_MODEL": L6}, tmp_path / "docs")
    # Built with the new model, but held back: no other model can share all of the old top-10s.
    held = cli({**env, "CITELINE_EMBEDDING_MODEL": L3, "CITELINE_MIGRATION_MIN_OVERLAP": "1.0"}, "reingest")
    assert held.returncode == 1 and "did not pass" in held.stdout, held.stderr
    key = create_key(env, "--role", "admin")["key"]
    server = start_server({**env, "CITELINE_EMBEDDING_MODEL": L3}, tmp_path / "serve.log")
    try:
        with server.client(key) as api:
            stats = api.get("/stats").json()
            assert stats["embedding_model"] == L6 and stats["configured_embedding_model"] == L3
            assert (stats["migration"]["done"], stats["migration"]["total"]) == (12, 12)
            found = api.post("/search", json={"query": "relief valve pressure"}).json()
            assert found["results"][0]["document_name"] == "valves.md"
            assert found["migration"] == {"source_model": L6, "target_model": L3, "done": 12, "total": 12}

            strict = {**env, "CITELINE_EMBEDDING_MODEL": L3, "CITELINE_MIGRATION_MIN_OVERLAP": "1.0"}
            switched = cli(strict, "migrate", "--switch", "--force")
            assert switched.returncode == 0 and "switched (forced)" in switched.stdout, switched.stderr
            time.sleep(2.5)  # the server reads the migration's state at most every 2 s
            after = api.get("/search", params={"q": "relief valve pressure"}).json()
            assert after["results"][0]["document_name"] == "valves.md" and "migration" not in after
            stats = api.get("/stats").json()
            assert stats["embedding_model"] == L3 and "migration" not in stats
            assert "configured_embedding_model" not in stats
    finally:
        stop_server(server)
