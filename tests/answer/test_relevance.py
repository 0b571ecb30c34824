"""Evidence that cannot answer a question is refused before any model reads it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from citeline.answer.relevance import answerable
from citeline.answer.support import VectorCache
from citeline.embed import Embedder
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


NUT = (
    "An elastic stop nut has a nylon collar that grips the bolt thread. Do not use elastic stop nuts "
    "where the temperature exceeds 250 degrees F. An elastic stop nut may be reused only if the collar "
    "still resists turning by hand."
)


def test_a_follow_up_is_answerable_only_by_a_passage_holding_words_of_its_own() -> None:
    nut = replace(make_hit(1, NUT), similarity=0.61)
    valve = replace(make_hit(2, "The relief valve opens at 3,000 psi."), similarity=0.12)

    def asked(said: str) -> bool:
        return answerable(f"{said} (elastic stop nut)", [nut, valve], min_similarity=0.25, own_words=said)

    # Close to the search, and holding the user's own words.
    assert asked("Can they be reused?")
    assert asked("What temperature limit applies to them?")
    # Far from the search with its borrowed words, but one sentence holds the user's own words.
    assert asked("And the relief valve?")
    # No topic word of their own ("use" names none): the borrowed topic judges them.
    assert asked("How are they used?")
    assert asked("Why?")
    # Only the borrowed words match.
    assert not asked("What are the risks?")
    assert not asked("And what is the capital of France?")
    assert not asked("Who invented it?")
    assert not asked("What dose should be used?")
    # Without the user's words (a standalone question, or a model's rewrite), the search's words judge.
    assert answerable("What are the risks? (elastic stop nut)", [nut], min_similarity=0.25)
    assert answerable("What are the risks?", [nut], min_similarity=0.25, own_words="What are the risks?")
    # Said in other words than the passage's: only an embedder finds the sentence.
    assert not asked("Is it safe at high heat?")
    # A floor of zero still turns the check off.
    assert answerable(
        "Who invented it? (elastic stop nut)", [nut], min_similarity=0.0, own_words="Who invented it?"
    )


def test_a_follow_up_in_other_words_than_the_passage_s_is_answerable_by_meaning(embedder: Embedder) -> None:
    nut = replace(make_hit(1, NUT), similarity=0.61)
    cache = VectorCache(embedder)

    def asked(said: str) -> bool:
        return answerable(
            f"{said} (elastic stop nut)", [nut], min_similarity=0.25, own_words=said, cache=cache
        )

    assert asked("Is it safe at high heat?")
    assert not asked("What are the risks?")
    assert not asked("And what is the capital of France?")
    assert not asked("What dose should be used?")


def test_near_the_floor_a_passage_must_name_something_the_question_asks_about() -> None:
    nut = replace(make_hit(1, NUT), similarity=0.27)
    torque = replace(make_hit(2, "Tighten the nut to the torque given in the table."), similarity=0.27)

    assert not answerable("What torque should be used?", [nut], min_similarity=0.25)
    assert answerable("What torque should be used?", [torque], min_similarity=0.25)
    # Clearly close in meaning, it needs no word in common; but a measure ("torque") it must name or
    # state (see the measure test below).
    assert answerable("What spanner should be used?", [replace(nut, similarity=0.36)], min_similarity=0.25)
    assert not answerable("What torque should be used?", [replace(nut, similarity=0.36)], min_similarity=0.25)
    # A question naming no topic ("use" names none) is judged by meaning alone.
    assert answerable("How is it used?", [nut], min_similarity=0.25)


@pytest.mark.parametrize(
    ("question", "answered"),
    [
        # The passage is about the nuts and tightening, and never says torque: similar in meaning
        # (0.4) and holding "elastic stop nuts", it was quoted as the answer.
        ("What torque should be used on elastic stop nuts?", False),
        ("What is the maximum torque for an elastic stop nut?", False),
        ("What temperature limit applies to elastic stop nuts?", True),
    ],
)
def test_a_question_asking_a_measure_is_answered_only_where_the_evidence_names_or_states_it(
    question: str, answered: bool
) -> None:
    nut = replace(
        make_hit(
            1,
            "An elastic stop nut has a fibre collar that grips the bolt thread. Do not use elastic stop nuts "
            "where the temperature exceeds 250 degrees F. At least one full thread of the bolt must protrude "
            "through the nut after tightening.",
        ),
        similarity=0.45,
    )

    assert answerable(question, [nut], min_similarity=0.25) is answered


def test_a_measure_stated_in_its_units_answers_a_question_naming_it() -> None:
    tighten = make_hit(1, "Tighten each elastic stop nut to 25 in-lb; check the collar.")
    torque = replace(tighten, similarity=0.3)
    valve = replace(make_hit(2, "The relief valve opens at 3,000 psi."), similarity=0.3)

    assert answerable("What torque should be used on elastic stop nuts?", [torque], min_similarity=0.25)
    assert answerable("At what pressure does the relief valve open?", [valve], min_similarity=0.25)


def test_a_tables_rows_answer_a_measure_their_header_row_names() -> None:
    # The rows of a table's later chunk name no measure: their context (the header row) does.
    rows = replace(
        make_hit(1, "| M31 flange bolt | 155 | 8.8 |\n| M32 flange bolt | 160 | 8.8 |"),
        context="| Fastener | Tightening torque (N·m) | Grade |",
        similarity=0.35,
    )

    assert answerable("What tightening torque does the M31 flange bolt take?", [rows], min_similarity=0.25)
    assert not answerable(
        "What tightening torque does the M31 flange bolt take?",
        [replace(rows, context=None)],
        min_similarity=0.25,
    )


def test_a_question_naming_a_measure_of_what_it_asks_about_asks_for_no_value() -> None:
    # It asks for drugs, not for a pressure: "blood pressure" is what they act on.
    drugs = replace(
        make_hit(1, "ACE inhibitors such as ramipril reduce hypertension in diabetes."), similarity=0.5
    )

    assert answerable("What drugs lower blood pressure in diabetes?", [drugs], min_similarity=0.25)
    assert answerable("How does temperature affect the drugs' shelf life?", [drugs], min_similarity=0.25)


@pytest.mark.parametrize("said", ["Thanks!", "Thank you very much", "Great, thanks"])
def test_a_thank_you_asks_nothing_of_the_documents(said: str) -> None:
    # A corpus that says thanks (a paper's acknowledgements) answered "Thanks!" by quoting it.
    thanks = replace(
        make_hit(1, "Thanks to Jane Doe for the pump drawings and to the plant staff."), similarity=0.6
    )

    assert not answerable(said, [thanks], min_similarity=0.25)
    assert answerable("Who made the pump drawings?", [thanks], min_similarity=0.25)


def test_a_claim_naming_a_measure_asks_for_no_value() -> None:
    # SciFact claims whose abstracts never name the measure: they are judged, not refused.
    lumen = make_hit(1, "Arterioles and venules differ in the size of their lumen.")
    vessels = replace(lumen, similarity=0.5)

    assert answerable("Arterioles have a larger lumen diameter than venules.", [vessels], min_similarity=0.25)
    assert not answerable("What is the lumen diameter of arterioles?", [vessels], min_similarity=0.25)
