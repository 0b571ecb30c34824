"""``citeline eval --compare --per-query --report``, end to end through the command line."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from citeline.cli import app
from citeline.engine import Citeline
from citeline.eval.beir import STAGES
from citeline.eval.stats import bootstrap_ci, paired_comparison
from citeline.settings import Settings
from tests.eval.conftest import CORPUS, QRELS, QUERIES, write_beir

runner = CliRunner()
SVG = "{http://www.w3.org/2000/svg}"
ODD = "x<&>'\""  # a configuration name made of the characters HTML must escape


def _run(settings: Settings, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(
        app, ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, "eval", *args]
    )
    return result.exit_code, result.stdout, result.stderr


def test_compare_writes_summary_per_query_lines_and_report(
    settings: Settings, beir_folder: Path, tmp_path: Path
) -> None:
    per_query, report = tmp_path / "queries.jsonl", tmp_path / "eval.html"
    names = ["rrf", "weighted", "dense", "keyword", ODD]
    code, out, err = _run(
        settings,
        str(beir_folder),
        "--compare",
        f"rrf,weighted,dense,keyword,{ODD}=fusion:rrf;rrf_k:1",
        "--per-query",
        str(per_query),
        "--report",
        str(report),
        "--json",
    )
    assert code == 0, err

    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["config"] == "rrf" and summary["fusion"] == "rrf" and summary["queries"] == 4
    assert summary["corpus_added"] == 6
    # Outside a terminal there is no progress bar: one line says what the wait is for.
    assert f"{beir_folder.name}: checking 6 corpus entries in namespace {settings.namespace}" in err
    assert list(summary["configs"]) == names
    assert summary["ndcg@10"] == summary["configs"]["rrf"]["ndcg@10"]
    assert summary["configs"][ODD]["settings"] == {"fusion": "rrf", "rrf_k": 1}
    assert summary["configs"]["dense"]["ndcg@10"] == 1.0
    assert summary["configs"]["keyword"]["ndcg@10"] < 1.0
    # The human table went to standard error, one row per configuration.
    assert all(name in err for name in ("weighted", "dense", "keyword"))

    lines = [json.loads(line) for line in per_query.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == len(names) * len(QUERIES)
    assert {(r["config"], r["query_id"]) for r in lines} == {(n, q) for n in names for q in QUERIES}
    by = {(r["config"], r["query_id"]): r for r in lines}
    assert by[("dense", "q3")]["top10"][0] == "wings" and by[("dense", "q3")]["first_relevant_rank"] == 1
    assert by[("keyword", "q3")]["top10"][0] == "elevator"
    assert by[("keyword", "q3")]["first_relevant_rank"] > 1
    assert by[("keyword", "q3")]["query"] == QUERIES["q3"]
    for row in lines:
        assert {"ndcg@10", "recall@100", "latency_ms"} <= set(row)
        assert set(row["stages_ms"]) == set(STAGES) and row["stages_ms"]["embed"] > 0

    html = report.read_text(encoding="utf-8")
    assert "<script" not in html and "src=" not in html and "href=" not in html, "nothing to fetch"
    assert ODD not in html and "x&lt;&amp;&gt;&#x27;&quot;" in html
    assert "mini &amp; &lt;beir&gt;" in html
    # Well-formed as XML: every name was escaped, or this would not parse.
    page = ET.fromstring(html.removeprefix("<!DOCTYPE html>\n"))
    rows = page.findall(".//table[@id='metrics']/tbody/tr")
    assert [row[0].text for row in rows] == names
    assert [float(row[2].text or "") for row in rows] == [
        pytest.approx(summary["configs"][n]["ndcg@10"], abs=5e-4) for n in names
    ]
    assert [row.get("class") for row in rows] == [None, None, "best", None, None]  # dense, the best
    ndcg = next(svg for svg in page.iter(f"{SVG}svg") if svg.get("id") == "ndcg")
    bars = [rect for rect in ndcg.iter(f"{SVG}rect") if rect.get("class") == "bar"]
    assert [bar.findtext(f"{SVG}title", "").split(": ")[0] for bar in bars] == names
    widths = [float(bar.get("width", "")) for bar in bars]
    assert widths[names.index("dense")] == max(widths) > widths[names.index("keyword")]
    latency = next(svg for svg in page.iter(f"{SVG}svg") if svg.get("id") == "latency")
    stages = [rect for rect in latency.iter(f"{SVG}rect") if rect.get("class") == "stage"]
    assert len(stages) == len(names) * len(STAGES)
    assert len(page.findall(".//table[@id='stages']/tbody/tr")) == len(names)


def test_every_configuration_tied_at_the_best_is_in_bold_in_the_report(
    settings: Settings, beir_folder: Path, tmp_path: Path
) -> None:
    report = tmp_path / "eval.html"
    twin = "twin=fusion:weighted;weight_semantic:1.0;weight_keyword:0.0;weight_source:0.0"  # dense again
    code, _, err = _run(
        settings, str(beir_folder), "--compare", f"keyword,dense,{twin}", "--report", str(report)
    )
    assert code == 0, err
    page = ET.fromstring(report.read_text(encoding="utf-8").removeprefix("<!DOCTYPE html>\n"))
    rows = page.findall(".//table[@id='metrics']/tbody/tr")
    assert [(row[0].text, row.get("class")) for row in rows] == [
        ("keyword", None),
        ("dense", "best"),
        ("twin", "best"),
    ]


def test_without_compare_the_summary_is_the_current_settings(settings: Settings, beir_folder: Path) -> None:
    code, out, err = _run(settings, str(beir_folder), "--fusion", "rrf", "--limit", "2", "--json")
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["config"] == "default" and summary["fusion"] == "rrf" and summary["queries"] == 2
    assert list(summary["configs"]) == ["default"]
    code, out, err = _run(settings, str(beir_folder), "--limit", "1")
    assert code == 0 and ": 1 query in namespace " in out, (out, err)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compare", "rrf,bm42"], "unknown configuration 'bm42'; valid configurations: default, rrf"),
        (["--compare", "big=chunk_size:300"], "same stored corpus"),
        (["--report", "/nonexistent-folder/eval.html"], "the folder /nonexistent-folder does not exist"),
        (["--folds", "2"], "--folds cross-validates the configurations of --compare"),
        (["--compare", "rrf,dense", "--folds", "5"], "--folds 5: only 4 queries to split"),
        (["--compare", "rrf,dense", "--folds", "3", "--limit", "2"], "--folds 3: only 2 queries to split"),
        (["--compare", "rrf,dense", "--folds", "1"], "at least 2 folds"),
        (
            ["--compare", "rrf,dense", "--folds", "2", "--limit", "1"],
            "needs at least 2 queries (one a fold); only 1",
        ),
        (["--answers", "2", "--folds", "2"], "--answers cannot be combined with --folds"),
        (["--compare", "rrf,dense", "--folds", "2", "--shuffles", "0"], "at least 1 deal"),
        (["--answers", "2", "--shuffles", "5"], "--answers cannot be combined with --shuffles"),
        # Without --folds there is no deal of the folds to repeat: it used to be ignored without a word.
        (["--compare", "rrf,dense", "--shuffles", "5"], "--shuffles repeats the cross-validation of --folds"),
        (["--shuffles", "20"], "--shuffles repeats the cross-validation of --folds"),
        (["--limit", "0"], "limit (--limit) is the number of queries to run, at least 1; got 0"),
        (["--limit", "-3"], "at least 1; got -3"),
    ],
)
def test_bad_options_stop_before_any_work(
    settings: Settings, beir_folder: Path, args: list[str], message: str
) -> None:
    code, out, err = _run(settings, str(beir_folder), *args)
    assert code == 2 and message in err
    assert out == "" and "ingest" not in err


def test_compare_says_whether_differences_are_real_and_cross_validates_the_choice(
    settings: Settings, beir_folder: Path, tmp_path: Path
) -> None:
    # "again" is "dense" under another name: the same rankings, so no difference at all.
    per_query, report = tmp_path / "queries.jsonl", tmp_path / "eval.html"
    again = "again=fusion:weighted;weight_semantic:1;weight_keyword:0;weight_source:0"
    code, out, err = _run(
        settings,
        str(beir_folder),
        "--compare",
        f"dense,keyword,{again}",
        "--folds",
        "2",
        "--per-query",
        str(per_query),
        "--report",
        str(report),
        "--json",
    )
    assert code == 0, err
    configs = json.loads(out.strip().splitlines()[-1])["configs"]
    dense, keyword, same = configs["dense"], configs["keyword"], configs["again"]

    # dense ranks every judged document first: its nDCG@10 is 1 on every query, a constant.
    assert dense["ndcg@10"] == 1.0 and dense["ndcg@10_ci"] == [1.0, 1.0]
    assert dense["p_vs_first"] is None and dense["delta_vs_first"] is None
    assert same["delta_vs_first"] == 0.0 and same["delta_vs_first_ci"] == [0.0, 0.0]
    assert same["p_vs_first"] == 1.0 and same["verdict_vs_first"] == "not shown"
    # keyword is worse on q3 (the hotel lift) and no better anywhere: the figures are those of its
    # per-query scores, paired query by query with dense's.
    ndcg = {(r["config"], r["query_id"]): r["ndcg@10"] for r in map(json.loads, per_query.open())}
    first, second = ([ndcg[name, q] for q in QUERIES] for name in ("dense", "keyword"))
    expected = paired_comparison(first, second)
    assert expected.delta < 0 and keyword["delta_vs_first"] == pytest.approx(expected.delta)
    assert keyword["delta_vs_first_ci"] == pytest.approx(list(expected.delta_ci))
    assert keyword["p_vs_first"] == pytest.approx(expected.p_value)
    assert keyword["ndcg@10_ci"] == pytest.approx(list(bootstrap_ci(second)))
    # A table of its own shows the intervals and the paired columns.
    assert "Δ and p paired against dense" in err and "Δ 95% CI" in err

    # Two folds of two queries: dense is never worse, so it is picked on both (a tie with "again" goes
    # to the one given first) and scores 1 on the queries held out.
    cv = json.loads(out.strip().splitlines()[-1])["cross_validation"]
    assert cv["folds"] == 2 and cv["picks"] == {"dense": 2, "keyword": 0, "again": 0}
    assert cv["held_out_ndcg@10"] == 1.0 and cv["best_in_sample"] == "dense"
    assert [(f["fold"], f["queries"], f["picked"]) for f in cv["per_fold"]] == [
        (0, 2, "dense"),
        (1, 2, "dense"),
    ]
    assert "2-fold cross-validation" in err and "held-out nDCG@10 1.0000" in err
    # Dealt again 20 times: dense is picked in every fold of every deal, so choosing never beats
    # keeping it, and the query-by-query difference is exactly 0.
    assert cv["shuffles"] == {
        "count": 20,
        "first": "dense",
        "held_out_ndcg@10": 1.0,
        "held_out_ndcg@10_range": [1.0, 1.0],
        "above_first": 0,
        "picks": {"dense": 40, "keyword": 0, "again": 0},
        "delta_vs_first": 0.0,
        "delta_vs_first_ci": [0.0, 0.0],
        "p_vs_first": 1.0,
        "verdict_vs_first": "not shown",
    }
    assert "over 20 deals of the folds" in err and "above keeping dense in 0 of 20" in err

    page = ET.fromstring(report.read_text(encoding="utf-8").removeprefix("<!DOCTYPE html>\n"))
    rows = {
        row[0].text: [cell.text for cell in row] for row in page.findall(".//table[@id='metrics']/tbody/tr")
    }
    assert rows["dense"][3] == "1.000 to 1.000" and rows["dense"][4:7] == [None, None, None]
    assert rows["again"][4:8] == ["+0.000", "0 to 0", "1.000", "not shown"]
    assert rows["keyword"][4] == f"{keyword['delta_vs_first']:+.3f}"
    ndcg_svg = next(svg for svg in page.iter(f"{SVG}svg") if svg.get("id") == "ndcg")
    assert len([p for p in ndcg_svg.iter(f"{SVG}path") if p.get("class") == "ci"]) == 3
    folds = page.findall(".//table[@id='folds']/tbody/tr")
    assert [[cell.text for cell in row] for row in folds] == [
        ["1", "2", "dense", "1.000"],
        ["2", "2", "dense", "1.000"],
    ]
    assert page.findtext(".//strong[@id='held-out']") == "1.000"
    shuffles = "".join(page.find(".//p[@id='shuffles']").itertext())  # type: ignore[union-attr]
    assert "Over 20 deals" in shuffles and "in 0 of 20" in shuffles


def test_a_changed_embedding_model_rebuilds_the_stored_corpus_with_it(
    settings: Settings, beir_folder: Path
) -> None:
    code, out, err = _run(settings, str(beir_folder), "--json")
    assert code == 0, err
    first = json.loads(out.strip().splitlines()[-1])
    assert first["corpus_added"] == 6
    result = runner.invoke(
        app,
        [
            "--data-dir",
            str(settings.data_dir),
            "--namespace",
            settings.namespace,
            "eval",
            str(beir_folder),
            "--json",
        ],
        env={"CITELINE_EMBEDDING_MODEL": "onnx:paraphrase-MiniLM-L3-v2"},
    )
    assert result.exit_code == 0, result.stderr
    second = json.loads(result.stdout.strip().splitlines()[-1])
    # Every entry again, embedded by the other model, and the namespace switched to it at once.
    assert (second["corpus_added"], second["corpus_unchanged"]) == (6, 0)
    stats = runner.invoke(
        app, ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, "stats", "--json"]
    )
    assert json.loads(stats.stdout)["embedding_model"] == "onnx:paraphrase-MiniLM-L3-v2"


def test_another_folder_over_the_same_corpus_finds_it_stored(
    settings: Settings, beir_folder: Path, tmp_path: Path
) -> None:
    claims = write_beir(tmp_path / "claims", {"c1": "Statins lower cholesterol."}, {"c1": "statins"})
    code, _, err = _run(settings, str(beir_folder), "--json")
    assert code == 0, err
    code, out, err = _run(settings, str(claims), "--json")
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    # Stored once: a second copy would change the keyword statistics and crowd the top ten.
    assert (summary["corpus_added"], summary["corpus_unchanged"]) == (0, 6)


def test_a_namespace_holding_other_documents_is_refused_and_left_as_it_was(
    settings: Settings, beir_folder: Path, tmp_path: Path
) -> None:
    code, _, err = _run(settings, str(beir_folder), "--json")
    assert code == 0, err
    other = write_beir(
        tmp_path / "other", {"o1": "tides"}, {"o1": "moon"}, [("moon", "Moon", "The moon pulls the tides.")]
    )
    code, _, err = _run(settings, str(other), "--json")
    assert code != 0
    assert settings.namespace in err and "6 document(s)" in err and str(other) in err
    stats = runner.invoke(
        app, ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, "stats", "--json"]
    )
    assert json.loads(stats.stdout)["documents"] == 6


def test_a_malformed_corpus_line_stops_the_command_before_the_store_is_touched(
    settings: Settings, beir_folder: Path
) -> None:
    with (beir_folder / "corpus.jsonl").open("a", encoding="utf-8") as fh:
        fh.write('\n{"_id": "moon", "text": "The moon pulls the tides."\n')
    code, out, err = _run(settings, str(beir_folder), "--json")
    assert code == 2 and out == ""
    assert "corpus.jsonl, line 7: not JSON" in err and "Traceback" not in err
    stats = runner.invoke(
        app, ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, "stats", "--json"]
    )
    assert stats.exit_code == 4 and "no namespace" in stats.stderr  # not even an empty one was made


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs a folder no one can create files in")
def test_a_file_that_cannot_be_created_is_refused_before_any_work(
    settings: Settings, beir_folder: Path
) -> None:
    # /proc exists, so only creating the file tells; even root cannot. Until this was checked, the run
    # went to its end and lost every result on writing.
    code, out, err = _run(settings, str(beir_folder), "--per-query", "/proc/per-query.jsonl")
    assert code == 2 and out == ""
    assert "cannot write /proc/per-query.jsonl" in err
    stats = runner.invoke(
        app, ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, "stats", "--json"]
    )
    assert stats.exit_code == 4 and "no namespace" in stats.stderr  # not even an empty one was made


def test_judgements_that_cannot_be_measured_as_meant_are_warned_about_on_standard_error(
    settings: Settings, tmp_path: Path
) -> None:
    folder = write_beir(tmp_path / "gaps", QUERIES, {"q1": "statins", "q2": "retracted", "ghost": "aspirin"})
    code, out, err = _run(settings, str(folder), "--json")
    assert code == 0, err
    assert "warning: judged queries that queries.jsonl does not hold are left out: 1" in err
    assert "'retracted' for query 'q2'" in err and "their queries cannot reach a recall" in err
    assert "warning: queries with no judgement in this split are not run: 2 (q3, q4)" in err
    summary = json.loads(out)
    assert summary["queries"] == 2 and summary["recall@100"] == 0.5


def test_an_entry_removed_from_the_corpus_is_refused_with_how_to_remove_it_from_the_namespace(
    settings: Settings, beir_folder: Path
) -> None:
    code, _, err = _run(settings, str(beir_folder), "--json")
    assert code == 0, err
    corpus = beir_folder / "corpus.jsonl"
    corpus.write_text("\n".join(line for line in corpus.read_text().splitlines() if '"vitd"' not in line))
    code, _, err = _run(settings, str(beir_folder), "--json")
    assert code == 2 and f"beir://{settings.namespace}/vitd" in err
    assert f"citeline --namespace {settings.namespace} docs list" in " ".join(err.split())
    base = ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, "docs"]
    listed = json.loads(runner.invoke(app, [*base, "list", "--json"]).stdout)
    stale = next(doc["id"] for doc in listed if doc["name"] == "vitd")
    assert runner.invoke(app, [*base, "delete", stale]).exit_code == 0
    code, out, err = _run(settings, str(beir_folder), "--json")
    assert code == 0, err
    assert json.loads(out)["corpus_unchanged"] == 5


def _versions(settings: Settings, doc_id: str) -> list[tuple[str, str]]:
    """(status, version id) of every row the catalog holds for one corpus entry."""
    with Citeline(settings) as cl, cl.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT status, id::text FROM documents WHERE source_uri = :s ORDER BY id"),
            {"s": f"beir://{settings.namespace}/{doc_id}"},
        )
        return [(str(status), str(version)) for status, version in rows]


def test_a_corpus_entry_that_fails_to_ingest_is_warned_about_counted_and_not_retried_unchanged(
    settings: Settings, tmp_path: Path
) -> None:
    folder = write_beir(tmp_path / "team", QUERIES, QRELS, [*CORPUS, ("emptyall", "", "")])
    code, out, err = _run(settings, str(folder), "--json")
    assert code == 0, err
    # One warning line, the entry named once; the JSON counts it, so the three counts add up.
    assert "warning: 1 corpus entry failed to ingest (emptyall: no text to index)" in " ".join(err.split())
    assert "emptyall: emptyall" not in err
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["corpus_added"], summary["corpus_unchanged"], summary["corpus_failed"]) == (6, 0, 1)
    failed = _versions(settings, "emptyall")
    assert [status for status, _ in failed] == ["failed"]

    # Unchanged since it failed: not tried again, no new failed version; still warned about and counted.
    code, out, err = _run(settings, str(folder), "--json")
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["corpus_added"], summary["corpus_unchanged"], summary["corpus_failed"]) == (0, 6, 1)
    assert "unchanged since it failed, not tried again" in " ".join(err.split())
    assert _versions(settings, "emptyall") == failed

    # Removed from the corpus: its failed document neither blocks the run nor stays behind.
    write_beir(folder, QUERIES, QRELS)
    code, out, err = _run(settings, str(folder), "--json")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["corpus_failed"] == 0
    assert _versions(settings, "emptyall") == [] and "warning" not in err
