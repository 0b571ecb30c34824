"""Verdicts on claims that state numbers: a source stating another figure never gets a "Yes".

Real documents in a real store, found by real search and judged by the packaged classifier, which on
its own found "The max pressure of the HX-4000 is 10 bar." supported by a table whose row says 16 bar.
"""

from __future__ import annotations

from pathlib import Path

from citeline.answer import Complete
from citeline.answer.nli import default_judge
from citeline.answer.prompt import select_passages
from citeline.answer.stance import assess, claim_of
from citeline.answer.support import VectorCache
from citeline.engine import Citeline
from tests.conftest import write

from .conftest import extractive_answer_to
from .test_quantities import DEVICE_TABLE

MANUAL = """# HX-4000 booster pump

## History

The HX-4000 was introduced in 2019 to replace the HX-3000 [12]. Its housing is described in Figure 3
on page 14.

## Electrical connection

The HX-4000 motor is rated 230 V, 50 Hz, 750 W. Connect it to an outlet protected by a residual
current device of 30 mA.
"""


def ask(cl: Citeline, question: str) -> Complete:
    return extractive_answer_to(cl, question, persona="repair")


def test_a_device_table_stating_another_pressure_does_not_support_the_claim_and_the_answer_says_so(
    cl: Citeline, tmp_path: Path
) -> None:
    write(tmp_path / "devices.md", DEVICE_TABLE)
    cl.ingest([tmp_path])

    done = ask(cl, "The max pressure of the HX-4000 is 10 bar.")

    assert done.verdict == "not_enough_evidence", done.answer
    assert done.answer.startswith(
        "The sources neither clearly support nor contradict this claim: it states 10 bar, where the source "
        "states 16 bar [1]."
    ), done.answer
    # The table is cited for its numbers, with no stance that would make the verdict a "Yes".
    [table] = [c for c in done.citations if c.number == 1]
    assert table.document_name == "devices.md" and table.stance == "neutral"
    assert done.unsupported == ()


def test_the_same_table_still_supports_the_claim_whose_number_it_states(cl: Citeline, tmp_path: Path) -> None:
    write(tmp_path / "devices.md", DEVICE_TABLE)
    cl.ingest([tmp_path])

    done = ask(cl, "The max pressure of the HX-4000 is 16 bar.")

    assert done.verdict == "supports", done.answer
    assert done.answer.startswith("Yes: the sources support this claim [1]."), done.answer


def test_years_references_figures_codes_and_other_units_leave_the_verdict_to_the_classifier(
    cl: Citeline, tmp_path: Path
) -> None:
    write(tmp_path / "manual.md", MANUAL)
    cl.ingest([tmp_path])
    judge = default_judge()

    for question in (
        "The HX-4000 was introduced in 2021.",  # a year; the passage's [12], Figure 3 and page 14
        "The HX-4000 replaced the HX-2000.",  # model codes
        "The max pressure of the HX-4000 is 10 bar.",  # the passage states watts and volts, not bar
        "The HX-4000 motor is rated 750 W.",  # the number it states
    ):
        claim = claim_of(question)
        assert claim is not None
        passages = select_passages(cl.search(question)[: cl.settings.answer_passages])
        cache = VectorCache(cl.embedder)

        checked = assess(claim, passages, judge, cache)
        unchecked = assess(claim, passages, judge, cache, compare_quantities=False)

        assert checked.disagreements == {}, (question, checked.disagreements)
        assert checked.verdict == unchecked.verdict, question


FLOOR = """# Answers

## The answer floor

The answer floor, CITELINE_ANSWER_MIN_SIMILARITY, is 0.25 by default. Below it, citeline says the
documents hold no evidence and calls no model.
"""


def test_markup_in_a_question_states_no_figure_and_hides_no_claim(cl: Citeline, tmp_path: Path) -> None:
    write(tmp_path / "answers.md", FLOOR)
    cl.ingest([tmp_path])
    markup = '<img src=x onerror="window.pwned=9">'

    for question in (
        f"Is the answer floor 0.25 by default? {markup}",
        f"{markup} Is the answer floor 0.25 by default?",
        f"Is it true that the answer floor is 0.25 by default {markup}?",
    ):
        done = ask(cl, question)

        # The tag's "9" was read as a figure the claim states, the source states 0.25 and never 9: "it
        # states 9, where the source states 0.25". With the tag first, the question put no claim at all.
        assert done.claim is not None and "<img" not in done.claim and "9" not in done.claim, done.claim
        assert done.verdict == "supports", done.answer
