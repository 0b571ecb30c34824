"""``citeline eval --answers``: claims asked as questions, answered extractively, citations checked.

The corpus is the tiny one of ``conftest.py``; the claims are written for it. Claim ``tea`` is judged
against an abstract that is not in the corpus, and no abstract of the corpus is about it: citeline
says the evidence is missing.
The judgements list the claims in another order than ``queries.jsonl``: the sample follows them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from rich.console import Console
from typer.testing import CliRunner

from citeline.answer import Complete, Start
from citeline.chat.session import conversations
from citeline.cli import app
from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.eval.answers import (
    AnswerRecord,
    check_citations,
    claim_question,
    evaluate_answers,
    expected_verdict,
    question_of,
    sample_claims,
    verdict_macro_f1,
    verdict_macro_f1_ci,
)
from citeline.eval.beir import load_beir
from citeline.settings import Settings
from citeline.store.database import schema_name
from tests.eval.conftest import CORPUS, write_beir

QUIET = Console(quiet=True)
CLAIMS = {
    "statins": "Statins lower LDL cholesterol.",
    "aspirin": "Low-dose aspirin lowers the risk of a second heart attack.",
    "vitd": "Vitamin D supplements prevent fractures in older people.",
    "tea": "Green tea extract cures migraine.",
}
# claim id -> judged abstract, in the order of the judgement file
JUDGED = {"aspirin": "aspirin", "tea": "green-tea-trial", "statins": "statins", "vitd": "vitd"}


@pytest.fixture
def claims_folder(tmp_path: Path) -> Path:
    return write_beir(tmp_path / "claims", CLAIMS, JUDGED)


@contextmanager
def _open(settings: Settings, **more: object) -> Iterator[Citeline]:
    """The test's namespace answered extractively, dropped on the way out."""
    with Citeline(settings.model_copy(update={"llm": "extractive", **more})) as instance:
        yield instance
        with instance.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))


@pytest.fixture
def extractive(settings: Settings) -> Iterator[Citeline]:
    with _open(settings) as cl:
        yield cl


@pytest.mark.parametrize(
    ("claim", "question"),
    [
        (
            "Aspirin inhibits the production of PGE2.",
            "Is it true that aspirin inhibits the production of PGE2?",
        ),
        (
            "ALDH1 expression is associated with poorer prognosis.",
            "Is it true that ALDH1 expression is associated with poorer prognosis?",
        ),
        ("IgA binds to FcRn.", "Is it true that IgA binds to FcRn?"),
        ("GATA-3 is important for HSC function", "Is it true that GATA-3 is important for HSC function?"),
        (
            "A deficiency of vitamin B12 raises homocysteine.",
            "Is it true that a deficiency of vitamin B12 raises homocysteine?",
        ),
        (
            "0-dimensional biomaterials show inductive properties.",
            "Is it true that 0-dimensional biomaterials show inductive properties?",
        ),
        ("Ca2+ levels rise. Cells die.", "Is it true that Ca2+ levels rise. Cells die?"),
    ],
)
def test_claims_are_asked_as_yes_no_questions(claim: str, question: str) -> None:
    assert claim_question(claim) == question


@pytest.mark.parametrize(
    ("query", "asked", "asked_as"),
    [
        # A question is asked as written: wrapping it gave "Is it true that how do I ...??".
        (
            "how do I change the chunk size and overlap?",
            "how do I change the chunk size and overlap?",
            "question",
        ),
        ("What does the reranker do", "What does the reranker do", "question"),
        ("Does aspirin lower the risk of a stroke?", "Does aspirin lower the risk of a stroke?", "question"),
        ("  Can I upload PDFs?  ", "Can I upload PDFs?", "question"),
        # Only claims are wrapped; a word that merely starts like a question word is no question word.
        ("Statins lower LDL cholesterol.", "Is it true that statins lower LDL cholesterol?", "claim"),
        (
            "Do-not-resuscitate orders are rare.",
            "Is it true that do-not-resuscitate orders are rare?",
            "claim",
        ),
        ("Whatever the dose, aspirin helps.", "Is it true that whatever the dose, aspirin helps?", "claim"),
    ],
)
def test_a_question_is_asked_as_written_and_only_a_claim_is_wrapped(
    query: str, asked: str, asked_as: str
) -> None:
    assert question_of(query) == (asked, asked_as)


def test_the_sample_is_the_first_claims_in_judgement_order(claims_folder: Path) -> None:
    data = load_beir(claims_folder)
    assert sample_claims(data, 3) == ["aspirin", "tea", "statins"]
    assert sample_claims(data, 100) == list(JUDGED)
    with pytest.raises(InvalidRequestError, match="at least one claim"):
        sample_claims(data, 0)


