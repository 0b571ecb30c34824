"""Query-focused evidence: the model reads each passage's best sentences, within a token budget."""

from __future__ import annotations

from dataclasses import replace

import pytest

from citeline.answer.citations import CitationNumbering, rewrite_citations, verify
from citeline.answer.evidence import approx_evidence_tokens, focus_passages
from citeline.answer.prompt import (
    CHARS_PER_TOKEN,
    build_prompt,
    evidence_chars,
    evidence_text,
    select_passages,
)
from citeline.answer.support import VectorCache, normalise, sentence_spans
from citeline.embed import Embedder
from citeline.errors import InvalidRequestError
from citeline.retrieve.search import Hit
from citeline.split import split
from citeline.types import Page
from tests.conftest import REPO

from .conftest import PUMP_PAGES, make_hit, pump_hits

PRIMING = (
    "## Priming\n\nBefore first use, prime the pump. Open the vent plug on top of the volute and fill the "
    "casing with clean water until it overflows. The casing holds about two litres. Close the vent plug "
    "and start the motor.\n\n## Warranty\n\nThe CP-40 ships with a two-year warranty. Keep the "
    "packaging for transport."
)


#: The longest sentence of a chunk user_guide_hits takes: the guide changes with every release, and a chunk
#: with one long sentence (or a diagram read as one) is a budget's outlier, not its rule.
GUIDE_SENTENCE_CHARS = 160


