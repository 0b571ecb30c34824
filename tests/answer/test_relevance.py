"""Evidence that cannot answer a question is refused before any model reads it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from citeline.answer.relevance import answerable
from citeline.engine import Citeline
from tests.conftest import write

from .conftest import make_hit


def test_a_passage_close_in_meaning_may_answer() -> None:
    far = replace(make_hit(1, "The motor is rated 230 V."), similarity=0.12)
    close = replace(make_hit(2, "Prime the pump before first use."), similarity=0.41)

    assert answerable("How do I prime the pump?", [far, close], min_similarity=0.25)
    assert not answerable("How do I prime the pump?", [far], min_similarity=0.25)


def test_a_passage_holding_half_the_questions_terms_may_answer_however_far_in_meaning() -> None:
    # Error codes and part numbers match by their words; their embeddings may be far apart.
    code = replace(make_hit(1, "E42: the thermal fuse tripped; let the motor cool."), similarity=0.1)

    assert answerable("What does E42 mean?", [code], min_similarity=0.25)
    assert not answerable("What does E17 mean?", [code], min_similarity=0.25)


def test_a_floor_of_zero_turns_the_check_off_but_no_evidence_is_still_none() -> None:
    far = replace(make_hit(1, "The motor is rated 230 V."), similarity=0.01)

    assert answerable("Who won the world cup?", [far], min_similarity=0.0)
    assert not answerable("Who won the world cup?", [], min_similarity=0.0)


def test_one_everyday_word_in_common_is_no_evidence_but_an_identifier_is() -> None:
    fuse = replace(
        make_hit(1, "E42: the thermal fuse tripped; let the motor cool for some time."), similarity=0.1
    )

    assert not answerable("What time is it?", [fuse], min_similarity=0.25)
    assert answerable("What does E42 mean?", [fuse], min_similarity=0.25)
    assert answerable("Why did the thermal fuse trip?", [fuse], min_similarity=0.25)
    # Two of the question's words, but not in one sentence: not what the passage says.
    apart = replace(make_hit(2, "Let the motor cool. The fuse is in the lid."), similarity=0.1)
    assert not answerable("Which motor has a thermal fuse?", [apart], min_similarity=0.25)


MANUAL = (
    "# HX-4000 pump manual\n\n"
    "Write the serial number in capital letters on the warranty card.\n\n"
    "Before first use, prime the pump: open the vent plug and fill the casing with clean water.\n\n"
    "The mechanical seal has a service life of 5,000 operating hours; replace it at that time.\n\n"
    "Error E42 means the thermal fuse tripped: let the motor cool for 30 minutes.\n\n"
    "Service the pump every 500 operating hours: grease the bearings and clean the strainer.\n"
)


@pytest.mark.parametrize(
    ("question", "answers"),
    [
        ("What is the capital of France?", False),
        ("What is the meaning of life?", False),
        ("What time is it?", False),
        ("Who wrote the letters of Paul?", False),
        ("How do I prime the pump?", True),
        ("What does E42 mean?", True),
        ("How long does the mechanical seal last?", True),
        ("How often should the pump be serviced?", True),
        ("What do I write on the warranty card?", True),
    ],
)
def test_a_question_off_the_manuals_topics_is_refused_and_one_on_them_is_answered(
    cl: Citeline, tmp_path: Path, question: str, answers: bool
) -> None:
    write(tmp_path / "manual.md", MANUAL)
    cl.ingest([tmp_path])

    assert (
        answerable(question, cl.search(question), min_similarity=cl.settings.answer_min_similarity) is answers
    )
