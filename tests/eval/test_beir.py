"""Reading BEIR folders: every malformed line is refused with its file, line and reason before anything
is stored; what a user's tools write (a BOM, CRLF, integer ids) is read as meant; a corpus file that
names another folder's corpus is followed."""

from __future__ import annotations

import codecs
import io
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.eval.beir import corpus_sources, evaluate, judgement_warnings, load_beir
from tests.eval.conftest import CORPUS, QRELS, QUERIES, write_beir


def test_a_corpus_stored_as_a_link_in_text_is_followed(beir_folder: Path, tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    shutil.copytree(beir_folder, claims)
    (claims / "corpus.jsonl").write_text(f"../{beir_folder.name}/corpus.jsonl\n", encoding="utf-8")
    assert beir_folder.parent == claims.parent
    data = load_beir(claims)
    assert data.corpus_path == (beir_folder / "corpus.jsonl").resolve()
    assert len(list(corpus_sources(data, "ns"))) == len(list(corpus_sources(load_beir(beir_folder), "ns")))
    assert set(data.queries) == set(QUERIES)


def test_a_link_to_nothing_names_the_missing_corpus(beir_folder: Path) -> None:
    (beir_folder / "corpus.jsonl").write_text("../nowhere/corpus.jsonl", encoding="utf-8")
    with pytest.raises(InvalidRequestError, match="nowhere"):
        load_beir(beir_folder)


@pytest.mark.parametrize("limit", [0, -3])
def test_a_limit_below_one_query_is_refused_before_the_corpus_is_touched(
    cl: Citeline, beir_folder: Path, limit: int
) -> None:
    with pytest.raises(InvalidRequestError, match=f"at least 1; got {limit}"):
        evaluate(cl, load_beir(beir_folder), limit=limit)
    assert cl.documents() == []


QRELS_LINES = "query-id\tcorpus-id\tscore\nq1\tstatins\t1\n"


def _folder(
    root: Path, *, corpus: str | None = None, queries: str | None = None, qrels: str | None = None
) -> Path:
    """The tiny folder of the conftest, with any of its three files replaced by ``corpus``, ... as given."""
    folder = write_beir(root / "beir", QUERIES, QRELS)
    for name, text in (("corpus.jsonl", corpus), ("queries.jsonl", queries), ("qrels/test.tsv", qrels)):
        if text is not None:
            (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("queries", "message"),
    [
        ('{"_id": "q1", "text": "Statins?"}\n{"_id": "q2", "text": \n', "queries.jsonl, line 2: not JSON"),
        ('{"_id": "q1", "text": "Statins?"}\n\n{"text": "no id"}\n', 'queries.jsonl, line 3: no "_id"'),
        ('{"_id": null, "text": "Statins?"}\n', 'line 1: "_id" must be a string or an integer, got null'),
        ('{"_id": true, "text": "Statins?"}\n', 'line 1: "_id" must be a string or an integer, got true'),
        ('{"_id": " ", "text": "Statins?"}\n', 'line 1: "_id" is empty'),
        ('["q1", "Statins?"]\n', "line 1: a JSON object is expected, got list"),
        ('{"_id": "q1"}\n', 'queries.jsonl, line 1: no "text"'),
        ('{"_id": "q1", "text": 7}\n', 'line 1: "text" must be a string, got 7'),
        ('{"_id": "q1", "text": "  "}\n', "line 1: query 'q1' has an empty \"text\""),
        (
            '{"_id": "q1", "text": "Statins?"}\n{"_id": "q1", "text": "Aspirin?"}\n',
            "queries.jsonl, line 2: the _id 'q1' is given twice (first on line 1)",
        ),
    ],
)
def test_a_malformed_query_line_is_refused_naming_file_line_and_reason(
    tmp_path: Path, queries: str, message: str
) -> None:
    folder = _folder(tmp_path, queries=queries, qrels=QRELS_LINES)
    with pytest.raises(InvalidRequestError, match=re.escape(message)):
        load_beir(folder)


def test_a_query_file_in_another_encoding_is_refused_at_its_first_foreign_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path, qrels=QRELS_LINES)
    text = '{"_id": "q1", "text": "Statins?"}\n{"_id": "q2", "text": "Caf\u00e9?"}\n'
    (folder / "queries.jsonl").write_bytes(text.encode("latin-1"))
    with pytest.raises(InvalidRequestError, match=re.escape("queries.jsonl, line 2: not UTF-8 text")):
        load_beir(folder)