def test_claims_held_out_are_taken_after_the_ones_skipped(claims_folder: Path) -> None:
    data = load_beir(claims_folder)
    assert sample_claims(data, 2, skip=1) == ["tea", "statins"]
    assert sample_claims(data, 100, skip=3) == list(JUDGED)[3:]
    assert sample_claims(data, 5, skip=len(JUDGED)) == []
    with pytest.raises(InvalidRequestError, match="fewer than none"):
        sample_claims(data, 1, skip=-1)


def test_extractive_answers_resolve_and_cite_the_gold_abstract_only_when_it_was_given(
    extractive: Citeline, claims_folder: Path
) -> None:
    evaluation = evaluate_answers(extractive, load_beir(claims_folder), sample=4, console=QUIET)
    assert evaluation.corpus_added == len(CORPUS) and evaluation.llm == "extractive"
    records = {r.claim_id: r for r in evaluation.records}
    assert [r.claim_id for r in evaluation.records] == list(JUDGED)

    statins = records["statins"]
    assert statins.question == "Is it true that statins lower LDL cholesterol?"
    assert statins.gold == ("statins",) and statins.gold_given and statins.gold_cited
    for claim in ("statins", "aspirin", "vitd"):
        assert records[claim].cited == (claim,), "the abstract that states it is the one quoted"
    # No abstract of the corpus is about tea or migraine: citeline says the evidence is missing, and
    # that is not an answer without a citation.
    tea = records.pop("tea")
    assert tea.gold == ("green-tea-trial",)
    assert tea.evidence_missing and tea.given == () and tea.answered_by == "nobody"
    assert not tea.gold_given and not tea.gold_cited
    assert not tea.cited and not tea.uncited and tea.resolved
    for record in records.values():
        assert record.answered_by == "extractive" and record.provider == "extractive"
        assert set(record.cited) <= set(record.given)
        assert record.displayed == len(record.cited) == record.resolved_count and record.resolved
        assert record.problems == () and record.error is None and not record.evidence_missing
        assert record.first_token_ms is not None and 0 < record.first_token_ms <= record.answer_ms
        assert record.answer_ms < record.total_ms
        assert record.cpu_ms > 0, "the processor time of the question is recorded"
        assert 0 < record.prompt_ms <= record.answer_ms and record.generation_ms == 0.0  # no model
        assert record.as_dict()["prompt_ms"] == record.prompt_ms
    assert conversations(extractive) == [], "each claim's conversation is deleted"

    summary = evaluation.summary()
    assert summary["claims"] == 4
    assert summary["citation_resolution_rate"] == 1.0 and summary["answers_resolved_rate"] == 1.0
    assert summary["citations_displayed"] == sum(len(r.cited) for r in evaluation.records)
    assert summary["gold_given_rate"] == 0.75
    assert summary["gold_cited_rate"] == 0.75
    assert summary["answers_without_citation"] == 0 and summary["evidence_missing"] == 1
    assert summary["answered_extractive"] == 3 and summary["answered_by_model"] == 0
    assert summary["fallback_rate"] == 0.0 and summary["citations_by_model"] == 0
    assert summary["ttft_p50_ms"] <= summary["ttft_p90_ms"]
    assert summary["total_cpu_p50_ms"] > 0 and summary["generation_p50_ms"] == 0.0


def test_missing_evidence_is_not_counted_as_an_answer_without_citation(
    settings: Settings, claims_folder: Path
) -> None:
    # No chunk is this close to any question, so no passage is given.
    with _open(settings, distance_threshold=0.01) as cl:
        evaluation = evaluate_answers(cl, load_beir(claims_folder), sample=2, console=QUIET)
    for record in evaluation.records:
        assert record.evidence_missing and record.given == () and record.cited == ()
        assert record.answered_by == "nobody" and not record.uncited and record.resolved
    summary = evaluation.summary()
    assert summary["evidence_missing"] == 2 and summary["answers_without_citation"] == 0
    assert summary["citations_displayed"] == 0 and summary["citation_resolution_rate"] is None
    assert summary["ttft_p50_ms"] is None, "saying the evidence is missing is not a first token"


