"""Prompt assembly: numbered evidence blocks, personas, and the evidence budget."""

from __future__ import annotations

import pytest

from citeline.answer.llm import LLM
from citeline.answer.prompt import PERSONAS, approx_tokens, build_prompt, select_passages
from citeline.errors import InvalidRequestError

from .conftest import PUMP_PAGES, ScriptedLLM, make_hit, pump_hits


def test_the_scripted_model_implements_the_llm_protocol() -> None:
    assert isinstance(ScriptedLLM("x"), LLM)


def test_evidence_is_numbered_blocks_with_title_and_page_then_the_question() -> None:
    prompt = build_prompt("How do I prime the pump?", pump_hits(), persona="general")

    system, user = prompt.messages
    assert system.role == "system" and user.role == "user"
    assert user.content.startswith(
        f"Sources:\n\n[1] Pump manual (p. 1)\n{PUMP_PAGES[0]}\n\n[2] Pump manual (p. 2)\n"
    )
    assert user.content.endswith("\n\nQuestion: How do I prime the pump?")
    assert [(p.number, p.chunk_id) for p in prompt.passages] == [(1, 101), (2, 102), (3, 103), (4, 104)]
    assert prompt.passage(3) is not None and prompt.passage(3).chunk_id == 103  # type: ignore[union-attr]
    assert prompt.passage(0) is None and prompt.passage(5) is None


def test_the_document_name_stands_in_for_a_missing_title() -> None:
    hit = make_hit(1, "Some text about pumps.")
    untitled = hit.__class__(**{**hit.__dict__, "title": None})

    prompt = build_prompt("pumps?", [untitled], persona="general")

    assert "[1] pump-manual.pdf (p. 1)\n" in prompt.messages[1].content


def test_a_chunk_retrieved_twice_is_given_once() -> None:
    hits = pump_hits()

    prompt = build_prompt("q", [hits[0], hits[1], hits[0]], persona="general")

    assert [p.chunk_id for p in prompt.passages] == [101, 102]


@pytest.mark.parametrize("persona", sorted(PERSONAS))
def test_every_persona_tells_the_model_to_cite_only_given_numbers_and_admit_gaps(persona: str) -> None:
    system = build_prompt("q", pump_hits(), persona=persona).messages[0].content

    assert "[1]" in system
    assert "use only the numbers shown" in system
    assert "do not answer the question, say so plainly" in system
    # Prompt tokens cost time-to-first-token on a small CPU model: the instructions stay short.
    assert approx_tokens(system) < 110


def test_personas_differ_where_their_readers_differ() -> None:
    assert "advice" in PERSONAS["clinical"]
    assert "numbered steps" in PERSONAS["repair"] and "safety warning" in PERSONAS["repair"]
    assert "advice" not in PERSONAS["general"]


def test_an_unknown_persona_is_refused_with_the_known_ones() -> None:
    with pytest.raises(
        InvalidRequestError, match=r"unknown persona 'lawyer'; known personas: general, clinical, repair"
    ):
        build_prompt("q", pump_hits(), persona="lawyer")


def test_an_empty_question_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="question is empty"):
        build_prompt("  ", pump_hits(), persona="general")


def test_the_budget_keeps_the_best_passages_and_truncates_the_last_one_at_a_word() -> None:
    frost, dry, prime = pump_hits()[2], pump_hits()[1], pump_hits()[0]
    two_blocks = f"[1] Pump manual (p. 3)\n{frost.text}\n\n[2] Pump manual (p. 2)\n{dry.text}\n\n"
    budget = approx_tokens(two_blocks) + 40

    passages = select_passages([frost, dry, prime, pump_hits()[3]], max_evidence_tokens=budget)

    assert [p.chunk_id for p in passages] == [103, 102, 101]
    assert [p.truncated for p in passages] == [False, False, True]
    last = passages[-1]
    assert last.text.endswith("\u2026")
    kept = last.text.removesuffix("\u2026")
    assert prime.text.startswith(kept) and prime.text[len(kept)] == " "
    # The span shrinks with the text, so a citation of it points at what the model read.
    assert (last.start, last.end) == (prime.start, prime.start + len(kept))
    assert sum(len(p.block) + 2 for p in passages) <= budget * 4


def test_a_budget_too_small_for_a_useful_fragment_drops_the_rest() -> None:
    hits = pump_hits()
    first = approx_tokens(f"[1] Pump manual (p. 1)\n{PUMP_PAGES[0]}\n\n")

    passages = select_passages(hits, max_evidence_tokens=first + 10)

    assert [p.chunk_id for p in passages] == [101]
    assert not passages[0].truncated


def test_the_best_passage_is_always_given_even_when_it_alone_exceeds_the_budget() -> None:
    passages = select_passages(pump_hits(), max_evidence_tokens=32)

    assert [p.chunk_id for p in passages] == [101]
    assert passages[0].truncated
    assert approx_tokens(passages[0].block) <= 32


def test_a_budget_below_the_minimum_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="max_evidence_tokens must be at least 32, got 5"):
        select_passages(pump_hits(), max_evidence_tokens=5)


def test_no_evidence_gives_no_passages() -> None:
    assert build_prompt("q", [], persona="general").passages == ()
