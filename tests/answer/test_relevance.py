"""Evidence that cannot answer a question is refused before any model reads it."""

from __future__ import annotations

from dataclasses import replace

from citeline.answer.relevance import answerable

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