def test_citations_that_do_not_resolve_are_caught(extractive: Citeline, claims_folder: Path) -> None:
    data = load_beir(claims_folder)
    evaluate_answers(extractive, data, sample=1, console=QUIET)  # ingests the corpus
    session = extractive.chat()

    async def run() -> tuple[Start, Complete]:
        events = [event async for event in session.ask(claim_question(CLAIMS["statins"]))]
        start, end = events[1], events[-1]  # events[0] is the turn's TurnStart
        assert isinstance(start, Start) and isinstance(end, Complete)
        return start, end

    start, complete = asyncio.run(run())
    first = complete.citations[0]
    stored = {hit.chunk_id: hit for hit in extractive.fetch([c.chunk_id for c in complete.citations])}
    numbers, problems = check_citations(complete, start.passages, stored)
    assert numbers == [c.number for c in complete.citations] and problems == []

    # A number in the text with no source behind it.
    numbers, problems = check_citations(
        replace(complete, answer=complete.answer + " More [9]."), start.passages, stored
    )
    assert numbers[-1] == 9 and problems == [(9, "[9] is in the answer but has no citation record")]

    # A source that was not among the passages given.
    others = tuple(p for p in start.passages if p.chunk_id != first.chunk_id)
    _, problems = check_citations(complete, others, stored)
    assert problems == [(first.number, f"[{first.number}] cites chunk {first.chunk_id}, not a passage given")]

    # The wrong page, a span outside the chunk, an excerpt that is not the stored text.
    for wrong, expected in (
        (replace(first, page=first.page + 1), "points to document"),
        (replace(first, end=first.end + 50), "is not inside chunk"),
        (replace(first, excerpt="Statins raise cholesterol."), "excerpt does not match the stored text"),
    ):
        tampered = replace(complete, citations=(wrong, *complete.citations[1:]))
        _, problems = check_citations(tampered, start.passages, stored)
        assert [n for n, _ in problems] == [first.number] and expected in problems[0][1]

    # The cited document was deleted after the answer: its chunk no longer resolves.
    extractive.delete(str(first.document_id))
    stored = {hit.chunk_id: hit for hit in extractive.fetch([c.chunk_id for c in complete.citations])}
    _, problems = check_citations(complete, start.passages, stored)
    assert (
        first.number,
        f"[{first.number}] cites chunk {first.chunk_id}, not active in the store",
    ) in problems


def _run(settings: Settings, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app, ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, "eval", *args]
    )
    return result.exit_code, result.stdout, result.stderr


def test_cli_answers_prints_the_summary_and_writes_one_line_per_claim(
    settings: Settings, claims_folder: Path, tmp_path: Path
) -> None:
    per_claim = tmp_path / "claims.jsonl"
    try:
        code, out, err = _run(
            settings,
            str(claims_folder),
            "--answers",
            "2",
            "--llm",
            "extractive",
            "--per-query",
            str(per_claim),
            "--json",
        )
        assert code == 0, err
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["claims"] == 2 and summary["llm"] == "extractive"
        assert summary["namespace"] == settings.namespace and summary["corpus_added"] == len(CORPUS)
        assert summary["citation_resolution_rate"] == 1.0 and summary["gold_given_rate"] == 0.5
        assert "gold abstract cited" in err and "citations resolved" in err
        lines = [json.loads(line) for line in per_claim.read_text(encoding="utf-8").splitlines()]
        assert [line["claim_id"] for line in lines] == ["aspirin", "tea"]
        assert lines[0]["question"] == claim_question(CLAIMS["aspirin"])
        assert lines[1]["gold_given"] is False and lines[1]["gold_cited"] is False
        assert all(line["resolved"] for line in lines)
        assert [line["answered_by"] for line in lines] == ["extractive", "nobody"]

        # Claims held out from tuning: the sample starts after the ones skipped.
        code, out, err = _run(
            settings,
            str(claims_folder),
            "--answers",
            "1",
            "--answers-skip",
            "2",
            "--per-query",
            str(per_claim),
        )
        assert code == 0, err
        assert [json.loads(line)["claim_id"] for line in per_claim.read_text().splitlines()] == ["statins"]
    finally:
        with _open(settings):
            pass