@pytest.mark.parametrize(
    ("qrels", "message"),
    [
        (
            "q1 statins 1\n",
            "test.tsv, line 1: expected query-id, corpus-id and score separated by tabs, "
            "got 1 field(s); the fields must be separated by tabs",
        ),
        ("q1\t0\tstatins\t1\n", "got 4 field(s); TREC qrels (query 0 document score) need the second column"),
        ("q1\tQ0\tstatins\t1\n", "TREC qrels (query 0 document score) need the second column"),
        # Four fields that are not TREC's: no TREC hint, which used to be given for any four.
        (
            "q1\tstatins\t1\textra\n",
            "expected query-id, corpus-id and score separated by tabs, got 4 field(s)",
        ),
        # A header other than BEIR's: say which one is recognised, not only that "rel" is no integer.
        (
            "qid\tdocid\trel\nq1\tstatins\t1\n",
            "test.tsv, line 1: the score 'rel' is not an integer; the only header recognised is "
            "'query-id<TAB>corpus-id<TAB>score' (BEIR's): rename it or remove the line",
        ),
        ("q1\tstatins\t1.0\n", "line 1: the score '1.0' is not an integer"),
        ("q1\t\t1\n", "line 1: the query-id or the corpus-id is empty"),
        (
            "q1\tstatins\t1\n\nq1\tstatins\t2\n",
            "line 3: query 'q1' and document 'statins' are judged again with another score (2; 1 on line 1)",
        ),
        ("", "no query to run: "),
        (
            "nobody\tstatins\t1\n",
            "judges none of the queries (its 1 judged query id(s) ('nobody', ...) are not ids",
        ),
    ],
)
def test_malformed_or_useless_judgements_are_refused(tmp_path: Path, qrels: str, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=re.escape(message)) as info:
        load_beir(_folder(tmp_path, qrels=qrels))
    if "\tQ0\t" not in qrels and "\t0\t" not in qrels:
        assert "TREC" not in str(info.value)


