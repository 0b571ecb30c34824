"""``citeline reingest``: every flag, against the real store and model."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from citeline.cli import app
from citeline.engine import Citeline
from citeline.settings import Settings
from citeline.store.database import schema_name
from tests.conftest import write

runner = CliRunner()


@pytest.fixture
def kb(settings: Settings, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Two ingested documents (by name -> document id); the namespace dropped at the end."""
    write(tmp_path / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar and must be tested yearly.")
    write(tmp_path / "pumps.md", "# Pumps\n\nPrime the pump by filling its casing with water first.")
    code, _, stderr = run(settings, "ingest", str(tmp_path))
    assert code == 0, stderr
    with Citeline(settings) as cl:
        yield {d.name: str(d.id) for d in cl.documents()}
        with cl.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))


def run(settings: Settings, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(
        app, ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, *args], env=env
    )
    return result.exit_code, result.stdout, result.stderr


def versions(settings: Settings) -> dict[str, tuple[int, str]]:
    with Citeline(settings) as cl:
        return {d.name: (d.version, d.status) for d in cl.documents()}


def test_dry_run_lists_the_completed_documents_and_changes_nothing(
    settings: Settings, kb: dict[str, str]
) -> None:
    code, out, err = run(settings, "reingest", "--dry-run")
    assert code == 0, err
    assert f"would re-ingest {kb['pumps.md'][:8]} pumps.md (v1, completed)" in out
    assert f"would re-ingest {kb['valves.md'][:8]} valves.md (v1, completed)" in out
    assert "2 documents to re-ingest (dry run)" in err
    assert versions(settings) == {"pumps.md": (1, "completed"), "valves.md": (1, "completed")}


def test_every_completed_document_gets_a_new_version_built_here(
    settings: Settings, kb: dict[str, str]
) -> None:
    code, out, err = run(settings, "reingest")
    assert code == 0, err
    assert "reingested pumps.md: v2" in out and "reingested valves.md: v2" in out
    assert versions(settings) == {"pumps.md": (2, "completed"), "valves.md": (2, "completed")}


def test_document_id_reingests_only_that_document(settings: Settings, kb: dict[str, str]) -> None:
    code, out, err = run(settings, "reingest", "--document-id", kb["valves.md"][:8])
    assert code == 0, err
    assert "valves.md" in out and "pumps.md" not in out
    assert versions(settings) == {"pumps.md": (1, "completed"), "valves.md": (2, "completed")}


def test_status_selects_documents_by_their_current_status(
    settings: Settings, kb: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7 not really a pdf")
    assert run(settings, "ingest", str(tmp_path / "broken.pdf"))[0] == 65
    code, out, _ = run(settings, "reingest", "--status", "failed", "--dry-run")
    assert code == 0 and "broken.pdf (v1, failed)" in out and "valves.md" not in out
    # A failed ingest keeps no original: re-ingesting it says so, and exits as a failed ingest does.
    code, _, err = run(settings, "reingest", "--status", "failed")
    assert code == 65 and "broken.pdf" in err and "upload it again" in err
    assert versions(settings)["valves.md"] == (1, "completed")


def test_with_celery_workers_documents_are_queued_for_them_unless_sync(
    settings: Settings, kb: dict[str, str]
) -> None:
    # A broker nobody listens on: queued documents stay queued in the catalog for workers to come.
    celery = {"CITELINE_JOB_RUNNER": "celery", "CITELINE_REDIS_URL": "redis://127.0.0.1:9/0"}
    code, out, err = run(settings, "reingest", "--document-id", kb["pumps.md"], env=celery)
    assert code == 0, err
    assert "queued 1 document for citeline worker" in out
    with Citeline(settings) as cl:
        assert [(v.version, v.status) for v in cl.versions(kb["pumps.md"])] == [
            (1, "completed"),
            (2, "queued"),
        ]
    code, out, err = run(settings, "reingest", "--document-id", kb["valves.md"], "--sync", env=celery)
    assert code == 0, err
    assert "reingested valves.md: v2" in out


def test_cleanup_removes_old_unreferenced_originals_only(settings: Settings, kb: dict[str, str]) -> None:
    files = settings.data_dir / "files" / settings.namespace
    kept = sorted(p for p in files.rglob("*") if p.is_file())
    stale = write(files / "ab" / "ab0000.md", "an original no version refers to")
    hour_ago = time.time() - 7200
    os.utime(stale, (hour_ago, hour_ago))
    fresh = write(files / "cd" / "cd0000.md", "an upload whose version is being registered")
    code, out, _ = run(settings, "reingest", "--dry-run", "--cleanup")
    assert code == 0 and f"would remove {stale}" in out and str(fresh) not in out and stale.exists()
    code, out, err = run(settings, "reingest", "--cleanup")
    assert code == 0, err
    assert f"removed {stale}" in out and not stale.exists() and fresh.exists()
    with Citeline(settings) as cl:
        live = {d.file_path for d in cl.documents()}
    assert {str(p) for p in files.rglob("*.md") if p != fresh} == live and len(live) == len(kept)


def test_a_document_whose_new_version_fails_is_reported_failed_not_reingested(
    settings: Settings, kb: dict[str, str]
) -> None:
    with Citeline(settings) as cl:
        stored = cl.document(kb["valves.md"]).file_path
    assert stored is not None
    Path(stored).write_bytes(bytes(range(256)) * 8)  # the stored original went bad on disk
    code, out, err = run(settings, "reingest")
    assert code == 65
    assert "failed     valves.md: valves.md: binary content, not text" in err
    assert "reingested valves.md" not in out  # not its old version, still active, passed off as new
    assert "reingested pumps.md: v2" in out
    with Citeline(settings) as cl:
        assert [(v.version, v.status, v.is_active) for v in cl.versions(kb["valves.md"])] == [
            (1, "completed", True),
            (2, "failed", False),
        ]