def test_cli_answers_asks_questions_as_written_and_says_how_each_was_asked(
    settings: Settings, tmp_path: Path
) -> None:
    # A team's gold questions are questions, not claims: each is asked as the team wrote it.
    queries = {**CLAIMS, "aspirin": "Does low-dose aspirin lower the risk of a second heart attack?"}
    folder = write_beir(tmp_path / "team", queries, JUDGED)
    per_claim = tmp_path / "asked.jsonl"
    try:
        code, out, err = _run(
            settings,
            *(str(folder), "--answers", "3", "--llm", "extractive"),
            *("--per-query", str(per_claim), "--json"),
        )
        assert code == 0, err
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["asked_as_questions"] == 1 and summary["asked_as_claims"] == 2
        assert "1 asked as written (questions), 2 as claims" in err
        lines = [json.loads(line) for line in per_claim.read_text(encoding="utf-8").splitlines()]
        assert [(line["claim_id"], line["asked_as"]) for line in lines] == [
            ("aspirin", "question"),
            ("tea", "claim"),
            ("statins", "claim"),
        ]
        assert lines[0]["question"] == queries["aspirin"]
        assert lines[1]["question"] == "Is it true that green tea extract cures migraine?"
    finally:
        with _open(settings):
            pass


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--answers", "2", "--compare", "rrf"], "--answers cannot be combined with --compare"),
        (["--answers", "2", "--limit", "1"], "--answers cannot be combined with --limit"),
        (["--llm", "extractive"], "--llm applies to --answers only"),
        (["--answers", "0"], "--answers"),
        (["--answers", "2", "--llm", "nosuch:model"], "unknown LLM provider 'nosuch'"),
    ],
)
def test_cli_answers_refuses_bad_options_before_any_work(
    settings: Settings, claims_folder: Path, args: list[str], message: str
) -> None:
    code, out, err = _run(settings, str(claims_folder), *args)
    assert code != 0 and message in err
    assert out == "" and "ingested" not in err


def test_verdicts_and_stances_are_scored_against_the_evidence_labels(
    extractive: Citeline, claims_folder: Path
) -> None:
    # "Vitamin D supplements do not prevent fractures": the corpus contradicts the vitd claim.
    labels = {"statins": "SUPPORT", "aspirin": "SUPPORT", "vitd": "CONTRADICT"}
    (claims_folder / "evidence.jsonl").write_text(
        "".join(
            json.dumps({"query_id": q, "doc_id": JUDGED[q], "label": label}) + "\n"
            for q, label in labels.items()
        )
    )

    evaluation = evaluate_answers(extractive, load_beir(claims_folder), sample=4, console=QUIET)

    records = {r.claim_id: r for r in evaluation.records}
    assert {q: records[q].expected_verdict for q in labels} == {
        "statins": "supports",
        "aspirin": "supports",
        "vitd": "contradicts",
    }
    assert records["tea"].expected_verdict is None and records["tea"].verdict is None
    for claim in labels:
        record = records[claim]
        # Every answer to a claim opens with a verdict that a cited passage bears out.
        assert record.verdict in ("supports", "contradicts", "mixed"), record.answer
        assert any(stance == record.verdict for _, stance in record.stances) or record.verdict == "mixed"
    summary = evaluation.summary()
    right = [records[q].verdict == records[q].expected_verdict for q in labels]
    assert summary["claims_labelled"] == 3
    assert summary["verdict_accuracy"] == sum(right) / 3
    low, high = summary["verdict_accuracy_ci"]
    assert low <= summary["verdict_accuracy"] <= high
    gold = [
        stance == records[q].expected_verdict
        for q in labels
        for doc, stance in records[q].stances
        if doc == q
    ]
    assert summary["gold_citations_with_label"] == len(gold) > 0
    assert summary["stance_accuracy_gold"] == sum(gold) / len(gold)
    assert summary["model_written_rate"] == 0.0  # extractive: no model
    line = records["vitd"].as_dict()
    assert line["verdict"] == records["vitd"].verdict and line["expected_verdict"] == "contradicts"
    assert line["citations"] == [{"document": d, "stance": s} for d, s in records["vitd"].stances]


def test_verdict_macro_f1_averages_the_expected_classes() -> None:
    def record(verdict: str | None, expected: str) -> AnswerRecord:
        return AnswerRecord(
            claim_id="c", claim="c", question="q", gold=(), given=(), cited=(), displayed=0, resolved_count=0,
            problems=(), answered_by="model", provider="p", fallback_reason=None, attributed=0,
            evidence_missing=False, error=None, answer="", first_token_ms=None, answer_ms=0.0, total_ms=0.0,
            verdict=verdict, expected_verdict=expected,
        )  # fmt: skip

    records = [record("supports", "supports"), record("supports", "contradicts"), record(None, "contradicts")]

    # supports: precision 1/2, recall 1 -> F1 2/3; contradicts: nothing right -> 0.
    assert verdict_macro_f1(records) == pytest.approx((2 / 3 + 0) / 2)
    assert expected_verdict({"a": "SUPPORT", "b": "CONTRADICT"}) == "mixed"
    assert expected_verdict({}) is None
    # The interval holds the figure, and narrows to it when every verdict is right.
    low, high = verdict_macro_f1_ci(records * 10)
    assert low <= verdict_macro_f1(records * 10) <= high and low < high
    assert verdict_macro_f1_ci([record("supports", "supports"), record("contradicts", "contradicts")]) == (
        1.0,
        1.0,
    )
