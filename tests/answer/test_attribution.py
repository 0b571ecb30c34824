"""Post-hoc attribution: citeline cites the model's uncited sentences that a given passage backs."""

from __future__ import annotations

import asyncio

import pytest

from citeline.answer import CitationNumbering, Complete, Event, Token, answer_stream
from citeline.answer.attribution import Attributor
from citeline.answer.citations import CitationRewriter
from citeline.answer.llm import GenerationOptions
from citeline.answer.prompt import REFUSAL, select_passages
from citeline.answer.support import SUPPORT_THRESHOLD, VectorCache
from citeline.embed import Embedder

from .conftest import ScriptedLLM, make_hit, pump_hits

PRIME, DRY, FROST, MOTOR = 101, 102, 103, 104
OPTIONS = GenerationOptions(timeout=30.0)


def ask(reply: str, embedder: Embedder, numbering: CitationNumbering | None = None) -> tuple[str, Complete]:
    """The streamed text and the Complete event of ``reply`` played by a scripted model."""

    async def collect() -> list[Event]:
        return [
            event
            async for event in answer_stream(
                "How do I prime the pump, and what must I never do?",
                pump_hits(),
                llm=ScriptedLLM(reply),
                embedder=embedder,
                numbering=CitationNumbering() if numbering is None else numbering,
                persona="general",
                options=OPTIONS,
            )
        ]

    events = asyncio.run(collect())
    done = events[-1]
    assert isinstance(done, Complete), done
    return "".join(e.text for e in events if isinstance(e, Token)), done


def attribute(reply: str, embedder: Embedder, *, piece: int = 3) -> tuple[str, Attributor]:
    """``reply`` rewritten and attributed as it streams, ``piece`` characters at a time."""
    passages = select_passages(pump_hits())
    numbering = CitationNumbering()
    rewriter = CitationRewriter(passages, numbering)
    attributor = Attributor(passages, numbering, VectorCache(embedder))
    out = [attributor.feed(rewriter.feed(reply[i : i + piece])) for i in range(0, len(reply), piece)]
    return "".join(out) + attributor.feed(rewriter.finish()) + attributor.finish(), attributor


def test_an_uncited_sentence_gets_the_citation_of_the_passage_that_backs_it(embedder: Embedder) -> None:
    shown, done = ask(
        "Fill the casing with clean water until it overflows [1]. Running without water destroys the "
        "mechanical seal.",
        embedder,
    )

    assert (
        shown
        == done.answer
        == (
            "Fill the casing with clean water until it overflows [1]. Running without water destroys the "
            "mechanical seal [2]."
        )
    )
    assert not done.fell_back and done.provider == "scripted:test"
    prime, dry = done.citations
    assert (prime.chunk_id, prime.attributed) == (PRIME, False)
    assert (dry.chunk_id, dry.attributed, dry.supported) == (DRY, True, True)
    assert dry.score >= SUPPORT_THRESHOLD
    assert dry.as_dict()["attributed"] is True
    assert done.uncited == () and done.unsupported == ()


def test_a_reply_the_model_left_wholly_uncited_is_kept_when_the_passages_back_it(embedder: Embedder) -> None:
    shown, done = ask(
        "Open the vent plug and fill the casing with clean water. Never run the pump dry.", embedder
    )

    assert not done.fell_back
    assert shown == done.answer
    assert [(c.chunk_id, c.attributed) for c in done.citations] == [(PRIME, True), (DRY, True)]
    assert done.answer.endswith("Never run the pump dry [2].")


def test_a_sentence_no_passage_backs_stays_uncited_and_is_reported(embedder: Embedder) -> None:
    _, done = ask(
        "Fill the casing with clean water until it overflows [1]. The seal costs forty euros to replace.",
        embedder,
    )

    assert not done.fell_back
    assert done.answer.endswith("The seal costs forty euros to replace.")
    assert done.uncited == ("The seal costs forty euros to replace.",)
    assert [c.chunk_id for c in done.citations] == [PRIME]


def test_only_a_reply_that_still_cites_nothing_falls_back_to_the_extractive_answer(
    embedder: Embedder,
) -> None:
    shown, done = ask("Aspirin lowers the risk of a second heart attack.", embedder)

    assert done.fell_back and done.provider == "extractive"
    assert done.fallback_reason == (
        "the model's reply cited no given passage, and no passage backs its sentences"
    )
    assert done.stream_replaced and shown == "Aspirin lowers the risk of a second heart attack."
    assert done.citations and not any(c.attributed for c in done.citations)


