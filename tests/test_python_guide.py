"""docs/python.md runs as written: its Python blocks, in order, are one script. Run here against a
namespace of the tests' embedded PostgreSQL, in a folder of their own, with the settings the page's
reader has (the environment's CITELINE_* variables) and the extractive answerer the page asks for (no
model to download), and type-checked as a program that embeds citeline is (mypy --strict)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from citeline.settings import Settings
from citeline.store.database import connect, schema_name
from tests.conftest import REPO

PAGE = REPO / "docs" / "python.md"


def python_blocks(text: str) -> list[str]:
    """The code of ``text``'s ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


def test_the_python_guide_runs_as_written(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = python_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 10, "docs/python.md lost its examples"
    namespace = f"t_{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("CITELINE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("CITELINE_NAMESPACE", namespace)
    monkeypatch.delenv("CITELINE_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    script: dict[str, object] = {"__name__": "__main__"}
    try:
        for number, block in enumerate(blocks, 1):
            exec(compile(block, f"docs/python.md, Python block {number}", "exec"), script)
    finally:
        settings = Settings(data_dir=data_dir, namespace=namespace, database_url=None)
        engine = connect(settings)
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(namespace)}" CASCADE'))
        engine.dispose()
    printed = capsys.readouterr().out
    # What the page says its examples print, the parts that do not depend on the ranking.
    for shown in ("added", "unchanged", "deleted parking.md", "ingest documents: needs admin access"):
        assert shown in printed, f"the guide's script printed no {shown!r}:\n{printed}"


def test_the_python_guide_passes_mypy_strict(tmp_path: Path) -> None:
    from mypy import api

    program = tmp_path / "guide.py"
    program.write_text("\n".join(python_blocks(PAGE.read_text(encoding="utf-8"))), encoding="utf-8")
    out, err, status = api.run(
        [
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(REPO / ".mypy_cache"),
            str(program),
        ]
    )
    assert status == 0, out + err
