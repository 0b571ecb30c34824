"""Prompt assembly: numbered evidence blocks, personas with a worked example, the passages given."""

from __future__ import annotations

import dataclasses

import pytest

from citeline.answer.llm import LLM
from citeline.answer.prompt import (
    CLAIM_PERSONAS,
    PERSONAS,
    REFUSAL,
    Passage,
    approx_tokens,
    build_findings_prompt,
    build_prompt,
    select_passages,
)
from citeline.errors import InvalidRequestError

from .conftest import PUMP_PAGES, ScriptedLLM, make_hit, pump_hits


def test_the_scripted_model_implements_the_llm_protocol() -> None:
    assert isinstance(ScriptedLLM("x"), LLM)


def test_evidence_is_numbered_blocks_with_title_then_the_question() -> None:
    prompt = build_prompt("How do I prime the pump?", select_passages(pump_hits()), persona="general")

    system, user = prompt.messages
    assert system.role == "system" and user.role == "user"
    assert user.content.startswith(f"Sources:\n\n[1] Pump manual\n{PUMP_PAGES[0]}\n\n[2] Pump manual\n")
    assert user.content.endswith("\n\nQuestion: How do I prime the pump?")
    assert [(p.number, p.chunk_id) for p in prompt.passages] == [(1, 101), (2, 102), (3, 103), (4, 104)]
    assert prompt.passage(3) is not None and prompt.passage(3).chunk_id == 103  # type: ignore[union-attr]
    assert prompt.passage(0) is None and prompt.passage(5) is None


def test_a_focused_passage_shows_its_sentences_on_one_line_with_a_mark_for_each_gap() -> None:
    text = "Priming\n\nOpen the vent plug.\nFill the casing\nwith water. It weighs 12 kg. Start the motor."
    hit = make_hit(1, text)
    vent, fill, start = text.index("Open"), text.index("Fill"), text.index("Start")
    passage = Passage(number=1, hit=hit, shown=((vent, vent + 19), (fill, fill + 27), (start, len(text))))

    assert passage.truncated
    assert (
        passage.block
        == "[1] Pump manual\nOpen the vent plug. Fill the casing with water. \u2026 Start the motor."
    )
    # Whatever the model reads, a citation resolves to the whole chunk.
    assert (passage.text, passage.start, passage.end) == (text, hit.start, hit.end)


def test_the_document_name_stands_in_for_a_missing_title() -> None:
    hit = make_hit(1, "Some text about pumps.")
    untitled = hit.__class__(**{**hit.__dict__, "title": None})

    prompt = build_prompt("pumps?", select_passages([untitled]), persona="general")

    assert "[1] pump-manual.pdf\n" in prompt.messages[1].content


def test_a_chunk_retrieved_twice_is_given_once() -> None:
    hits = pump_hits()

    passages = select_passages([hits[0], hits[1], hits[0]])

    assert [p.chunk_id for p in passages] == [101, 102]
    assert [p.shown for p in passages] == [None, None]


@pytest.mark.parametrize("persona", sorted(PERSONAS))
def test_every_persona_asks_for_cited_sentences_and_the_refusal_and_shows_an_example(persona: str) -> None:
    system = build_prompt("q", select_passages(pump_hits()), persona=persona).messages[0].content

    assert "each followed by the number of its source, like [2]; use only the numbers shown" in system
    assert f"If the sources do not answer it, write: {REFUSAL}" in system
    # The example answer cites the way a local model's reply is held to: after the full stop.
    assert system.endswith("Answer: Running without water destroys the seal within seconds. [2]")
    # The system prompt is the cached prefix of every request: it must not depend on the question.
    assert system == build_prompt("another question", [], persona=persona).messages[0].content
    assert approx_tokens(system) < 200


def test_personas_differ_where_their_readers_differ() -> None:
    assert "advice" in PERSONAS["clinical"]
    assert "step by step" in PERSONAS["repair"] and "safety warning" in PERSONAS["repair"]
    assert "advice" not in PERSONAS["general"]


@pytest.mark.parametrize("persona", sorted(PERSONAS))
def test_a_findings_prompt_asks_what_the_passages_found_and_gives_no_way_to_decline(persona: str) -> None:
    dry = Passage(number=1, hit=pump_hits()[1])

    prompt = build_findings_prompt([dry], persona=persona)

    system, user = prompt.messages
    assert system.content == CLAIM_PERSONAS[persona]
    assert "each followed by the number of its source, like [1]" in system.content
    assert REFUSAL not in system.content and prompt.refusal == ""
    # The persona's guidance holds for claims too.
    assert ("advice" in system.content) == (persona == "clinical")
    assert user.content == f"Source:\n\n[1] Pump manual\n{dry.text}\n\nWhat did [1] find?"
    assert prompt.passages == (dry,)
    assert approx_tokens(system.content) < 200


def test_a_findings_prompt_over_several_passages_asks_what_the_sources_found_without_listing_numbers() -> (
    None
):
    # Asked "What did [1] and [2] find?", the 0.5B model answered "... [1] and 2. [1]" in 28 of 60
    # SciFact claims: it copied the question's "and [2]", which the citation grammar turns into a
    # sentence "and 2." of its own.
    dry, seal = (Passage(number=n, hit=hit) for n, hit in enumerate(pump_hits()[1:3], start=1))

    user = build_findings_prompt([dry, seal], persona="general").messages[1].content

    assert user.endswith("\n\nWhat did these sources find?")
    assert "[1] and [2]" not in user


def test_an_unknown_persona_is_refused_with_the_known_ones() -> None:
    with pytest.raises(
        InvalidRequestError, match=r"unknown persona 'lawyer'; known personas: general, clinical, repair"
    ):
        build_prompt("q", select_passages(pump_hits()), persona="lawyer")


def test_an_empty_question_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="question is empty"):
        build_prompt("  ", select_passages(pump_hits()), persona="general")


def test_no_evidence_gives_no_passages() -> None:
    assert build_prompt("q", [], persona="general").passages == ()


def test_a_long_title_is_cut_to_its_first_words_in_the_evidence() -> None:
    title = "Rare and common variants in multifactorial susceptibility to common diseases in humans"
    hit = make_hit(1, "Some text about variants.", title=title)

    [passage] = select_passages([hit])

    assert passage.title == "Rare and common variants in multifactorial susceptibility to \u2026"
    assert passage.block.startswith(
        "[1] Rare and common variants in multifactorial susceptibility to \u2026\n"
    )
    assert passage.hit.title == title  # citations keep the whole title


def test_the_rows_of_a_tables_later_chunk_are_shown_under_its_header_row() -> None:
    rows = "| M8 | 25 N·m |\n| M10 | 49 N·m |"
    hit = dataclasses.replace(make_hit(1, rows), context="| Bolt | Tightening torque |")

    [passage] = select_passages([hit])

    # The header names the cells for the model; a citation still resolves to the rows as stored.
    assert passage.block == f"[1] Pump manual\n| Bolt | Tightening torque |\n{rows}"
    assert passage.text == rows


def test_the_model_does_not_see_the_sources_own_reference_markers() -> None:
    text = "Filariasis fell after mass treatment (Box 1) [2]. Albendazole was given yearly [3-5]."
    whole = Passage(number=1, hit=make_hit(1, text))
    focused = Passage(number=1, hit=make_hit(1, text), shown=((text.index("Alb"), len(text)),))

    assert whole.shown_text == "Filariasis fell after mass treatment (Box 1). Albendazole was given yearly."
    assert focused.shown_text == "Albendazole was given yearly."
    assert focused.text == text  # the citation still resolves to the chunk as stored