def test_the_refusal_is_never_shown_nor_attributed_and_the_passages_answer_instead(
    embedder: Embedder,
) -> None:
    shown, done = ask(REFUSAL, embedder)

    assert done.fell_back and done.fallback_reason == "the model found no answer in the passages"
    assert not done.stream_replaced
    assert shown == done.answer and REFUSAL not in shown
    assert done.citations


@pytest.mark.parametrize(
    "reply",
    [
        # What the packaged 0.5B model wrote, asked how to answer without a language model: the refusal
        # bent around the subject, citing a passage that shares its words.
        "The pump does not answer the question. [2]",
        # The refusal in other words.
        "The passages do not say how long priming takes. [1]",
        "The sources provided do not mention the priming time. [1]",
        "Priming time is not mentioned in the passages. [1]",
        "There is no information on how long priming takes. [1]",
    ],
)
def test_a_refusal_in_other_words_falls_back_like_the_refusal_and_is_never_shown(
    embedder: Embedder, reply: str
) -> None:
    shown, done = ask(reply, embedder)

    assert done.fell_back and done.fallback_reason == "the model found no answer in the passages"
    # Held back while it could still be a refusal: the stream shows only the answer that stands.
    assert not done.stream_replaced and shown == done.answer
    assert reply.split(" [")[0] not in shown and done.citations


def test_an_answer_opening_with_a_negation_is_shown_once_its_sentence_is_not_a_refusal(
    embedder: Embedder,
) -> None:
    shown, done = ask(
        "Never run the pump dry. Fill the casing with clean water until it overflows.", embedder
    )

    assert not done.fell_back and shown == done.answer
    assert done.answer.startswith("Never run the pump dry [")


def test_an_answer_with_one_sentence_on_what_the_sources_leave_open_stands(embedder: Embedder) -> None:
    _, done = ask(
        "Fill the casing with clean water until it overflows [1]. The manual does not answer how long "
        "it takes.",
        embedder,
    )

    assert not done.fell_back
    assert done.answer.startswith("Fill the casing with clean water until it overflows [1].")


def test_a_passage_the_model_cites_itself_is_not_marked_attributed(embedder: Embedder) -> None:
    _, done = ask("Never run the pump dry [2]. Running without water destroys the mechanical seal.", embedder)

    assert done.answer.endswith("destroys the mechanical seal [1].")
    [dry] = done.citations
    assert (dry.chunk_id, dry.attributed) == (DRY, False)


def test_attributed_numbers_continue_the_conversation(embedder: Embedder) -> None:
    numbering = CitationNumbering([MOTOR, FROST])

    _, done = ask("Never run the pump dry.", embedder, numbering)

    assert done.answer == "Never run the pump dry [3]."
    assert numbering.chunk_ids == [MOTOR, FROST, DRY]
    assert [(c.number, c.chunk_id, c.attributed) for c in done.citations] == [(3, DRY, True)]


def test_a_citation_after_the_full_stop_is_the_model_s_own(embedder: Embedder) -> None:
    for piece in (1, 2, 5, 100):
        text, attributor = attribute(
            "Running without water destroys the seal. [2] Drain the volute before winter. [3]",
            embedder,
            piece=piece,
        )

        assert text == "Running without water destroys the seal. [1] Drain the volute before winter. [2]", (
            piece
        )
        assert attributor.attributions == []


def test_only_the_closing_punctuation_waits_for_the_next_piece(embedder: Embedder) -> None:
    passages = select_passages(pump_hits())
    attributor = Attributor(passages, CitationNumbering(), VectorCache(embedder))

    assert attributor.feed("Never run the pump dry") == "Never run the pump dry"
    assert attributor.feed(".") == ""
    assert attributor.feed(" ") == ""
    assert attributor.feed("Then") == " [1]. Then"
    assert attributor.feed(" drain the volute 2.5 times") == " drain the volute 2.5 times"
    # The reply ends: so does its last sentence.
    assert attributor.finish() == " [2]"
    assert [a.chunk_id for a in attributor.attributions] == [DRY, FROST]


