"""A table's row backs only a sentence about that row: the row it names, with that row's values."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import sqlalchemy as sa

from citeline.answer.attribution import Attributor
from citeline.answer.citations import CitationNumbering, CitationRewriter, verify
from citeline.answer.extractive import extractive_answer
from citeline.answer.prompt import Passage, select_passages
from citeline.answer.quantities import disagreement
from citeline.answer.relevance import answerable
from citeline.answer.rows import row_keys
from citeline.answer.support import VectorCache
from citeline.embed import Embedder
from citeline.engine import Citeline
from citeline.retrieve.search import SearchRequest

from ..conftest import write
from .conftest import make_hit

# Rows of a dosing table and of reference ranges, as the CSV loader writes them: one chunk each.
DOSING = (
    "drug: Sitagliptin; indication: Type 2 diabetes mellitus; adult dose: 100 mg orally once daily; "
    "renal adjustment: eGFR 30-45: 50 mg once daily; eGFR < 30: 25 mg once daily",
    "drug: Empagliflozin; indication: Type 2 diabetes mellitus; adult dose: 10 mg orally once daily; "
    "renal adjustment: eGFR < 30: halve the dose",
    "drug: Paracetamol; indication: Pain; adult dose: 500 mg orally every 6 hours; renal adjustment: none",
)
RANGES = (
    "analyte: Potassium; specimen: serum; lower limit: 3.5; upper limit: 5.1; unit: mmol/L",
    "analyte: Sodium; specimen: serum; lower limit: 135; upper limit: 145; unit: mmol/L",
)


def rows(texts: tuple[str, ...]) -> list[Passage]:
    return select_passages(
        [replace(make_hit(i + 1, text), content_type="text/csv") for i, text in enumerate(texts)]
    )


def backed(sentence: str, question: str, passages: list[Passage], embedder: Embedder) -> bool:
    verification = verify(
        sentence, {i + 1: p for i, p in enumerate(passages)}, VectorCache(embedder), question=question
    )
    return not verification.unsupported


def test_a_row_backs_a_sentence_about_it_not_one_about_another_row(embedder: Embedder) -> None:
    passages = rows(DOSING)
    question = "What is the renal adjustment for sitagliptin when eGFR < 30?"

    assert backed(
        "For sitagliptin below eGFR 30 the dose is 25 mg once daily [1].", question, passages, embedder
    )
    # A trial: the empagliflozin row's value, cited to it (0.71) or to the sitagliptin row (0.79).
    assert not backed(
        "The renal adjustment for sitagliptin when eGFR < 30 is halve the dose [2].",
        question,
        passages,
        embedder,
    )
    assert not backed(
        "The renal adjustment for sitagliptin when eGFR < 30 is halve the dose [1].",
        question,
        passages,
        embedder,
    )
    # The question may name the row: the sentence need not say it again.
    assert backed("The dose is 25 mg once daily below eGFR 30 [1].", question, passages, embedder)
    # A drug no row names: the paracetamol row backs no sentence on it.
    assert not backed(
        "The adult dose of tacrolimus is 500 mg orally every 6 hours [3].",
        "What is the adult dose of tacrolimus?",
        passages,
        embedder,
    )


def test_a_value_from_another_row_is_not_attributed_to_a_row(embedder: Embedder) -> None:
    # A trial: "The normal range for potassium is 135 mmol/L" was attributed to the sodium row.
    passages = rows(RANGES)
    numbering = CitationNumbering()
    rewriter = CitationRewriter(passages, numbering)
    attributor = Attributor(
        passages, numbering, VectorCache(embedder), question="What is the normal range for potassium?"
    )
    reply = "The normal range for potassium is 135 mmol/L."

    shown = attributor.feed(rewriter.feed(reply)) + attributor.feed(rewriter.finish()) + attributor.finish()

    assert shown == reply
    assert not attributor.attributions


def test_a_reference_ranges_limits_are_a_range_in_the_rows_unit() -> None:
    potassium = RANGES[0]

    assert disagreement("The normal range for potassium is 135 mmol/L.", potassium)
    assert disagreement("A potassium of 4.2 mmol/L is within the normal range.", potassium) is None
    assert disagreement("The upper limit for potassium is 5.1 mmol/L.", potassium) is None
    assert disagreement("The upper limit for potassium is 6.1 mmol/L.", potassium)


def test_the_first_cells_of_a_passage_of_rows_say_which_rows_it_holds() -> None:
    markdown = (
        "## Error codes\n\n| Code | Meaning |\n|---|---|\n| E4021 | Overheating |\n| E5100 | Undervoltage |"
    )
    assert row_keys(make_hit(1, markdown)) == ("E4021", "E5100")
    assert row_keys(replace(make_hit(1, DOSING[0]), content_type="text/csv")) == ("Sitagliptin",)
    # Prose beside the table, or rows numbered rather than named: not judged by rows.
    assert row_keys(make_hit(1, markdown + "\n\nReplace the fan when E4022 is logged.")) is None
    assert row_keys(make_hit(1, "| # | Step |\n|---|---|\n| 1 | Open the valve |")) is None
    assert row_keys(make_hit(1, "Prime the pump before first use.")) is None


def test_an_extractive_answer_to_a_question_naming_a_row_quotes_that_row(embedder: Embedder) -> None:
    # A trial: the sitagliptin question was answered with its row, then the empagliflozin row's
    # "eGFR < 30: halve the dose", contradicting it.
    passages = rows(DOSING)

    extract = extractive_answer(
        "What is the renal adjustment for sitagliptin when eGFR < 30?",
        passages,
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert extract.text.startswith("drug: Sitagliptin;")
    assert "Empagliflozin" not in extract.text and "Paracetamol" not in extract.text


def test_a_question_about_a_row_no_table_holds_finds_no_evidence() -> None:
    hits = [p.hit for p in rows(DOSING)]

    # Tacrolimus is no row: the other rows' "adult dose" is no answer (the model gave paracetamol's).
    assert not answerable("What is the adult dose of tacrolimus?", hits, min_similarity=0.25)
    assert answerable("What is the adult dose of paracetamol?", hits, min_similarity=0.25)
    # Asking for what the rows hold names no row, and is answered from them.
    assert answerable("Which drug has a renal adjustment of halve the dose?", hits, min_similarity=0.25)


def test_a_lookup_of_a_code_no_passage_writes_finds_no_evidence() -> None:
    # A trial: "What does E11.65 mean?" in a scope without the code list was answered from a Federal
    # Register page that never writes it.
    codes = [
        replace(
            make_hit(1, "code: E11.65; description: Type 2 diabetes mellitus with hyperglycemia"),
            content_type="text/csv",
        )
    ]
    prose = [
        make_hit(
            2, "Performing an AOA sensor system test identified as RC in the Accomplishment Instructions."
        )
    ]

    assert not answerable("What does E11.65 mean?", prose, min_similarity=0.25)
    assert answerable("What does E11.65 mean?", codes, min_similarity=0.25)
    # Written without its dot, it is the same code.
    assert answerable("What does E1165 mean?", codes, min_similarity=0.25)


# Cells holding "; " and ": ", as a notes column and a first cell naming a product and its form do.
METFORMIN = (
    "drug,adult dose,notes\n"
    '"Metformin; immediate release",500 mg twice daily,"take with food; avoid alcohol"\n'
    '"Metformin; extended release",1000 mg once daily,ratio: 1:2 with the evening meal\n'
    "Sitagliptin,100 mg once daily,none\n"
)


def test_a_first_cell_holding_a_semicolon_is_read_whole_by_the_column_names() -> None:
    line = (
        "drug: Metformin; extended release; adult dose: 1000 mg once daily; "
        "notes: ratio: 1:2 with the evening meal"
    )
    hit = replace(make_hit(1, line), content_type="text/csv")

    # A chunk stored before citeline kept the column names reads as it always has: up to the first "; ".
    assert row_keys(hit) == ("Metformin",)
    assert row_keys(replace(hit, columns=("drug", "adult dose", "notes"))) == ("Metformin; extended release",)
    # Names that do not account for the line (a table edited since?) read it as before too.
    assert row_keys(replace(hit, columns=("product", "dose"))) == ("Metformin",)


def test_an_ingested_table_with_semicolons_in_its_cells_is_answered_from_the_row_asked_about(
    cl: Citeline, embedder: Embedder, tmp_path: Path
) -> None:
    # Read up to the first "; ", both metformin rows were "Metformin": asked whether the extended-release
    # form is taken with food, the answer quoted the immediate-release row ("take with food; avoid
    # alcohol"), and a sentence giving the immediate-release dose for the extended-release form was
    # backed by the immediate-release row.
    cl.ingest([write(tmp_path / "doses.csv", METFORMIN)])
    question = "What is the adult dose of extended release metformin?"
    hits = cl.search(SearchRequest(question, top_k=3))
    assert {hit.columns for hit in hits} == {("drug", "adult dose", "notes")}
    assert sorted(key for hit in hits for key in row_keys(hit) or ()) == [
        "Metformin; extended release",
        "Metformin; immediate release",
        "Sitagliptin",
    ]
    passages = select_passages(hits)
    extended = next(n for n, p in enumerate(passages, start=1) if "extended" in p.hit.text)
    immediate = next(n for n, p in enumerate(passages, start=1) if "immediate" in p.hit.text)

    extract = extractive_answer(
        "Should extended release metformin be taken with food?",
        passages,
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert extract.text.startswith("drug: Metformin; extended release;")
    assert "immediate release" not in extract.text and "take with food" not in extract.text
    assert backed(
        f"The adult dose of extended release metformin is 1000 mg once daily [{extended}].",
        question,
        passages,
        embedder,
    )
    assert not backed(
        f"The adult dose of extended release metformin is 500 mg twice daily [{immediate}].",
        question,
        passages,
        embedder,
    )
    # A store built before citeline kept the column names: its rows read as they always have.
    with cl.engine.begin() as conn:
        conn.execute(sa.text("UPDATE documents SET source_metadata = source_metadata - 'column_names'"))
    [old] = cl.search(SearchRequest("extended release metformin", top_k=1))
    assert "extended release" in old.text
    assert old.columns is None and row_keys(old) == ("Metformin",)
    # Re-ingested, it keeps them.
    cl.start_jobs()
    cl.reingest(old.document_id)
    assert cl.wait(old.document_id, timeout=60).version == 2
    [new] = cl.search(SearchRequest("metformin extended release", top_k=1))
    assert new.version == 2 and row_keys(new) == ("Metformin; extended release",)
