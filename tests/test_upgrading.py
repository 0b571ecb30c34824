"""Upgrading and downgrading citeline over a store (docs/deploying.md, "Upgrading"): the first process
of newer code migrates a namespace once and says so; older code refuses a namespace a newer citeline
migrated, in one line, and changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from typer.testing import CliRunner

from citeline import __version__
from citeline.cli import app
from citeline.engine import Citeline
from citeline.settings import Settings
from citeline.store.database import MIGRATIONS, head_revision, schema_name
from tests.conftest import free_port


def _alembic(settings: Settings) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["schema"] = schema_name(settings.namespace)
    return cfg


def _citeline(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``citeline`` command on the namespace of ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITELINE_")}
    env.update(CITELINE_DATA_DIR=str(settings.data_dir), CITELINE_NAMESPACE=settings.namespace)
    return subprocess.run(
        [sys.executable, "-m", "citeline.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _schema_state(cl: Citeline) -> list[tuple[str, ...]]:
    """The namespace's revision and every column of its tables: what a migration would change."""
    schema = schema_name(cl.settings.namespace)
    with cl.engine.connect() as conn:
        revision = conn.execute(sa.text(f'SELECT version_num FROM "{schema}".alembic_version')).all()
        columns = conn.execute(
            sa.text(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = :s ORDER BY 1, 2"
            ),
            {"s": schema},
        ).all()
    return [tuple(str(v) for v in row) for row in [*revision, *columns]]


def test_the_head_revision_is_alembics() -> None:
    """Read from the migrations' file names (no module imported); alembic reads their code."""
    script = ScriptDirectory.from_config(_alembic(Settings()))
    assert head_revision() == script.get_current_head()


def test_a_namespace_a_newer_citeline_migrated_is_refused_in_one_line_and_left_as_it_is(
    cl: Citeline,
) -> None:
    """It was a 290-line traceback ending in alembic's "Can't locate revision identified by '0024'",
    exit 1 (serve: 128 lines, 'Application startup failed', exit 3)."""
    schema = schema_name(cl.settings.namespace)
    with cl.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE \"{schema}\".alembic_version SET version_num = '9999'"))
    before = _schema_state(cl)
    expected = (
        f"error: namespace '{cl.settings.namespace}' is at schema revision 9999, which this citeline "
        f"(schema {head_revision()}) does not know: a newer citeline migrated it; upgrade citeline"
    )

    done = _citeline(cl.settings, "stats")
    assert done.returncode == 69, done.stderr
    assert done.stderr.strip().splitlines() == [expected]

    served = _citeline(cl.settings, "serve", "--open", "--port", str(free_port()))
    assert served.returncode == 69, served.stderr
    errors = [line for line in served.stderr.splitlines() if line.startswith("error:")]
    assert errors == [expected], served.stderr
    assert "Traceback" not in served.stderr

    assert _schema_state(cl) == before


def test_the_first_process_to_open_an_older_namespace_migrates_it_and_says_so_once(cl: Citeline) -> None:
    """Without -v: a migration cannot be undone, so even a read-only command says it made one. It was
    silent."""
    head = head_revision()
    script = ScriptDirectory.from_config(_alembic(cl.settings))
    previous = script.get_revision(head).down_revision
    assert isinstance(previous, str)
    cfg = _alembic(cl.settings)
    with cl.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, previous)

    first = _citeline(cl.settings, "stats", "--json")
    assert first.returncode == 0, first.stderr
    migrated = f"migrated namespace '{cl.settings.namespace}': schema {previous} -> {head}"
    assert [line for line in first.stderr.splitlines() if "migrated" in line] == [
        f"WARNING citeline.store.database: {migrated}"
    ], first.stderr

    again = _citeline(cl.settings, "stats", "--json")
    assert again.returncode == 0, again.stderr
    assert "migrated" not in again.stderr


def test_a_new_namespace_is_made_at_the_head_revision_without_a_migration_line(settings: Settings) -> None:
    done = _citeline(settings, "keys", "create", "--role", "admin", "--name", "first")
    assert done.returncode == 0, done.stderr
    assert "migrated" not in done.stderr


def test_version_names_the_schema_revision_it_migrates_to() -> None:
    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0, done.output
    assert done.stdout == f"citeline {__version__} (schema revision {head_revision()})\n"