def test_list_items_and_a_last_sentence_without_a_full_stop_are_attributed(embedder: Embedder) -> None:
    text, attributor = attribute(
        "- Open the vent plug on top of the volute\n- Fill the casing with clean water until it overflows",
        embedder,
    )

    assert text == (
        "- Open the vent plug on top of the volute [1]\n"
        "- Fill the casing with clean water until it overflows [1]"
    )
    assert [a.chunk_id for a in attributor.attributions] == [PRIME, PRIME]


def test_abbreviations_decimals_and_connectives_are_not_sentences_to_cite(embedder: Embedder) -> None:
    # (0.75 kW: the passage's 750 W. At 2.5 kW it states the power otherwise and backs nothing.)
    text, attributor = attribute("The motor takes e.g. 230 V at 0.75 kW. In short:", embedder)

    assert text == "The motor takes e.g. 230 V at 0.75 kW [1]. In short:"
    assert [(a.sentence, a.chunk_id) for a in attributor.attributions] == [
        ("The motor takes e.g. 230 V at 0.75 kW.", MOTOR)
    ]


def test_a_sentence_cited_after_its_full_stop_to_a_passage_that_does_not_back_it_cites_the_one_that_does(
    embedder: Embedder,
) -> None:
    # The 0.5B model copies a sentence from one passage and, now and then, cites another; its grammar puts
    # the citation after the full stop, where it waits with the punctuation, so it is replaced unseen.
    # The answer cited "[1] [2]" with [1] flagged "not backed by this passage", the demo's first answer.
    shown, done = ask("In winter, drain the volute so that frost cannot crack the casing. [4]", embedder)

    assert shown == done.answer == "In winter, drain the volute so that frost cannot crack the casing. [1]"
    [frost] = done.citations
    assert (frost.number, frost.chunk_id, frost.attributed, frost.supported) == (1, FROST, True, True)
    assert done.unsupported == ()
    [removed] = done.removed
    assert (removed.number, removed.occurrences) == (4, 1)
    assert "does not back" in removed.reason


def test_the_replacement_is_the_same_however_the_reply_is_cut_into_pieces(embedder: Embedder) -> None:
    for piece in (1, 2, 5, 100):
        text, attributor = attribute(
            "Never run the pump dry. [2] In winter, drain the volute so that frost cannot crack the "
            "casing. [4] Fill the casing with clean water. [1]",
            embedder,
            piece=piece,
        )

        assert text == (
            "Never run the pump dry. [1] In winter, drain the volute so that frost cannot crack the "
            "casing. [2] Fill the casing with clean water. [3]"
        ), piece
        assert [(a.chunk_id, a.number, a.unbacked) for a in attributor.attributions] == [(FROST, 2, (2,))]
        assert [(r.number, r.occurrences) for r in attributor.removed] == [(4, 1)]


def test_a_citation_shown_before_the_full_stop_stays_and_is_flagged_beside_the_one_that_backs(
    embedder: Embedder,
) -> None:
    shown, done = ask("In winter, drain the volute so that frost cannot crack the casing [4].", embedder)

    assert (
        shown == done.answer == "In winter, drain the volute so that frost cannot crack the casing [1] [2]."
    )
    motor, frost = done.citations
    assert (motor.chunk_id, motor.attributed, motor.supported) == (MOTOR, False, False)
    assert (frost.chunk_id, frost.attributed, frost.supported) == (FROST, True, True)
    # The sentence is backed by one of its citations; the model's own is flagged on its own.
    assert done.unsupported == () and done.removed == ()


def test_a_replaced_number_shown_elsewhere_or_given_by_an_earlier_turn_is_not_given_again(
    embedder: Embedder,
) -> None:
    # [1] (the dry-running passage) backs the first sentence and is shown there: the second sentence's
    # unbacked [1] is dropped, and the frost passage gets the next number.
    text, _ = attribute(
        "Never run the pump dry. [2] In winter, drain the volute so that frost cannot crack the casing. [2]",
        embedder,
    )
    assert text == (
        "Never run the pump dry. [1] In winter, drain the volute so that frost cannot crack the casing. [2]"
    )
    # A number from an earlier turn stays that passage's.
    numbering = CitationNumbering([MOTOR])
    _, done = ask(
        "In winter, drain the volute so that frost cannot crack the casing. [4]", embedder, numbering
    )
    assert done.answer.endswith("casing. [2]")
    assert numbering.chunk_ids == [MOTOR, FROST]


