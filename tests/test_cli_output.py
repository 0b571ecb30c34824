"""What the command line prints for a person: one line per source or row, whatever the names hold,
and tables that stay readable in a terminal. --json gives every value as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from citeline.cli import app
from citeline.settings import Settings
from citeline.types import printable
from tests.conftest import write

runner = CliRunner()


def _run(settings: Settings, *args: str, columns: int | None = None) -> tuple[int, str, str]:
    env = {"COLUMNS": str(columns)} if columns else None
    result = runner.invoke(
        app, ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, *args], env=env
    )
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("new\nline.txt", "new\\nline.txt"),
        ("tab\there.md", "tab\\there.md"),
        ("crlf\r.txt", "crlf\\r.txt"),
        ("red\x1b[31m.txt", "red\\x1b[31m.txt"),
        ("bell\x07\x7f\x9b.txt", "bell\\x07\\x7f\\x9b.txt"),
        ("txt.\u202eexe", "txt.\\u202eexe"),  # right-to-left override: shown as "exe.txt" otherwise
        ("line\u2028sep.txt", "line\\u2028sep.txt"),
        ("plain name, ünïcode 日本.md", "plain name, ünïcode 日本.md"),
    ],
)
def test_control_characters_are_shown_as_escapes(name: str, shown: str) -> None:
    assert printable(name) == shown


def test_a_name_holding_control_characters_stays_on_its_line_in_every_command(
    settings: Settings, tmp_path: Path
) -> None:
    folder = tmp_path / "kb"
    write(folder / "new\nline.txt", "The relief valve opens at 6 bar and is tested yearly.")
    write(folder / "red\x1b[31m.md", "Prime the pump for two minutes before the first start.")
    (folder / "bin\nary.txt").write_bytes(b"\x00\x01\x02\x03" * 64)

    code, out, err = _run(settings, "ingest", str(folder))
    assert code == 65, err
    lines = err.splitlines()
    assert len(lines) == 4, err  # one line per source, then the summary
    assert any(line.startswith(f"added      {folder}/new\\nline.txt: v1, 1 page") for line in lines)
    assert any(line.startswith(f"added      {folder}/red\\x1b[31m.md: v1") for line in lines)
    assert any(line.startswith(f"failed     {folder}/bin\\nary.txt: ") for line in lines)
    assert "\x1b" not in err

    code, out, err = _run(settings, "ingest", str(folder), "--json")
    names = {Path(json.loads(line)["source"]).name for line in out.splitlines()}
    assert names == {"new\nline.txt", "red\x1b[31m.md", "bin\nary.txt"}  # JSON keeps them as they are

    code, out, err = _run(settings, "docs", "list")
    assert code == 0, err
    rows = {line.split()[1]: line.split()[0] for line in out.splitlines()[3:] if line.strip()}
    assert set(rows) == {"new\\nline.txt", "red\\x1b[31m.md", "bin\\nary.txt"}, out
    assert "\x1b" not in out

    code, out, err = _run(settings, "docs", "show", rows["new\\nline.txt"])
    assert code == 0 and "name  new\\nline.txt" in out, err
    code, out, err = _run(settings, "search", "relief valve", "--top-k", "1")
    assert code == 0 and "[1] new\\nline.txt p.1" in out, err
    code, out, err = _run(settings, "ask", "When does the relief valve open?", "--llm", "extractive")
    assert code == 0 and "new\\nline.txt p.1" in out, err
    code, out, err = _run(settings, "reingest", "--dry-run")
    assert code == 0 and rows["new\\nline.txt"] + " new\\nline.txt (v1, completed)" in out, err
    code, out, err = _run(settings, "docs", "delete", rows["red\\x1b[31m.md"])
    assert code == 0 and out == "deleted red\\x1b[31m.md (1 version)\n", out


@pytest.mark.parametrize("columns", [80, 120, None])
def test_docs_list_cuts_long_cells_with_an_ellipsis_and_keeps_each_document_on_one_line(
    settings: Settings, tmp_path: Path, columns: int | None
) -> None:
    long_name = "pump-maintenance-" + "L" * 229 + ".txt"  # 250 characters
    write(tmp_path / long_name, "Prime the pump for two minutes before the first start.")
    write(tmp_path / "valves.md", "The relief valve opens at 6 bar.")
    # A failure's message is the status cell: a long one (the supported types, named one by one).
    write(tmp_path / "budget.xlsx", "not a spreadsheet citeline reads")
    files = [str(tmp_path / n) for n in (long_name, "valves.md", "budget.xlsx")]
    code, _, err = _run(settings, "ingest", *files, "--scope", "plant-" + "a" * 60, "--tag", "t" * 80)
    assert code == 65, err

    code, out, err = _run(settings, "docs", "list", columns=columns)
    assert code == 0, err
    lines = out.rstrip("\n").splitlines()
    rows = [line for line in lines[3:] if line.strip()]
    assert len(rows) == 3, out  # one line each: nothing folded onto a second line

    def row(name: str) -> str:
        return next(row for row in rows if row.split()[1].startswith(name[:6]))

    if columns:  # a terminal's width is kept
        assert max(len(line) for line in lines) <= columns, out
    else:  # piped, each row at its natural width for grep, but no cell beyond 100 characters
        assert row(long_name).split()[1] == long_name[:99] + "…"

    assert "…" in row(long_name) and long_name not in out
    assert row("valves.md").split()[1] == "valves.md"  # a short name is whole
    assert "failed: " in row("budget.xlsx") and "supported: .csv" not in out  # its message is cut
    assert all(len(row.split()[0]) == 8 for row in rows), out  # the id `docs show` takes is never cut

    code, out, _ = _run(settings, "docs", "list", "--json")
    docs = json.loads(out)
    assert long_name in {d["name"] for d in docs}  # whole in the JSON
    assert any(d["error"] and d["error"].endswith(".txt") for d in docs)