def test_a_file_given_for_the_folder_is_named_as_a_file(tmp_path: Path) -> None:
    # It used to read "corpus.jsonl is missing (team/corpus.jsonl/corpus.jsonl)".
    folder = _folder(tmp_path)
    with pytest.raises(InvalidRequestError) as info:
        load_beir(folder / "corpus.jsonl")
    assert str(info.value) == (
        f"{folder / 'corpus.jsonl'} is a file; citeline eval takes the BEIR folder that holds "
        f"corpus.jsonl, queries.jsonl and qrels/ (here perhaps {folder})"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"_id": "moon" "text": "x"}', "corpus.jsonl, line 7: not JSON"),
        ('{"title": "Moon", "text": "The moon."}', 'corpus.jsonl, line 7: no "_id"'),
        ('{"_id": "moon", "title": "Moon"}', 'corpus.jsonl, line 7: no "text"'),
        ('{"_id": "moon", "text": ["The moon."]}', 'line 7: "text" must be a string'),
        (
            '{"_id": "statins", "text": "Another entry."}',
            "line 7: the _id 'statins' is given twice (first on line 2)",
        ),
    ],
)
def test_a_malformed_corpus_line_is_refused_when_the_corpus_is_read(
    tmp_path: Path, line: str, message: str
) -> None:
    folder = _folder(tmp_path)
    with (folder / "corpus.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("\n" + line + "\n")
    data = load_beir(folder)
    with pytest.raises(InvalidRequestError, match=re.escape(message)):
        _ = data.corpus_ids


def test_what_windows_editors_and_exporters_write_is_read_as_written(tmp_path: Path) -> None:
    # A byte-order mark, CRLF line ends, blank lines, integer ids, a title left out and the header.
    corpus = (
        '{"_id": 7, "text": "Statins lower LDL cholesterol."}\r\n\r\n'
        + '{"_id": "8", "title": null, "text": ""}\r\n'
    )
    queries = '{"_id": 1, "text": "Do statins reduce cholesterol?"}\r\n'
    folder = _folder(
        tmp_path, corpus=corpus, queries=queries, qrels="query-id\tcorpus-id\tscore\r\n1\t7\t1\r\n"
    )
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        path = folder / name
        path.write_bytes(codecs.BOM_UTF8 + path.read_bytes())
    data = load_beir(folder)
    assert data.queries == {"1": "Do statins reduce cholesterol?"}
    assert data.qrels == {"1": {"7": 1}}
    assert data.corpus_ids == ("7", "8")


def test_the_first_few_unjudged_queries_are_named(tmp_path: Path) -> None:
    queries = {f"u{i}": f"question {i}" for i in range(7)} | {"q1": "Do statins reduce cholesterol?"}
    data = load_beir(write_beir(tmp_path / "many", queries, {"q1": "statins"}))
    assert judgement_warnings(data) == [
        "queries with no judgement in this split are not run: 7 (u0, u1, u2, u3, u4, ...)"
    ]


def test_judgements_that_cannot_be_measured_as_meant_are_reported(tmp_path: Path) -> None:
    qrels = "q1\tstatins\t1\nq1\tretracted\t2\nq2\taspirin\t0\nghost\tstatins\t1\n"
    data = load_beir(_folder(tmp_path, qrels=qrels))
    assert set(data.queries) == {"q1", "q2"} and data.unknown_queries == ("ghost",)
    notes = judgement_warnings(data)
    assert len(notes) == 4
    # Queries the split does not judge are not run, as documented; they used to be dropped silently.
    assert data.unjudged_queries == ("q3", "q4")
    assert notes[3] == "queries with no judgement in this split are not run: 2 (q3, q4)"
    assert "queries.jsonl does not hold are left out: 1 (for example 'ghost')" in notes[0]
    assert "'retracted' for query 'q1'" in notes[1]
    assert (
        "no relevant judgement (no score above 0), which score 0 on every metric: 1" in notes[2]
        and "'q2'" in notes[2]
    )
    assert judgement_warnings(load_beir(_folder(tmp_path / "fine"))) == []


def test_an_entry_holding_nul_characters_is_stored_without_them(cl: Citeline, tmp_path: Path) -> None:
    # PostgreSQL text cannot hold NUL: one such entry used to stop the whole ingest with a traceback.
    corpus = [(doc, title, text) for doc, title, text in CORPUS if doc != "statins"]
    corpus.append(("statins", "Sta\x00tins", "Statins lower LDL\x00 cholesterol."))
    folder = write_beir(tmp_path / "nul", {"q1": QUERIES["q1"]}, {"q1": "statins"}, corpus)
    evaluation = evaluate(cl, load_beir(folder))
    assert (evaluation.corpus_added, evaluation.results[0].queries[0].top10[0]) == (len(CORPUS), "statins")
    assert evaluate(cl, load_beir(folder)).corpus_unchanged == len(CORPUS)


def test_an_entry_that_fails_to_ingest_is_named(cl: Citeline, tmp_path: Path) -> None:
    corpus = [*CORPUS, ("blank", "", "")]
    folder = write_beir(tmp_path / "blank", {"q1": QUERIES["q1"]}, {"q1": "statins"}, corpus)
    output = io.StringIO()
    evaluation = evaluate(cl, load_beir(folder), console=Console(file=output, width=300))
    assert evaluation.corpus_added == len(CORPUS) and evaluation.corpus_failed == 1
    assert "warning: 1 corpus entry failed to ingest (blank: no text to index)" in output.getvalue()