def test_a_sentence_its_own_citation_backs_gets_no_other(embedder: Embedder) -> None:
    text, attributor = attribute(
        "In winter, drain the volute so that frost cannot crack the casing. [3]", embedder
    )

    assert text == "In winter, drain the volute so that frost cannot crack the casing. [1]"
    assert attributor.attributions == []


def test_a_sentence_cited_to_a_passage_stating_its_figure_otherwise_cites_the_one_stating_it(
    embedder: Embedder,
) -> None:
    # On SciFact the model copied "... 7424 nucleotides ..." from the passage on one virus and cited the
    # passage on another (7489 bp): close in words, it was kept, then the citation check found the figure
    # stated otherwise and the whole reply fell back. It now cites the passage that states it.
    commelina = make_hit(
        1, "The complete genome of Commelina yellow mottle virus is 7489 bp, a badnavirus of three ORFs."
    )
    pagoda = make_hit(
        2,
        "The complete genome of pagoda yellow mosaic associated virus comprises 7424 nucleotides, a novel "
        "badnavirus.",
        start=100,
    )
    reply = "The complete genome of the virus comprises 7424 nucleotides. [1]"

    async def collect() -> list[Event]:
        return [
            event
            async for event in answer_stream(
                "How long is the genome of the badnavirus?",
                [commelina, pagoda],
                llm=ScriptedLLM(reply),
                embedder=embedder,
                numbering=CitationNumbering(),
                persona="general",
                options=OPTIONS,
            )
        ]

    done = asyncio.run(collect())[-1]

    assert isinstance(done, Complete) and not done.fell_back, done
    # Numbered as first cited: the number the model's [1] had is given back, and the passage that states
    # the figure takes it.
    assert done.answer == "The complete genome of the virus comprises 7424 nucleotides. [1]"
    assert [(c.number, c.chunk_id) for c in done.citations] == [(1, 2)] and done.unsupported == ()


def test_a_sentence_giving_a_name_another_passage_gives_is_not_cited_to_one_without_it(
    embedder: Embedder,
) -> None:
    # As the citation check judges (citations.verify): the name came from the other passage, so the
    # passage on running dry does not back it, however close in words.
    grundfos = make_hit(120, "The Grundfos CR 5 booster is rated 16 bar at 50 Hz.", page=5)
    attributor = Attributor(
        select_passages([*pump_hits(), grundfos]), CitationNumbering(), VectorCache(embedder)
    )
    text = attributor.feed("Never run the Grundfos pump dry. Never run the pump dry, it destroys the seal.")
    text += attributor.finish()

    assert text == "Never run the Grundfos pump dry. Never run the pump dry, it destroys the seal [1]."
    assert [a.sentence for a in attributor.attributions] == ["Never run the pump dry, it destroys the seal."]


def test_a_sentence_copied_from_one_passage_and_cited_to_another_cites_the_one_it_was_copied_from(
    embedder: Embedder,
) -> None:
    # As the citation check judges (citations.copied_elsewhere): however well the cited passage scores,
    # ten words in a row of another passage, which the cited one lacks, came from that one.
    ours = make_hit(
        121, "Before first use, prime the pump: open the vent plug and fill the casing with water."
    )
    theirs = make_hit(
        122,
        "Before first use, prime the pump by opening the vent plug and filling the casing with clean "
        "water until it overflows.",
        page=9,
    )
    numbering = CitationNumbering()
    passages = select_passages([ours, theirs])
    rewriter = CitationRewriter(passages, numbering)
    attributor = Attributor(passages, numbering, VectorCache(embedder))
    reply = (
        "Before first use, prime the pump by opening the vent plug and filling the casing with clean "
        "water [1]."
    )
    text = attributor.feed(rewriter.feed(reply)) + attributor.feed(rewriter.finish()) + attributor.finish()

    # The model's [1] was shown before the full stop: it stays, and the passage it came from joins it.
    assert text.endswith("clean water [1] [2].")
    assert [a.chunk_id for a in attributor.attributions] == [122]
