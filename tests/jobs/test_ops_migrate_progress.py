"""``citeline reingest`` migrating here (the thread runner): what it prints while it waits."""

from __future__ import annotations

import threading
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
def kb(settings: Settings, tmp_path: Path) -> Iterator[Settings]:
    write(tmp_path / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar and is tested yearly.")
    write(tmp_path / "pumps.md", "# Pumps\n\nPrime the pump by filling its casing with water first.")
    with Citeline(settings) as cl:
        cl.ingest([tmp_path])
    yield settings
    with Citeline(settings) as cl, cl.engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))


def test_a_migration_waited_for_here_prints_its_progress_when_it_changes_not_every_poll(
    kb: Settings, gate: tuple[str, threading.Event]
) -> None:
    # A migration of a large namespace printed the same progress line every two seconds for as long
    # as a document took: hundreds of identical lines.
    name, opened = gate
    threading.Timer(7.0, opened.set).start()  # three polls and more with nothing built
    result = runner.invoke(
        app,
        ["--data-dir", str(kb.data_dir), "--namespace", kb.namespace, "reingest"],
        env={"CITELINE_EMBEDDING_MODEL": f"gated:{name}", "CITELINE_MIGRATION_MIN_OVERLAP": "0"},
    )
    assert result.exit_code == 0, result.stderr
    assert "switched" in result.stdout
    waiting = [line for line in result.stderr.splitlines() if "0/2 documents built" in line]
    assert len(waiting) == 1, result.stderr