def user_guide_hits(question_words: tuple[str, ...], count: int = 5) -> list[Hit]:
    """Whole 1,000-character chunks of the user guide (docs/), as a search would return them: the first
    of each page that names one of ``question_words`` and whose sentences are of everyday length."""
    hits: list[Hit] = []
    for path in sorted((REPO / "docs").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for draft in split([Page(1, text)], chunk_size=1000, chunk_overlap=150):
            longest = max(end - start for start, end in sentence_spans(draft.text))
            if (
                len(draft.text) > 800
                and longest <= GUIDE_SENTENCE_CHARS
                and any(w in draft.text.lower() for w in question_words)
            ):
                hit = make_hit(len(hits) + 1, draft.text, start=draft.start, title=path.stem)
                hits.append(replace(hit, document_name=path.name))
                break
        if len(hits) == count:
            break
    return hits


def test_each_passage_shows_the_sentence_that_answers_and_leaves_out_the_rest(embedder: Embedder) -> None:
    hit = make_hit(1, PRIMING, title="Pump manual")

    [passage] = focus_passages("How do I prime the pump?", [hit], VectorCache(embedder), max_tokens=40)

    assert passage.truncated
    assert "fill the casing with clean water until it overflows" in passage.shown_text
    assert "warranty" not in passage.shown_text and "packaging" not in passage.shown_text
    # The model reads the sentences; the citation still resolves to the whole chunk.
    assert (passage.start, passage.end, passage.text) == (hit.start, hit.end, hit.text)
    assert passage.shown is not None
    for start, end in passage.shown:
        assert normalise(hit.text[start:end]) in passage.shown_text


def test_sentences_are_shown_in_page_order_with_a_mark_where_some_were_left_out(embedder: Embedder) -> None:
    hit = make_hit(1, PRIMING, title="Pump manual")

    [passage] = focus_passages(
        "How do I prime the pump, and how do I start the motor?", [hit], VectorCache(embedder), max_tokens=60
    )

    assert passage.shown is not None and len(passage.shown) >= 2
    assert list(passage.shown) == sorted(passage.shown)
    fill, close = passage.shown_text.index("fill the casing"), passage.shown_text.index("Close the vent")
    assert fill < close
    between = passage.shown_text[fill:close]
    # "The casing holds about two litres." sits between them on the page and was left out.
    assert ("litres" in between) != ("\u2026" in between)


def test_every_passage_gets_its_best_sentence_before_any_gets_a_second(embedder: Embedder) -> None:
    priming = make_hit(
        1,
        "Prime the pump before first use. Priming the pump takes two minutes. Prime the pump again after "
        "draining it. Priming the pump needs clean water.",
    )
    motor = make_hit(2, "The motor of the pump is rated 230 V.", page=2)
    budget = int((len("[1] Pump manual\n") + len(priming.text)) / CHARS_PER_TOKEN)

    passages = focus_passages(
        "How do I prime the pump?", [priming, motor], VectorCache(embedder), max_tokens=budget
    )

    # By score alone the priming sentences would fill the budget; the motor page still gets its one.
    assert [(p.number, p.chunk_id) for p in passages] == [(1, 1), (2, 2)]
    assert passages[0].truncated and passages[1].shown_text == motor.text


def test_the_evidence_stays_within_the_budget_as_the_prompt_lays_it_out(embedder: Embedder) -> None:
    hits = user_guide_hits(("scope", "search", "ingest", "citation", "model"))
    assert len(hits) == 5

    for budget in (60, 150, 300):
        passages = focus_passages(
            "How do I keep documents of one care journey apart from another?",
            hits,
            VectorCache(embedder),
            max_tokens=budget,
        )

        assert passages
        assert evidence_chars(passages) <= budget * CHARS_PER_TOKEN
        assert approx_evidence_tokens(passages) <= budget
        assert evidence_text(passages) in build_prompt("q", passages, persona="general").messages[1].content


def test_five_whole_chunks_fit_in_a_few_hundred_tokens_with_every_passage_given(embedder: Embedder) -> None:
    hits = user_guide_hits(("scope", "search", "ingest", "citation", "model"))
    whole = evidence_chars(focus_passages("q", hits, VectorCache(embedder), max_tokens=None))

    passages = focus_passages(
        "Which embedding model does citeline use?", hits, VectorCache(embedder), max_tokens=200
    )

    # The five chunks whole are several times the budget (about 1,000 tokens of the user guide).
    assert whole / CHARS_PER_TOKEN > 4 * 200
    assert [p.chunk_id for p in passages] == [h.chunk_id for h in hits]
    assert evidence_chars(passages) <= 200 * CHARS_PER_TOKEN


def test_a_passage_whose_best_sentence_does_not_fit_is_left_out_and_the_numbers_close_up(
    embedder: Embedder,
) -> None:
    long_sentence = (
        "The warranty covers " + ", ".join(f"part {n} of the pump housing" for n in range(30)) + "."
    )
    hits = [
        make_hit(1, "Never run the pump dry. It destroys the seal.", page=1),
        make_hit(2, long_sentence, page=2),
        make_hit(3, "Drain the volute before winter so that frost cannot crack it.", page=3),
    ]

    passages = focus_passages("Never run the pump dry?", hits, VectorCache(embedder), max_tokens=50)

    # Whole sentences only: what the model reads as [2] is the third hit.
    assert [(p.number, p.chunk_id) for p in passages] == [(1, 1), (2, 3)]


def test_the_first_passage_is_always_given_cut_at_a_word_if_need_be(embedder: Embedder) -> None:
    text = "Before first use " + " ".join(["prime the pump with clean water"] * 20) + "."
    hit = make_hit(1, text)

    [passage] = focus_passages("How do I prime the pump?", [hit], VectorCache(embedder), max_tokens=40)

    assert evidence_chars([passage]) <= 40 * CHARS_PER_TOKEN
    assert passage.shown is not None
    [(start, end)] = passage.shown
    assert start == 0 and text[end] == " "
    assert passage.shown_text == text[:end] + "\u2026"


def test_the_title_and_sentences_repeated_by_overlapping_chunks_are_shown_once(embedder: Embedder) -> None:
    shared = "Close the vent plug and start the motor."
    first = make_hit(1, f"Priming the pump\n\nFill the casing with clean water until it overflows. {shared}")
    second = replace(
        make_hit(2, f"{shared} Priming takes about two minutes.", start=60), title="Priming the pump"
    )
    first = replace(first, title="Priming the pump")

    passages = focus_passages(
        "When do I start the motor after priming?", [first, second], VectorCache(embedder), max_tokens=40
    )

    text = evidence_text(passages)
    assert text.count("Close the vent plug") == 1
    assert text.count("Priming the pump") == len(passages)  # once per header, never as a sentence


def test_whole_passages_when_there_is_no_budget_or_they_fit(embedder: Embedder) -> None:
    hits = pump_hits()

    for budget in (None, 10_000):
        passages = focus_passages("How do I prime the pump?", hits, VectorCache(embedder), max_tokens=budget)

        assert [p.shown for p in passages] == [None] * 4
        assert [p.shown_text for p in passages] == PUMP_PAGES


def test_a_chunk_retrieved_twice_is_given_once(embedder: Embedder) -> None:
    hits = pump_hits()

    passages = focus_passages("q", [hits[0], hits[1], hits[0]], VectorCache(embedder), max_tokens=None)

    assert [p.chunk_id for p in passages] == [101, 102]


def test_the_sentences_are_embedded_once_for_the_citation_check_too(embedder: Embedder) -> None:
    calls: list[int] = []

    class Counting:
        model_id, dimension, max_tokens = embedder.model_id, embedder.dimension, embedder.max_tokens

        def embed(self, texts: list[str]) -> object:
            calls.append(len(texts))
            return embedder.embed(texts)

    cache = VectorCache(Counting())  # type: ignore[arg-type]
    passages = focus_passages("How do I prime the pump?", [make_hit(1, PRIMING)], cache, max_tokens=40)
    numbering = CitationNumbering()
    reply = rewrite_citations("Fill the casing with clean water. [1]", passages, numbering)
    embedded = len(calls)

    checked = verify(reply.text, {1: passages[0]}, cache)

    assert checked.citations[0].supported
    assert len(calls) == embedded + 1  # only the answer's sentence is new
    assert calls[-1] == 1


def test_a_budget_below_the_minimum_is_refused(embedder: Embedder) -> None:
    with pytest.raises(InvalidRequestError, match="max_evidence_tokens must be at least 32, got 5"):
        focus_passages("q", pump_hits(), VectorCache(embedder), max_tokens=5)


def test_a_list_number_cut_off_as_a_sentence_is_never_shown(embedder: Embedder) -> None:
    steps = (
        "To keep two care journeys apart:\n\n1. Ingest each journey's documents with one scope naming the "
        "journey.\n2.\nSearch with that scope.\n3.\nGive the clinician a reader key bound to the scope.\n\n"
        "Scopes are free text. A document may carry several. The admin page lists them all, with counts."
    )

    [passage] = focus_passages(
        "How do I keep care journeys apart?", [make_hit(1, steps)], VectorCache(embedder), max_tokens=50
    )

    assert passage.shown is not None  # focused, not whole
    assert "journey" in passage.shown_text
    assert not any(passage.text[s:e].strip() in {"2.", "3."} for s, e in passage.shown)


def test_evidence_exactly_at_the_budget_counts_as_the_budget() -> None:
    # 60 tokens allow 276 characters (60 x 4.6); in floating point 276 / 4.6 is just over 60.
    budget = 60
    text = "x" * (int(budget * CHARS_PER_TOKEN) - len("[1] Pump manual\n"))
    [passage] = select_passages([make_hit(1, text, title="Pump manual")])
    assert evidence_chars([passage]) == int(budget * CHARS_PER_TOKEN)

    assert approx_evidence_tokens([passage]) == budget
