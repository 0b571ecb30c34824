"""``citeline reingest`` with another CITELINE_EMBEDDING_MODEL, and ``citeline migrate``: the shell of
a model migration, against the real store and both packaged models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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

L6 = "onnx:all-MiniLM-L6-v2"
L3 = "onnx:paraphrase-MiniLM-L3-v2"
runner = CliRunner()
#: Twelve one-chunk documents: more than a top-10, so two models' top-10s differ somewhere, and an
#: overlap check demanding 100% refuses the switch (the models are fixed: it always does).
DOCS = {
    "valves.md": "# Valves\n\nThe relief valve opens at 6 bar and must be tested yearly.",
    "pumps.md": "# Pumps\n\nPrime the pump by filling its casing with water first.",
    "fire.txt": "In a fire, everyone gathers at the north car park assembly point.",
    "boiler.txt": "The boiler is serviced in spring; its burner nozzle is replaced every two years.",
    "forklift.txt": "Only trained drivers may operate a forklift, at no more than 10 km/h.",
    "lab.txt": "Lab coats and safety glasses are worn in the chemistry lab at all times.",
    "crane.txt": "The overhead crane is inspected every month by the maintenance team.",
    "ladder.txt": "Ladders are checked for cracked rungs before each use.",
    "noise.txt": "Hearing protection is required wherever noise exceeds 85 decibels.",
    "spill.txt": "Chemical spills are covered with absorbent pads and reported to the supervisor.",
    "first-aid.txt": "First-aid kits hang beside every exit and are restocked each quarter.",
    "badges.txt": "Visitors wear a badge and are escorted while on site.",
}


def run(settings: Settings, *args: str, **env: str) -> tuple[int, str, str]:
    result = runner.invoke(
        app, ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, *args], env=env
    )
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def kb(settings: Settings, tmp_path: Path) -> Iterator[Settings]:
    """The documents of :data:`DOCS` ingested with L6; the namespace dropped at the end."""
    for name, text in DOCS.items():
        write(tmp_path / name, text)
    code, _, stderr = run(settings, "ingest", str(tmp_path), CITELINE_EMBEDDING_MODEL=L6)
    assert code == 0, stderr
    yield settings
    with Citeline(settings) as cl, cl.engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))


def test_reingest_with_a_new_model_migrates_checks_and_switches_only_when_told(kb: Settings) -> None:
    # An overlap of 100% cannot be met by another model: the check refuses the switch.
    strict = {"CITELINE_EMBEDDING_MODEL": L3, "CITELINE_MIGRATION_MIN_OVERLAP": "1.0"}
    code, out, err = run(kb, "reingest", "--dry-run", **strict)
    assert code == 0 and "12 documents to migrate from onnx:all-MiniLM-L6-v2 to onnx:paraphrase" in err
    code, out, err = run(kb, "reingest", **strict)
    assert code == 1, err
    assert "migrating from onnx:all-MiniLM-L6-v2 to onnx:paraphrase-MiniLM-L3-v2: 12 documents queued" in out
    assert "quality check on 12 of the namespace's chunks as queries" in out and "did not pass" in out
    assert "not switched" in err

    code, out, err = run(kb, "migrate", "--json", CITELINE_EMBEDDING_MODEL=L3)
    status = json.loads(out)
    assert status["served_model"] == L6 and status["configured_model"] == L3
    assert status["migration"]["done"] == status["migration"]["total"] == 12
    assert status["migration"]["check_result"]["passed"] is False

    # Searches go on with the old model, and say a migration is under way.
    code, out, err = run(kb, "search", "relief valve", CITELINE_EMBEDDING_MODEL=L3)
    assert code == 0 and "valves.md" in out
    assert "migration under way: onnx:all-MiniLM-L6-v2 -> onnx:paraphrase-MiniLM-L3-v2, 12/12" in err
    code, out, _ = run(kb, "stats", "--json", CITELINE_EMBEDDING_MODEL=L3)
    stats = json.loads(out)
    assert stats["embedding_model"] == L6 and stats["migration"]["done"] == 12
    # For a person, the line `citeline search` prints, not the JSON's fields as a dict.
    code, out, _ = run(kb, "stats", CITELINE_EMBEDDING_MODEL=L3)
    assert code == 0
    assert f"migration  {L6} -> {L3}, 12/12 documents built; searches use {L6}\n" in out
    assert "source_model" not in out and "check_result" not in out

    code, out, err = run(kb, "migrate", "--switch", "--force", **strict)
    assert code == 0, err
    assert "switched (forced): the namespace now serves onnx:paraphrase-MiniLM-L3-v2" in out
    code, out, err = run(kb, "search", "relief valve", CITELINE_EMBEDDING_MODEL=L3)
    assert code == 0 and "valves.md" in out and "migration" not in err
    code, out, _ = run(kb, "migrate", CITELINE_EMBEDDING_MODEL=L3)
    assert "serves     onnx:paraphrase-MiniLM-L3-v2" in out and "no migration under way" in out


def test_reingest_of_named_documents_builds_only_them_and_a_dry_run_lists_only_what_is_missing(
    kb: Settings,
) -> None:
    with Citeline(kb) as cl:
        valves = next(d for d in cl.documents() if d.name == "valves.md")
    code, out, err = run(kb, "reingest", "--document-id", str(valves.id)[:8], CITELINE_EMBEDDING_MODEL=L3)
    # Built as asked; nothing failed, so no exit code 65, and no switch with eleven documents missing.
    assert code == 0, err
    assert "1 document queued" in out and "failed" not in err
    assert "not switched: 11 documents have no version embedded by onnx:paraphrase-MiniLM-L3-v2" in err
    code, out, err = run(kb, "migrate", "--json", CITELINE_EMBEDDING_MODEL=L3)
    assert (json.loads(out)["migration"]["done"], json.loads(out)["migration"]["total"]) == (1, 12)

    # What the resumed migration would build: the eleven, not valves.md again.
    code, out, err = run(kb, "reingest", "--dry-run", CITELINE_EMBEDDING_MODEL=L3)
    assert code == 0 and "11 documents to migrate" in err and "valves.md" not in out
    # A dry run refuses what the run would refuse: a migration to another model is under way.
    code, _, err = run(kb, "reingest", "--dry-run", CITELINE_EMBEDDING_MODEL="onnx:does-not-matter")
    assert code == 3 and "is under way" in err
    # --status and --cleanup choose what a plain re-ingest rebuilds; a migration takes every document.
    code, _, err = run(kb, "reingest", "--status", "failed", CITELINE_EMBEDDING_MODEL=L3)
    assert code == 2 and "do not apply to a change of embedding model" in err


def test_migrate_abort_discards_the_new_versions(kb: Settings) -> None:
    strict = {"CITELINE_EMBEDDING_MODEL": L3, "CITELINE_MIGRATION_MIN_OVERLAP": "1.0"}
    assert run(kb, "reingest", **strict)[0] == 1
    code, out, err = run(kb, "migrate", "--abort", CITELINE_EMBEDDING_MODEL=L3)
    assert code == 0, err
    assert "aborted the migration to onnx:paraphrase-MiniLM-L3-v2: 12 of its versions discarded" in out
    assert "the namespace serves onnx:all-MiniLM-L6-v2" in out
    code, _, err = run(kb, "migrate", "--switch", CITELINE_EMBEDDING_MODEL=L3)
    assert code == 3 and "no embedding-model migration is under way" in err
    code, out, _ = run(kb, "migrate", CITELINE_EMBEDDING_MODEL=L3)
    assert "run citeline reingest to migrate" in out


def test_a_gold_file_of_questions_drives_the_check(kb: Settings, tmp_path: Path) -> None:
    gold = write(
        tmp_path / "gold.jsonl",
        '{"question": "at what pressure does the relief valve open?", "relevant": ["valves.md"]}\n'
        '{"question": "how do I prime the pump?", "relevant": ["pumps"]}\n'
        '{"question": "where do we gather in a fire?", "relevant": {"fire.txt": 2}}\n'
        '{"question": "what does the boiler manual say?", "relevant": ["boiler-manual.pdf"]}\n',
    )
    code, out, err = run(kb, "reingest", "--check-with", str(gold), CITELINE_EMBEDDING_MODEL=L3)
    assert "quality check on 3 gold questions" in out and "nDCG@10 old" in out
    # The fourth names no document here: not scored, and said so rather than dropped in silence.
    assert "1 of 4 gold questions name no document of this namespace" in err
    assert "what does the boiler manual say?" in err
    # Three questions name a different document each: both models find them first.
    assert code == 0 and "switched: the namespace now serves onnx:paraphrase-MiniLM-L3-v2" in out, err


def test_the_gold_check_compares_new_with_old_as_citeline_eval_does(kb: Settings, tmp_path: Path) -> None:
    # An overlap check that cannot pass leaves the migration built and unswitched, to check by hand.
    strict = {"CITELINE_EMBEDDING_MODEL": L3, "CITELINE_MIGRATION_MIN_OVERLAP": "1.0"}
    assert run(kb, "reingest", **strict)[0] == 1
    gold = write(
        tmp_path / "gold.jsonl",
        '{"question": "at what pressure does the relief valve open?", "relevant": ["valves.md"]}\n'
        '{"question": "how do I prime the pump?", "relevant": ["pumps"]}\n'
        '{"question": "where do we gather in a fire?", "relevant": {"fire.txt": 2}}\n',
    )
    code, out, err = run(kb, "migrate", "--check", "--check-with", str(gold), CITELINE_EMBEDDING_MODEL=L3)
    assert code == 0, err
    # Both models rank each question's document first: no difference, and none claimed. The figures
    # read as citeline eval's paired table writes them: four decimals, the interval in eval's form
    # (a bound of exactly 0 reads 0), p, and the verdict that needs interval and test to agree.
    assert "nDCG@10 old 1.0000, new 1.0000, Δ new - old +0.0000 (0 to 0), p 1.000, not shown" in out
    assert "passed" in out

    code, out, err = run(
        kb, "migrate", "--check", "--check-with", str(gold), "--json", CITELINE_EMBEDDING_MODEL=L3
    )
    assert code == 0, err
    check = json.loads(out)
    # The fields citeline eval --json gives each paired comparison (its *_vs_first), against old here.
    assert check["delta"] == 0.0 and check["delta_ci"] == [0.0, 0.0] and check["p_value"] == 1.0
    assert check["verdict"] == "not shown" and check["differing"] == 0
    # The check kept in the catalog carries them too.
    code, out, _ = run(kb, "migrate", "--json", CITELINE_EMBEDDING_MODEL=L3)
    assert json.loads(out)["migration"]["check_result"]["verdict"] == "not shown"


def test_a_reingest_killed_mid_migration_is_resumed_by_the_next_one(kb: Settings) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITELINE_")}
    env.update(
        CITELINE_DATA_DIR=str(kb.data_dir), CITELINE_NAMESPACE=kb.namespace, CITELINE_EMBEDDING_MODEL=L3
    )
    first = subprocess.Popen(
        [sys.executable, "-m", "citeline.cli", "reingest"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with Citeline(kb.model_copy(update={"embedding_model": L3})) as cl:
        deadline = time.monotonic() + 300
        while cl.migration(max_age=0.0) is None and first.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)  # as soon as it has started: before it could finish
        first.wait()
        status = cl.migration(max_age=0.0)
        assert status is not None and status.progress.done < 12
    code, out, err = run(kb, "reingest", CITELINE_EMBEDDING_MODEL=L3)
    assert code == 0, err
    assert "documents queued" in out
    assert "switched: the namespace now serves onnx:paraphrase-MiniLM-L3-v2" in out
    with Citeline(kb) as cl, cl.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT embedding_model, status, is_active, count(*) FROM documents GROUP BY 1, 2, 3")
        ).all()
        assert [tuple(r) for r in rows] == [(L3, "completed", True, 12)]
        # One chunk per document, none left behind by the killed run.
        assert conn.execute(sa.text("SELECT count(*) FROM chunks")).scalar_one() == 12
