"""The command line, end to end: real store, real model, real files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from citeline.cli import _place, app
from citeline.engine import Citeline
from citeline.settings import Settings
from tests.conftest import write

runner = CliRunner()


def _run(settings: Settings, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(
        app, ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, *args]
    )
    return result.exit_code, result.stdout, result.stderr


def test_ingest_search_show_stats_delete(settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    write(folder / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar and must be tested yearly.")
    write(folder / "sub" / "pumps.txt", "Prime the pump before first use.")
    write(folder / ".hidden" / "secret.txt", "never ingested")
    write(folder / "ignored.xyz", "not a supported type, skipped when walking a folder")

    code, out, err = _run(settings, "ingest", str(folder), "--scope", "plant-a", "--tag", "safety", "--json")
    assert code == 0, err
    results = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert sorted(Path(r["source"]).name for r in results) == ["pumps.txt", "valves.md"]
    assert {r["outcome"] for r in results} == {"added"}

    code, out, _ = _run(settings, "ingest", str(folder))
    assert code == 0
    code, out, err = _run(settings, "ingest", str(folder / "valves.md"))
    assert "unchanged" in out + err
    assert "1 source: 1 unchanged; 0 chunks stored" in err

    code, out, err = _run(
        settings, "search", "when does the relief valve open?", "--scope", "plant-a", "--json"
    )
    assert code == 0, err
    hits = json.loads(out)
    assert hits[0]["document_name"] == "valves.md" and "6 bar" in hits[0]["text"]
    assert {
        "chunk_id",
        "page",
        "start",
        "end",
        "distance",
        "similarity",
        "keyword_score",
        "fused_score",
    } <= set(hits[0])
    code, out, _ = _run(settings, "search", "relief valve", "--scope", "plant-b", "--json")
    assert json.loads(out) == []

    code, out, _ = _run(settings, "docs", "list", "--json")
    docs = json.loads(out)
    assert {d["name"] for d in docs} == {"valves.md", "pumps.txt"}
    assert all(d["scopes"] == ["plant-a"] and d["tags"] == ["safety"] for d in docs)
    valve = next(d for d in docs if d["name"] == "valves.md")
    code, out, _ = _run(settings, "docs", "show", valve["id"][:8], "--chunks", "--json")
    shown = json.loads(out)
    assert shown["id"] == valve["id"] and "6 bar" in shown["chunks"][0]["text"]

    code, out, _ = _run(settings, "stats", "--json")
    stats = json.loads(out)
    assert stats["active_documents"] == 2 and stats["chunks"] >= 2 and stats["keyword_postings"] > 0
    code, out, _ = _run(settings, "stats")  # for a person: counts, not a dict's repr or 15 decimals
    assert code == 0 and "by_status  completed 2\n" in out and "{" not in out
    assert f"avg_chunk_terms  {stats['avg_chunk_terms']:.1f}\n" in out

    code, out, _ = _run(settings, "docs", "delete", valve["id"])
    assert code == 0 and "valves.md" in out
    code, out, _ = _run(settings, "docs", "show", valve["id"])
    assert code == 4


def test_failures_exit_non_zero_and_name_the_file(settings: Settings, tmp_path: Path) -> None:
    good = write(tmp_path / "good.txt", "Torque the flange bolts to 40 Nm in a star pattern.")
    code, out, err = _run(settings, "ingest", str(tmp_path / "nope.pdf"), str(good))
    assert code == 65
    assert "nope.pdf" in out + err and "file not found" in out + err
    code, out, _ = _run(settings, "search", "flange bolt torque", "--json")
    assert json.loads(out)[0]["document_name"] == "good.txt"


def _empty_namespace(settings: Settings) -> None:
    """Make the namespace of ``settings``, empty: commands that read refuse one the database lacks."""
    with Citeline(settings) as cl:
        cl.engine  # noqa: B018


def test_bad_requests_exit_with_the_error_code(settings: Settings) -> None:
    _empty_namespace(settings)
    code, _, err = _run(settings, "search", "x", "--threshold", "5")
    assert code == 2 and "'--threshold'" in err and "less than or equal to 2" in err
    code, _, err = _run(settings, "docs", "show", "00000000")
    assert code == 4


def test_eval_on_a_small_beir_folder(settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    corpus = [
        {"_id": "d1", "title": "Aspirin", "text": "Aspirin reduces the risk of a second heart attack."},
        {"_id": "d2", "title": "Statins", "text": "Statins lower LDL cholesterol in adults."},
        {
            "_id": "d3",
            "title": "Vitamin D",
            "text": "Vitamin D supplements do not prevent fractures in the elderly.",
        },
    ]
    write(folder / "corpus.jsonl", "\n".join(json.dumps(c) for c in corpus))
    queries = [
        {"_id": "q1", "text": "Statins reduce LDL cholesterol."},
        {"_id": "q2", "text": "Aspirin prevents heart attacks."},
    ]
    write(folder / "queries.jsonl", "\n".join(json.dumps(q) for q in queries))
    write(folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td1\t1\n")

    code, out, err = _run(settings, "eval", str(folder), "--json")
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["ndcg@10"] == 1.0 and report["recall@100"] == 1.0 and report["mrr@10"] == 1.0
    assert report["queries"] == 2 and report["corpus_added"] == 3
    assert report["latency_p50_ms"] > 0
    code, out, _ = _run(settings, "eval", str(folder), "--json")
    assert json.loads(out.strip().splitlines()[-1])["corpus_unchanged"] == 3


def test_processes_share_one_embedded_server(settings: Settings, tmp_path: Path) -> None:
    """Two CLI processes ingest into the same data directory at once; both succeed, nothing is lost."""
    files = [
        write(tmp_path / f"doc{i}.txt", f"Maintenance note {i}: replace filter cartridge {i}.")
        for i in range(4)
    ]
    base = [
        sys.executable,
        "-m",
        "citeline.cli",
        "--data-dir",
        str(settings.data_dir),
        "--namespace",
        settings.namespace,
    ]
    procs = [
        subprocess.Popen(
            [*base, "ingest", str(files[i]), str(files[i + 2])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    _, out, _ = _run(settings, "docs", "list", "--json")
    assert sorted(d["name"] for d in json.loads(out)) == [f"doc{i}.txt" for i in range(4)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--chunk-size", "1", "--chunk-overlap", "0"], "chunk_size (--chunk-size) must be 50 to 20000"),
        (["--chunk-size", "0"], "must be 50 to 20000 characters, as for CITELINE_CHUNK_SIZE, got 0"),
        (["--chunk-size", "10"], "chunk_size (--chunk-size) must be 50 to 20000 characters"),
        (["--chunk-size", "20001"], "got 20001"),
        (["--chunk-size", "100", "--chunk-overlap", "100"], "chunk_overlap (--chunk-overlap) must be"),
    ],
)
def test_chunking_out_of_the_settings_bounds_is_refused(
    settings: Settings, tmp_path: Path, args: list[str], message: str
) -> None:
    path = write(tmp_path / "f.txt", "Prime the pump before first use. " * 50)
    code, out, err = _run(settings, "ingest", str(path), *args)
    assert code == 2 and message in " ".join(err.split()), err
    code, out, _ = _run(settings, "docs", "list", "--json")
    assert code == 0 and json.loads(out) == []


@pytest.mark.parametrize("top_k", ["0", "-1"])
def test_a_search_for_no_hits_is_refused(settings: Settings, tmp_path: Path, top_k: str) -> None:
    _run(
        settings, "ingest", str(write(tmp_path / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar."))
    )
    code, out, err = _run(settings, "search", "relief valve", "-k", top_k)
    assert code == 2 and f"top_k (-k) must be at least 1, got {top_k}" in err and out == ""


def test_keys_revoke_takes_the_start_of_a_key_id(settings: Settings) -> None:
    ids = []
    for name in ("ward a", "ward b", "ward c"):
        code, out, err = _run(settings, "keys", "create", "--role", "admin", "--name", name, "--json")
        assert code == 0, err
        ids.append(json.loads(out.strip().splitlines()[-1])["id"])
    # Two keys whose ids share their first eight characters, as uuid4 ids sometimes do.
    with Citeline(settings) as cl, cl.engine.begin() as conn:
        for old, new in zip(
            ids[:2],
            ("cb429b97-1111-4111-8111-111111111111", "cb429b97-2222-4222-8222-222222222222"),
            strict=True,
        ):
            conn.execute(sa.text("UPDATE api_keys SET id = :new WHERE id = :old"), {"new": new, "old": old})
    code, _, err = _run(settings, "keys", "revoke", "cb429b97")
    assert code == 2 and "key id prefix 'cb429b97' matches several keys; give more of it" in err
    code, _, err = _run(settings, "keys", "revoke", "0000000")
    assert code == 4 and "no API key id starts with '0000000'" in err
    code, _, err = _run(settings, "keys", "revoke", "not-hex")
    assert code == 2 and "neither a key id nor the start of one" in err
    code, out, err = _run(settings, "keys", "revoke", "CB429B97-2")
    assert code == 0 and "revoked key cb429b97-2222-4222-8222-222222222222 (ward b)" in out, err
    code, out, err = _run(settings, "keys", "revoke", ids[2][:8])
    assert code == 0 and f"revoked key {ids[2]} (ward c)" in out, err
    code, out, _ = _run(settings, "keys", "list", "--json")
    assert [k["name"] for k in json.loads(out)] == ["ward a"]


def test_universal_and_scope_contradict(settings: Settings, tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "text")
    code, _, err = _run(settings, "ingest", str(path), "--universal", "--scope", "x")
    assert code == 2 and "--universal" in err


def test_a_blank_scope_is_refused_by_ingest_and_search_as_the_api_refuses_it(
    settings: Settings, tmp_path: Path
) -> None:
    # The check is the library's (IngestOptions, Filters), so every shell refuses the same labels.
    path = write(tmp_path / "a.txt", "The relief valve opens at 6 bar.")
    code, _, err = _run(settings, "ingest", str(path), "--scope", " ")
    assert code == 2 and "a scope must not be empty or blank" in err
    code, _, err = _run(settings, "docs", "list", "--json")
    assert code == 4 and "no namespace" in err  # nothing was stored, not even an empty namespace
    code, _, err = _run(settings, "search", "relief valve", "--scope", "")
    assert code == 2 and "a scope must not be empty or blank" in err


def test_ask_takes_the_same_filters_as_search(settings: Settings, tmp_path: Path) -> None:
    a = write(tmp_path / "plant-a.txt", "The relief valve of boiler A opens at 6 bar.")
    b = write(tmp_path / "plant-b.md", "# Boiler B\n\nThe relief valve of boiler B opens at 9 bar.")
    assert _run(settings, "ingest", str(a), "--meta", "site=a")[0] == 0
    assert _run(settings, "ingest", str(b), "--meta", "site=b")[0] == 0

    for filters, name in ((["--meta", "site=b"], "plant-b.md"), (["--type", "text/plain"], "plant-a.txt")):
        code, out, err = _run(
            settings,
            "ask",
            "At what pressure does the relief valve open?",
            "--llm",
            "extractive",
            "--json",
            *filters,
        )
        assert code == 0, err
        answer = json.loads(out)
        assert {c["document_name"] for c in answer["citations"]} == {name}, filters


def test_search_and_ask_keep_to_a_document_named_by_its_id_or_a_start_of_it(
    settings: Settings, tmp_path: Path
) -> None:
    # The API's document_ids filter took prefixes (b340f99); the commands had no such option at all.
    a = write(tmp_path / "plant-a.txt", "The relief valve of boiler A opens at 6 bar.")
    b = write(tmp_path / "plant-b.txt", "The relief valve of boiler B opens at 9 bar.")
    assert _run(settings, "ingest", str(a), str(b))[0] == 0
    with Citeline(settings) as cl:
        ids = {Path(d.name).name: str(d.id) for d in cl.documents()}

    for ref in (ids["plant-b.txt"], ids["plant-b.txt"][:8]):
        code, out, err = _run(settings, "search", "relief valve pressure", "--document", ref, "--json")
        assert code == 0, err
        assert {Path(h["document_name"]).name for h in json.loads(out)} == {"plant-b.txt"}
        code, out, err = _run(
            settings,
            "ask",
            "When does the relief valve open?",
            "--llm",
            "extractive",
            "--json",
            "--document",
            ref,
        )
        assert code == 0, err
        assert {Path(c["document_name"]).name for c in json.loads(out)["citations"]} == {"plant-b.txt"}
    code, _, err = _run(settings, "search", "relief valve", "--document", "ffffffff")
    assert code == 4 and "ffffffff" in err


def test_ask_shows_the_verdict_on_a_claim_and_each_source_s_stance(
    settings: Settings, tmp_path: Path
) -> None:
    valve = write(
        tmp_path / "valve.txt", "The relief valve of boiler A opens at 6 bar and is tested every year."
    )
    assert _run(settings, "ingest", str(valve))[0] == 0
    question = "Is it true that the relief valve of boiler A opens at 6 bar?"

    code, out, err = _run(settings, "ask", question, "--llm", "extractive", "--json")

    assert code == 0, err
    answer = json.loads(out)
    assert answer["verdict"] in ("supports", "contradicts")
    assert answer["citations"][0]["stance"] == answer["verdict"]
    code, out, err = _run(settings, "ask", question, "--llm", "extractive")
    assert code == 0, err
    assert f"Verdict: {answer['verdict']}" in out
    assert f"valve.txt p.1  {answer['verdict']}" in out


def test_a_resumed_conversation_keeps_its_persona_and_says_so_when_another_is_asked_for(
    settings: Settings, tmp_path: Path
) -> None:
    valve = write(tmp_path / "valve.txt", "The relief valve of boiler A opens at 6 bar and is tested yearly.")
    assert _run(settings, "ingest", str(valve))[0] == 0
    code, out, err = _run(
        settings, "ask", "When does the relief valve open?", "--llm", "extractive", "--json"
    )
    assert code == 0, err
    conversation = json.loads(out)["conversation_id"]

    code, out, err = _run(
        settings, "ask", "--conversation", conversation, "--persona", "repair", "How often is it tested?",
        "--llm", "extractive",
    )  # fmt: skip

    assert code == 0, err
    assert f"conversation {conversation} keeps the persona it started with, general; --persona repair" in err
    assert "valve.txt p.1" in out
    code, _, err = _run(
        settings, "ask", "--conversation", conversation, "--persona", "general", "And yearly?",
        "--llm", "extractive",
    )  # fmt: skip
    assert code == 0 and "keeps the persona" not in err


def test_source_text_is_printed_exactly_never_as_emoji_or_markup(settings: Settings, tmp_path: Path) -> None:
    text = "root:x:0:0:root:/root:/bin/bash takes a :pill: dose of [bold]markup[/bold] and [red]colour."
    write(tmp_path / "[dim]odd name.txt", text)
    code, _, err = _run(settings, "ingest", str(tmp_path))
    assert code == 0, err
    code, out, err = _run(settings, "search", "root bash pill dose", "--top-k", "1")
    assert code == 0, err
    assert "[dim]odd name.txt p.1" in out
    assert text in out and "💊" not in out and "❌" not in out


def _valves_and_pumps(settings: Settings, tmp_path: Path) -> None:
    """A valve note in scope plant-a and a pump note in plant-b, ingested."""
    write(tmp_path / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar and must be tested yearly.")
    write(tmp_path / "pumps.txt", "Prime the pump before first use.")
    code, _, err = _run(settings, "ingest", str(tmp_path / "valves.md"), "--scope", "plant-a")
    assert code == 0, err
    code, _, err = _run(settings, "ingest", str(tmp_path / "pumps.txt"), "--scope", "plant-b")
    assert code == 0, err


def test_search_explain_shows_the_plan_and_the_stages(settings: Settings, tmp_path: Path) -> None:
    _valves_and_pumps(settings, tmp_path)

    code, out, err = _run(settings, "search", "relief valve", "--scope", "plant-a", "--explain")
    assert code == 0, err
    assert "valves.md p.1" in out
    # One query per process: the vectors are not loaded into it, PostgreSQL compares them.
    assert "plan: dense exact, selectivity 50.00% (1 of 2 chunks)" in out
    assert "query vector embedded" in out and "stages (ms): embed " in out

    code, out, err = _run(settings, "search", "relief valve", "--json", "--explain")
    assert code == 0, err
    result = json.loads(out)
    assert result["hits"][0]["document_name"] == "valves.md"
    explain = result["explain"]
    assert explain["dense_plan"] == "hnsw" and explain["selectivity"] is None
    assert explain["dense_candidates"] == 2 and explain["cache_hit"] is False
    assert set(explain["stages_ms"]) >= {"embed", "catalog", "keyword", "dense", "fetch", "fuse"}


def test_ask_explain_shows_the_search_s_plan_and_stages_and_the_answer_s(
    settings: Settings, tmp_path: Path
) -> None:
    _valves_and_pumps(settings, tmp_path)
    question = "When does the relief valve open?"

    code, out, err = _run(settings, "ask", question, "--scope", "plant-a", "--llm", "extractive", "--explain")
    assert code == 0, err
    assert "valves.md p.1" in out
    # The search as `citeline search --explain` shows it, then where the rest of the turn went.
    assert "plan: dense " in out and "selectivity 50.00% (1 of 2 chunks)" in out
    assert "stages (ms): embed " in out
    assert "turn (ms): history " in out and " rewrite " in out and " evidence " in out
    assert "answer (ms): prompt " in out and " verify " in out and " generation " in out

    code, out, err = _run(settings, "ask", question, "--llm", "extractive", "--json", "--explain")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["citations"][0]["document_name"] == "valves.md"
    explain = answer["explain"]
    search = explain["search"]
    assert search["selectivity"] is None and search["dense_candidates"] == 2
    assert set(search["stages_ms"]) >= {"embed", "catalog", "keyword", "dense", "fetch", "fuse"}
    assert search["total_ms"] > 0
    assert set(explain["turn_ms"]) == {"history", "rewrite", "search", "evidence"}
    assert explain["turn_ms"]["evidence"] >= explain["turn_ms"]["search"]
    assert set(answer["timings_ms"]) >= {"prompt", "generation", "verify", "total"}

    # Without --explain, neither is there.
    code, out, err = _run(settings, "ask", question, "--llm", "extractive", "--json")
    assert code == 0, err
    assert "explain" not in json.loads(out)


def test_ingest_says_which_rows_of_a_table_have_fewer_or_more_cells_than_its_header(
    settings: Settings, tmp_path: Path
) -> None:
    write(tmp_path / "dosing.csv", "drug,dose,note\nA,1 mg,ok\nB,2 mg\nC,3 mg,x,extra\n")

    code, _, err = _run(settings, "ingest", str(tmp_path / "dosing.csv"))

    assert code == 0, err
    said = " ".join(err.split())  # the console wraps long lines
    assert "rows with fewer or more cells than the header: 2 (rows 3, 4)" in said, err


def test_a_search_for_a_code_nothing_writes_says_so_beside_its_hits(
    settings: Settings, tmp_path: Path
) -> None:
    # A repair trial: "E9999", in no passage, returned the closest passages without a word.
    write(tmp_path / "errors.md", "# Error codes\n\nE4021 means the heat sink is above 95 °C.")
    code, _, err = _run(settings, "ingest", str(tmp_path / "errors.md"))
    assert code == 0, err

    code, out, err = _run(settings, "search", "What does E9999 mean?")
    assert code == 0, err
    assert "errors.md p.1" in out
    assert "none of these passages writes E9999: they are only the closest in meaning" in err

    code, out, err = _run(settings, "search", "E4021")
    assert code == 0, err
    assert "none of these passages writes" not in err


def test_a_hit_from_a_tables_later_chunk_is_shown_under_its_header_row(
    settings: Settings, tmp_path: Path
) -> None:
    rows = "\n".join(
        f"| M{n} flange bolt | {n * 5} N·m | {'blue' if n % 2 else 'none'} |" for n in range(4, 40)
    )
    write(
        tmp_path / "torques.md",
        f"# Torques\n\n| Fastener | Tightening torque | Thread locker |\n| --- | --- | --- |\n{rows}\n",
    )
    code, _, err = _run(settings, "ingest", str(tmp_path / "torques.md"))
    assert code == 0, err

    code, out, err = _run(settings, "search", "tightening torque of the M31 flange bolt", "--top-k", "1")

    assert code == 0, err
    header, snippet = out.splitlines()[1:3]
    assert header.strip() == "| Fastener | Tightening torque | Thread locker |"
    assert snippet.strip().startswith("| M") and "Fastener" not in snippet  # rows, under the header
    code, out, err = _run(
        settings, "search", "tightening torque of the M31 flange bolt", "--top-k", "1", "--json"
    )
    assert json.loads(out)[0]["context"] == "| Fastener | Tightening torque | Thread locker |"


def test_providers_lists_what_each_provider_model_setting_can_name() -> None:
    result = runner.invoke(app, ["providers", "--json"])
    assert result.exit_code == 0, result.stderr
    rows = {(row["setting"], row["provider"]): row for row in json.loads(result.stdout)}
    assert (
        rows["CITELINE_EMBEDDING_MODEL", "sentence-transformers:<folder>"]["extra"] == "sentence-transformers"
    )
    assert rows["CITELINE_EMBEDDING_MODEL", "openai:<model>"]["example"] == "openai:text-embedding-3-small"
    assert ("CITELINE_LLM", "local:<model>") in rows
    assert ("CITELINE_RERANKER", "prf") in rows

    table = runner.invoke(app, ["providers"])
    assert table.exit_code == 0
    assert "pip install 'citeline[sentence-transformers]'" in table.stdout


def test_names_labels_and_errors_are_printed_as_text_by_every_command(
    settings: Settings, tmp_path: Path
) -> None:
    # Square brackets are Rich markup: "[red]pump.md" printed as markup loses "[red]", and "[/x]" ends
    # the command with a MarkupError. Names, labels and key names come from users; they are text.
    write(tmp_path / "[red]pump.md", "Prime the pump for two minutes before the first start.")
    write(tmp_path / "[b]seal[.txt", "Never run the pump dry: the seal fails.")
    code, _, err = _run(settings, "ingest", str(tmp_path), "--tag", "[/x]", "--scope", "[b]plant")
    assert code == 0, err
    assert f"{tmp_path}/[red]pump.md: v1, 1 page, 1 chunk (1 embedded)" in err
    assert "2 sources: 2 added; 2 chunks stored" in err

    code, out, err = _run(settings, "docs", "list")
    assert code == 0, err
    flat = " ".join(out.split())  # the table may wrap a cell over two lines
    assert "[red]pump.md" in flat and "[b]seal[.txt" in flat and "[/x]" in flat and "[b]plant" in flat
    doc_id = next(line.split()[0] for line in out.splitlines() if "pump.md" in line)

    code, out, _ = _run(settings, "docs", "show", doc_id)
    assert code == 0 and "[red]pump.md" in out and "['[/x]']" in out
    code, out, _ = _run(settings, "docs", "delete", doc_id)
    assert code == 0 and "deleted [red]pump.md (1 version)" in out
    code, _, err = _run(settings, "docs", "show", "[/x]")
    assert code != 0 and "[/x]" in err

    code, out, err = _run(
        settings, "keys", "create", "--role", "reader", "--scope", "[b]plant", "--name", "[/k]"
    )
    assert code == 0 and "([/k])" in out, err
    code, out, err = _run(settings, "keys", "list")
    assert code == 0 and "[/k]" in out and "[b]plant" in out, err


def test_an_answer_with_no_passage_does_not_claim_a_model_wrote_it(
    settings: Settings, tmp_path: Path
) -> None:
    write(tmp_path / "pump.md", "Prime the pump for two minutes before the first start.")
    assert _run(settings, "ingest", str(tmp_path))[0] == 0
    code, out, err = _run(settings, "ask", "How do I prime the pump?", "--tag", "no-such-tag")
    assert code == 0, err
    assert "no passage to answer from: no model was asked" in out and "answered by" not in out


def test_builds_lists_what_is_queued_wherever_it_was_started_until_it_ends(
    settings: Settings, tmp_path: Path
) -> None:
    write(tmp_path / "[b]pump.md", "Prime the pump for two minutes before the first start.")
    assert _run(settings, "ingest", str(tmp_path))[0] == 0
    code, out, err = _run(settings, "builds")
    assert (code, out) == (0, "") and "no builds queued or running" in err
    # Queued by another process (a server, a script); no runner builds it here.
    with Citeline(settings) as elsewhere:
        [doc] = elsewhere.documents()
        queued = elsewhere.reingest(doc.id).document

    code, out, err = _run(settings, "builds", "--json")
    assert code == 0, err
    [build] = json.loads(out)
    assert (build["document_id"], build["version"], build["current_version"]) == (str(doc.id), 2, 1)
    assert build["status"] == "queued" and build["version_id"] == str(queued.version_id)
    code, out, err = _run(settings, "builds")
    assert code == 0 and "1 build" in err
    [row] = [line.split() for line in out.splitlines() if "[b]pump.md" in line]
    assert row[:5] == [str(doc.id)[:8], "[b]pump.md", "2", "1", "queued"]

    with Citeline(settings) as elsewhere:
        elsewhere.cancel(doc.id)
    code, out, err = _run(settings, "builds")
    assert (code, out) == (0, "") and "no builds queued or running" in err
    code, out, err = _run(settings, "builds", "--failed-within", "1h")
    [row] = [line.split() for line in out.splitlines() if "[b]pump.md" in line]
    assert code == 0 and row[4] == "failed" and row[-1] == "cancelled", err
    code, _, err = _run(settings, "builds", "--failed-within", "soon")
    assert code != 0 and "'soon'" in err


def test_an_age_option_given_empty_or_malformed_is_refused_naming_the_option(
    settings: Settings, tmp_path: Path
) -> None:
    # `citeline refresh --older-than "$AGE"` with AGE unset read every source again: an empty age was
    # taken as no age at all.
    source = write(tmp_path / "pump.md", "Prime the pump for two minutes before the first start.")
    assert _run(settings, "ingest", str(source))[0] == 0
    with Citeline(settings) as cl:
        [before] = cl.documents()
    for command, option in (("refresh", "--older-than"), ("builds", "--failed-within")):
        for value in ("", "  ", "soon", "-1d"):
            code, out, err = _run(settings, command, option, value)
            assert (code, out) == (2, ""), (command, value, err)
            assert f"error: {option}: an age is a number and a unit" in err and repr(value) in err
    with Citeline(settings) as cl:
        [after] = cl.documents()
    assert after.last_fetched_at == before.last_fetched_at  # nothing was read again


def test_stats_names_the_broker_queue_of_the_deployment_with_celery_workers(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Workers print the queues they read at start; the processes that queue documents said nowhere
    # which queue they send to, so a deployment whose processes spell its database differently could
    # not be told from one whose workers are down.
    from citeline.jobs.celery import queue_of

    _empty_namespace(settings)
    code, out, _ = _run(settings, "stats", "--json")
    assert code == 0 and "job_queue" not in json.loads(out)  # the thread runner: no broker
    monkeypatch.setenv("CITELINE_JOB_RUNNER", "celery")
    monkeypatch.setenv("CITELINE_REDIS_URL", "redis://127.0.0.1:1/0")  # not reached by stats
    celery = settings.model_copy(update={"job_runner": "celery", "redis_url": "redis://127.0.0.1:1/0"})
    code, out, err = _run(settings, "stats", "--json")
    assert code == 0, err
    assert json.loads(out)["job_queue"] == queue_of(celery)
    code, out, _ = _run(settings, "stats")
    assert code == 0 and f"job_queue  {queue_of(celery)}" in out
    # The library says it, so GET /stats and the admin page do too, not the command line alone.
    with Citeline(celery) as cl:
        assert cl.stats()["job_queue"] == queue_of(celery)


def test_an_invalid_global_option_is_named_as_the_option_given(settings: Settings) -> None:
    # `citeline --namespace Clinic stats` answered "invalid setting: CITELINE_NAMESPACE: ...", a
    # variable the operator had not set.
    result = runner.invoke(app, ["--data-dir", str(settings.data_dir), "--namespace", "Clinic", "stats"])
    assert result.exit_code == 78
    assert "error: invalid setting: --namespace (CITELINE_NAMESPACE): " in result.stderr
    assert "must start with a lowercase letter" in result.stderr and "'Clinic'" in result.stderr
    # Set in the environment, it is named as the variable it is.
    result = runner.invoke(
        app, ["--data-dir", str(settings.data_dir), "stats"], env={"CITELINE_NAMESPACE": "Clinic"}
    )
    assert result.exit_code == 78 and "error: invalid setting: CITELINE_NAMESPACE: " in result.stderr


@pytest.mark.parametrize("command", ["backup", "restore"])
def test_an_empty_backup_file_name_is_refused_as_empty(settings: Settings, command: str) -> None:
    # `citeline backup "$FILE"` with FILE unset answered ". already exists" (exit code 3), and restore
    # ". is a folder": the empty name was read as the current folder.
    code, out, err = _run(settings, command, "")
    assert (code, out) == (2, ""), err
    assert f"error: {command}: the backup file name is empty" in err


def _namespaces(settings: Settings) -> set[str]:
    with Citeline(settings) as cl, cl.engine.connect() as conn:
        names = conn.execute(sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'citeline%'"))
        return {name.removeprefix("citeline_") for name in names.scalars()}


#: Commands that only read a namespace (or change what it already holds), with arguments.
_READING = [
    ("docs", "list"),
    ("docs", "show", "00000000"),
    ("search", "relief valve"),
    ("ask", "When does the relief valve open?", "--llm", "extractive"),
    ("chat", "--llm", "extractive"),
    ("stats",),
    ("builds",),
    ("docs", "delete", "00000000"),
    ("reingest", "--dry-run"),
    ("refresh", "--dry-run"),
    ("migrate",),
    ("keys", "list"),
]


def test_a_command_that_reads_a_namespace_the_database_lacks_names_it_and_creates_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    # A mistyped --namespace made an empty namespace and answered from it: no documents, no hits, exit
    # status 0, and the database gained a stray schema.
    valves = write(tmp_path / "valves.md", "The relief valve opens at 6 bar.")
    assert _run(settings, "ingest", str(valves))[0] == 0
    typo = settings.model_copy(update={"namespace": settings.namespace + "x"})
    for command in _READING:
        code, out, err = _run(typo, *command)
        assert (code, out) == (4, ""), (command, err)
        assert (
            f"error: no namespace {typo.namespace!r} in the embedded database in {settings.data_dir}; " in err
        )
        listed = err.split("; namespaces: ", 1)[1].split(". ", 1)[0].split(", ")
        assert settings.namespace in listed and typo.namespace not in listed, command
        assert typo.namespace not in _namespaces(settings), command
    # Writing into it makes it, as it always did; then the commands read it.
    assert _run(typo, "ingest", str(valves))[0] == 0
    assert typo.namespace in _namespaces(settings)
    code, out, err = _run(typo, "docs", "list")
    assert code == 0 and "valves.md" in out, err


def test_ingesting_a_file_already_stored_under_another_name_says_so(
    settings: Settings, tmp_path: Path
) -> None:
    note = "# Boiler B-7\n\nThe B-7 relief valve opens at 9.5 bar and is tested every spring."
    code, _, _ = _run(
        settings, "ingest", str(write(tmp_path / "boiler-b7.md", note)), "--scope", "maintenance"
    )
    assert code == 0
    # The same bytes again, under another name: stored, and said to be the same as the first, whose
    # scopes it does not have (the copy, universal, is seen by every reader).
    code, _, err = _run(settings, "ingest", str(write(tmp_path / "boiler-b7-copy.md", note)))
    assert code == 0 and "boiler-b7-copy.md: v1" in err
    said = " ".join(err.split())  # the console wraps long lines
    assert "same bytes as boiler-b7.md (scopes maintenance); this copy is universal" in said, err
    code, out, _ = _run(settings, "ingest", str(write(tmp_path / "boiler-b7-third.md", note)), "--json")
    [result] = [json.loads(line) for line in out.splitlines()]
    assert sorted(same["name"] for same in result["same_content_as"]) == ["boiler-b7-copy.md", "boiler-b7.md"]
    code, out, _ = _run(
        settings, "ingest", str(write(tmp_path / "other.md", "# Other\n\nSomething else.")), "--json"
    )
    assert [json.loads(line)["same_content_as"] for line in out.splitlines()] == [[]]
    # Search and answers show the passage once, naming the documents that hold it too.
    code, out, err = _run(settings, "search", "When does the B-7 relief valve open?")
    assert code == 0, err
    assert re.search(r"also in: .*boiler-b7.*\.md p\.1, .*boiler-b7.*\.md p\.1", out), out
    code, out, err = _run(settings, "ask", "When does the B-7 relief valve open?", "--llm", "extractive")
    assert code == 0, err
    sources = out[out.index("Sources") :]
    assert re.search(r"\[1\] .*boiler-b7.*\.md p\.1.*\n.*9\.5 bar.*\n    also in: .*boiler-b7", sources), (
        sources
    )


def test_ingest_records_the_user_of_the_command_line_as_uploader(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # getpass reads the login name from LOGNAME first, as it does on a shell of the server.
    monkeypatch.setenv("LOGNAME", "ana")
    code, _, err = _run(settings, "ingest", str(write(tmp_path / "hose.md", "# Hose\n\nThe hose is 8 m.")))
    assert code == 0, err
    with Citeline(settings) as cl:
        [hose] = cl.documents()
    # As an API key's upload records key:<id>, so that an administrator knows who sent each version.
    assert hose.uploaded_by == "cli:ana"


def test_tables_piped_to_another_program_keep_each_row_on_one_line(
    settings: Settings, tmp_path: Path
) -> None:
    # Folded into 80 columns, as Rich does when its output is not a terminal, `docs list | grep pump`
    # found pieces of names: "centrifugal_feed_pump_" on one line, "maintenance_schedule" on the next.
    name = "centrifugal_feed_pump_maintenance_schedule_for_the_north_plant_2026.md"
    write(tmp_path / name, "# Feed pump\n\nThe feed pump is greased every 2000 hours.\n")
    scope = "north-plant-mechanical-maintenance"
    code, _, err = _run(settings, "ingest", str(tmp_path / name), "--scope", scope, "--tag", "lubrication")
    assert code == 0, err

    code, out, err = _run(settings, "docs", "list")
    assert code == 0, err
    (row,) = [line for line in out.splitlines() if "centrifugal" in line]
    assert name in row and scope in row and "lubrication" in row and "completed" in row
    assert len(row.split()[0]) == 8  # the id other commands take, first

    code, out, err = _run(settings, "keys", "create", "--role", "reader", "--scope", scope, "--name", name)
    assert code == 0, err
    code, out, err = _run(settings, "keys", "list")
    assert code == 0, err
    (row,) = [line for line in out.splitlines() if "centrifugal" in line]
    assert name in row and scope in row and "reader" in row


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--type", "docx"), "error: --type (content_types): unknown content type 'docx'"),
        (("--scope", " ward-a"), "error: --scope (scopes): a scope must not start or end with whitespace"),
        (("--threshold", "3"), "'--threshold'"),
    ],
)
def test_a_bad_search_option_is_refused_naming_the_option_typed(
    tmp_path: Path, args: tuple[str, ...], named: str
) -> None:
    # "content_types: unknown content type" and "distance_threshold is a cosine distance" named fields
    # of the library the user never typed.
    result = runner.invoke(app, ["--data-dir", str(tmp_path), "search", "relief valve", *args])
    assert result.exit_code == 2
    assert named in " ".join(result.stderr.split())


def test_a_csv_passage_is_shown_by_its_rows_of_the_file_not_by_page_1(
    settings: Settings, tmp_path: Path
) -> None:
    # "p.1 chars 912-1117" found nothing in a spreadsheet. The header is row 1, the "sep=;" line Excel
    # hides is none, and the blank line is row 3: sitagliptin is on row 4.
    doses = write(
        tmp_path / "doses.csv",
        "sep=;\ndrug;dose\nmetformin;500 mg twice daily\n\nsitagliptin;100 mg once daily\n",
    )
    code, out, err = _run(settings, "ingest", str(doses))
    assert code == 0, err

    code, out, err = _run(settings, "search", "sitagliptin dose", "--top-k", "1")
    assert code == 0, err
    assert out.splitlines()[0].startswith("[1] doses.csv row 4  ")
    code, out, err = _run(settings, "ask", "What is the dose of sitagliptin?", "--llm", "extractive")
    assert code == 0, err
    sources = out.split("Sources", 1)[1]
    assert "doses.csv row 4  " in sources and "p.1" not in sources
    code, out, err = _run(settings, "search", "sitagliptin dose", "--top-k", "1", "--json")
    doc_id = json.loads(out)[0]["document_id"]
    code, out, err = _run(settings, "docs", "show", doc_id, "--chunks")
    assert code == 0, err
    assert [line.split(" chars ")[0] for line in out.splitlines() if line.startswith("#")] == [
        "#0 row 2",
        "#1 row 4",
    ]
    # A passage of several rows names them all; one with no rows (a PDF's, a note's) its page.
    assert (_place(1, (12, 14)), _place(3, None)) == ("rows 12-14", "p.3")
