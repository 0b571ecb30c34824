"""Citations: parsed from the answer section only, checked against the passages given, numbered per chat."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from citeline.answer.citations import (
    CitationNumbering,
    CitationRewriter,
    Verification,
    claims,
    rewrite_citations,
    verify,
)
from citeline.answer.prompt import PERSONAS, Passage, select_passages
from citeline.answer.support import SUPPORT_THRESHOLD, VectorCache, normalise
from citeline.embed import Embedder

from .conftest import PUMP_PAGES, make_hit, pump_hits

# Chunk ids of the pump manual's pages, by page.
PRIME, DRY, FROST, MOTOR = 101, 102, 103, 104


def given_passages() -> list[Passage]:
    return select_passages(pump_hits())


def rewrite(reply: str, numbering: CitationNumbering | None = None) -> tuple[str, list[int], dict[int, int]]:
    """The rewritten text, the chunks cited, and the removed numbers with their counts."""
    out = rewrite_citations(reply, given_passages(), CitationNumbering() if numbering is None else numbering)
    return out.text, list(out.cited), {r.number: r.occurrences for r in out.removed}


# -- parsing and checking ------------------------------------------------------------------------


def test_a_number_beyond_the_passages_given_is_removed_and_reported() -> None:
    text, cited, removed = rewrite(
        "Prime the pump first [1]. Then wait ten minutes [7]. Never run it dry [2][7]."
    )

    assert text == "Prime the pump first [1]. Then wait ten minutes. Never run it dry [2]."
    assert cited == [PRIME, DRY]
    assert removed == {7: 2}


def test_the_report_says_which_number_and_how_many_passages_there_were() -> None:
    out = rewrite_citations("Wait [7].", given_passages(), CitationNumbering())

    [removed] = out.removed
    assert removed.reason == "passage [7] was not given to the model (it had 4)"
    assert out.text == "Wait."
    assert out.cited == ()


def test_zero_and_a_year_are_not_passages_either() -> None:
    text, cited, removed = rewrite("Rated 750 W [4][0]. Since [2019] at least.")

    assert text == "Rated 750 W [1]. Since at least."
    assert cited == [MOTOR]
    assert removed == {0: 1, 2019: 1}


def test_citations_in_a_references_section_after_the_answer_are_ignored() -> None:
    for section in (
        "## References",
        "References:",
        "Sources:",
        "**Sources**",
        "### Sources",
        "Sources: [3], [4]",
    ):
        reply = f"Prime the pump before use [1].\n\n{section}\n[1] Pump manual, p. 1\n[3] Pump manual, p. 3\n"

        text, cited, removed = rewrite(reply)

        assert text == "Prime the pump before use [1].", section
        assert cited == [PRIME], section
        assert removed == {}


def test_a_sentence_that_merely_starts_with_sources_is_answer_text() -> None:
    text, cited, _ = rewrite("Sources of frost damage include an undrained volute [3].")

    assert text == "Sources of frost damage include an undrained volute [1]."
    assert cited == [FROST]


def test_a_repeated_citation_is_given_once_where_it_repeats_but_kept_in_each_sentence() -> None:
    text, cited, _ = rewrite(
        "Prime it [1][1]. Fill the casing [1, 1] [1]. Never run dry [2]. Prime again [1]."
    )

    assert text == "Prime it [1]. Fill the casing [1]. Never run dry [2]. Prime again [1]."
    assert cited == [PRIME, DRY]


def test_lists_and_ranges_of_numbers_are_expanded() -> None:
    text, cited, removed = rewrite(
        "Prime and never run dry [1, 2]. All of it [1-3]. Also [2;4] and [4\u20133] and [1,5]."
    )

    assert text == "Prime and never run dry [1, 2]. All of it [1, 2, 3]. Also [2, 4] and [3, 4] and [1]."
    assert cited == [PRIME, DRY, FROST, MOTOR]
    assert removed == {5: 1}


def test_brackets_that_are_not_citations_are_left_alone() -> None:
    text, cited, _ = rewrite("See [the manual](https://example.org/x) and [note 2] or [a, b] [2].")

    assert text == "See [the manual](https://example.org/x) and [note 2] or [a, b] [1]."
    assert cited == [DRY]


def test_structural_headings_and_labels_are_stripped() -> None:
    reply = (
        "## Answer\n\n**Answer:** Prime the pump [1].\n\n## Steps\n1. Open the vent plug [1].\n"
        "Answer: fill it [1]."
    )

    text, _, _ = rewrite(reply)

    assert text == "Prime the pump [1].\n\n## Steps\n1. Open the vent plug [1].\nfill it [1]."


def test_words_that_begin_like_a_heading_are_kept() -> None:
    text, _, _ = rewrite("Answering machines aside, the summary is short [1].\nResponse time is 2 s [2].")

    assert text == "Answering machines aside, the summary is short [1].\nResponse time is 2 s [2]."


def test_lines_repeating_a_source_header_are_dropped_as_echoes_or_a_list_of_sources() -> None:
    reply = (
        "[2] Pump manual (p. 2)\nNever run it dry [2].\n\n[1] Pump manual (p. 1)\n- [3] pump-manual.pdf, p. 3"
    )

    text, cited, _ = rewrite(reply)

    assert text == "Never run it dry [1]."
    assert cited == [DRY]


def test_a_line_that_starts_with_a_citation_is_answer_text() -> None:
    text, cited, _ = rewrite(
        "[1] says to fill the casing with water first.\n[2] Pump manual warns against dry running."
    )

    assert text == "[1] says to fill the casing with water first.\n[2] Pump manual warns against dry running."
    assert cited == [PRIME, DRY]


def test_a_reply_that_is_only_a_references_list_cites_nothing() -> None:
    text, cited, _ = rewrite("References:\n[1] Pump manual\n[2] Pump manual")

    assert text == ""
    assert cited == []


REPLY = (
    "## Answer\n**Answer:** Prime the pump through the vent plug [1][1]. Never run it dry [2, 7]. "
    "Drain it before winter [3-4].\n\n## References\n[1] Pump manual (p. 1)\n"
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(REPLY)), max_size=40))
def test_streaming_in_any_pieces_gives_the_same_text_as_the_whole_reply(cuts: list[int]) -> None:
    whole = rewrite_citations(REPLY, given_passages(), CitationNumbering([FROST]))
    bounds = [0, *sorted(cuts), len(REPLY)]
    rewriter = CitationRewriter(given_passages(), CitationNumbering([FROST]))

    streamed = "".join(rewriter.feed(REPLY[a:b]) for a, b in itertools.pairwise(bounds))
    streamed += rewriter.finish()

    assert streamed == whole.text
    assert (
        whole.text
        == "Prime the pump through the vent plug [2]. Never run it dry [3]. Drain it before winter [1, 4]."
    )
    assert tuple(rewriter.cited) == whole.cited == (PRIME, DRY, FROST, MOTOR)


def test_text_is_released_as_soon_as_it_cannot_change() -> None:
    rewriter = CitationRewriter(given_passages(), CitationNumbering())

    assert rewriter.feed("Prime the pump") == "Prime the pump"
    assert rewriter.feed(" [") == ""  # an open bracket may still become a citation
    assert rewriter.feed("1] and") == " [1] and"
    assert rewriter.feed("\nSo") == ""  # may be the start of "Sources:"
    assert rewriter.feed("me more.") == "\nSome more."


# -- numbering -----------------------------------------------------------------------------------


def test_numbers_follow_first_appearance_not_passage_order() -> None:
    numbering = CitationNumbering()

    text, _, _ = rewrite("Drain it in winter [3]. Prime it [1]. Drain it [3].", numbering)

    assert text == "Drain it in winter [1]. Prime it [2]. Drain it [1]."
    assert numbering.chunk_ids == [FROST, PRIME]


def test_numbers_are_stable_across_turns_and_rebuilt_from_stored_messages() -> None:
    numbering = CitationNumbering()
    first, first_cited, _ = rewrite("Prime it [1]. Never run it dry [2].", numbering)
    # Turn two retrieves in another order: the motor first, then the dry-running page.
    hits = pump_hits()
    second_passages = select_passages([hits[3], hits[1], hits[2]])

    second = rewrite_citations(
        "Use a protected outlet [1] and never run dry [2]; drain it [3].", second_passages, numbering
    )

    assert first == "Prime it [1]. Never run it dry [2]."
    assert second.text == "Use a protected outlet [3] and never run dry [2]; drain it [4]."
    assert numbering.chunk_ids == [PRIME, DRY, MOTOR, FROST]
    rebuilt = CitationNumbering.from_messages([first_cited, list(second.cited)])
    assert rebuilt == numbering
    assert CitationNumbering.from_chunk_ids(numbering.chunk_ids) == numbering
    assert rebuilt.chunk_id(3) == MOTOR and rebuilt.get(FROST) == 4 and rebuilt.get(999) is None


def test_a_removed_citation_takes_no_number() -> None:
    numbering = CitationNumbering()

    rewrite("Wait [7]. Prime it [1].", numbering)

    assert numbering.chunk_ids == [PRIME]


# -- claims and verification ---------------------------------------------------------------------


def test_a_citation_after_the_full_stop_belongs_to_the_sentence_before() -> None:
    found = claims("Prime the pump before use. [1] Never run it dry [2]. Done.")

    assert [(c.text, c.numbers) for c in found] == [
        ("Prime the pump before use.", (1,)),
        ("Never run it dry.", (2,)),
        ("Done.", ()),
    ]


def test_citations_resolve_to_the_page_span_and_the_best_matching_sentence(embedder: Embedder) -> None:
    numbering = CitationNumbering()
    passages = given_passages()
    reply = rewrite_citations(
        "Close the vent plug before you start the motor [1]. Running it dry ruins the seal [2].",
        passages,
        numbering,
    )

    checked = verify(
        reply.text, {numbering.number(p.chunk_id): p for p in passages[:2]}, VectorCache(embedder)
    )

    assert [c.number for c in checked.citations] == [1, 2]
    prime = checked.citations[0]
    assert (prime.chunk_id, prime.page, prime.version) == (PRIME, 1, 2)
    assert (prime.start, prime.end) == (10, 10 + len(PUMP_PAGES[0]))
    assert prime.excerpt == "Close the vent plug and start the motor."
    page_text = " " * 10 + PUMP_PAGES[0]
    assert normalise(page_text[prime.excerpt_start : prime.excerpt_end]) == prime.excerpt
    assert all(c.supported and c.score >= SUPPORT_THRESHOLD for c in checked.citations)
    assert checked.unsupported == ()
    # Links are the shell's to build (it knows its routes): the library gives document, version and page.
    shown = prime.as_dict()
    assert "download_url" not in shown
    assert (shown["document_id"], shown["version"], shown["page"]) == (str(prime.document_id), 2, 1)


def test_the_excerpt_backs_the_first_sentence_citing_the_passage_not_the_best_scoring_one(
    embedder: Embedder,
) -> None:
    # An answer opens with what was asked; a later sentence quoting another line of the passage word
    # for word scores higher, and showed that line (asked about error E42, the row of E57).
    numbering = CitationNumbering()
    passages = given_passages()
    reply = rewrite_citations(
        "Fill the casing with water before the first start [1]. Close the vent plug and start the motor [1].",
        passages,
        numbering,
    )

    given = {numbering.number(p.chunk_id): p for p in passages[:1]}

    checked = verify(reply.text, given, VectorCache(embedder))

    [prime] = checked.citations
    assert prime.excerpt == (
        "Before first use, prime the pump: open the vent plug on top of the volute and fill the casing "
        "with clean water until it overflows."
    )
    # The score is still the best of the sentences citing it.
    assert prime.score > 0.95


def test_a_claim_its_passage_does_not_back_is_flagged(embedder: Embedder) -> None:
    passages = given_passages()
    numbering = CitationNumbering()
    reply = rewrite_citations(
        "Drain the volute before winter [3]. Aspirin lowers the risk of a second heart attack [4].",
        passages,
        numbering,
    )

    checked = verify(reply.text, {numbering.number(p.chunk_id): p for p in passages}, VectorCache(embedder))

    frost, motor = checked.citations
    assert frost.supported and frost.score >= SUPPORT_THRESHOLD
    assert not motor.supported and motor.score < SUPPORT_THRESHOLD
    [flagged] = checked.unsupported
    assert flagged.text == "Aspirin lowers the risk of a second heart attack [2]."
    assert flagged.numbers == (2,)


def test_a_claim_is_supported_when_any_passage_it_cites_backs_it(embedder: Embedder) -> None:
    passages = given_passages()
    numbering = CitationNumbering()
    reply = rewrite_citations("Never run the pump without water [4][2].", passages, numbering)

    checked = verify(reply.text, {numbering.number(p.chunk_id): p for p in passages}, VectorCache(embedder))

    assert checked.unsupported == ()
    motor, dry = checked.citations
    assert dry.supported and not motor.supported


def test_an_uncited_claim_is_reported(embedder: Embedder) -> None:
    passages = given_passages()
    numbering = CitationNumbering()
    reply = rewrite_citations(
        "Prime the pump [1]. The seal costs forty euros to replace. In short:", passages, numbering
    )

    checked = verify(reply.text, {numbering.number(p.chunk_id): p for p in passages}, VectorCache(embedder))

    assert checked.uncited == ("The seal costs forty euros to replace.",)


def test_a_citation_citeline_added_is_marked_attributed(embedder: Embedder) -> None:
    passages = given_passages()
    numbering = CitationNumbering()
    reply = rewrite_citations("Prime the pump before use [1]. Never run it dry [2].", passages, numbering)

    checked = verify(
        reply.text, {numbering.number(p.chunk_id): p for p in passages}, VectorCache(embedder), attributed={2}
    )

    assert [(c.number, c.attributed) for c in checked.citations] == [(1, False), (2, True)]
    assert [c.as_dict()["attributed"] for c in checked.citations] == [False, True]


def test_a_sentence_stating_a_quantity_its_passage_states_otherwise_is_not_backed_by_it(
    embedder: Embedder,
) -> None:
    # Asked "Is it true that the maximum dose is 3000 mg?", the packaged model wrote "The maximum dose
    # is 3000 mg. [1]" under the verdict that the source states at most 2000 mg: support 0.47, above
    # the threshold, so the answer asserted the wrong dose, cited, with no flag.
    dose = make_hit(
        7,
        "The usual starting dose of metformin is 500 mg twice daily with meals, raised by 500 mg each "
        "week to at most 2000 mg.",
    )
    given = {1: select_passages([dose])[0]}

    wrong = verify("The maximum dose of metformin is 3000 mg [1].", given, VectorCache(embedder))
    right = verify("The maximum dose of metformin is 2000 mg [1].", given, VectorCache(embedder))

    assert [u.numbers for u in wrong.unsupported] == [(1,)] and not wrong.citations[0].supported
    assert right.unsupported == () and right.citations[0].supported


def test_a_sentence_stating_a_year_or_date_its_passage_does_not_write_is_not_backed_by_it(
    embedder: Embedder,
) -> None:
    # Meaning and shared words do not compare years: "issued in 2007" read as close to a passage saying
    # 2009 as "issued in 2009" does, and the citation stood.
    directive = make_hit(
        31,
        "The airworthiness directive was issued in 2009 and becomes effective on March 13, 2019, for "
        "all Model 737-8 airplanes.",
        title="Federal Register",
    )
    given = {1: select_passages([directive])[0]}

    def check(answer: str) -> Verification:
        return verify(answer, given, VectorCache(embedder))

    for wrong in (
        "The airworthiness directive was issued in 2007 [1].",
        "The airworthiness directive becomes effective on March 14, 2019 [1].",
    ):
        assert [u.numbers for u in check(wrong).unsupported] == [(1,)], wrong
    for right in (
        "The airworthiness directive was issued in 2009 [1].",
        "The airworthiness directive becomes effective on 13 March 2019 [1].",
        "The airworthiness directive becomes effective in March 2019 [1].",
    ):
        checked = check(right)
        assert checked.unsupported == () and checked.citations[0].supported, right


def test_a_sentence_taking_one_quantity_from_each_passage_it_cites_is_backed(embedder: Embedder) -> None:
    # Each passage states one of the sentence's two torques and not the other: compared passage by
    # passage, each "stated it otherwise" and the whole sentence was flagged.
    m10 = make_hit(8, "Tighten the M10 flange bolts of the pump housing to 49 N·m.")
    m12 = make_hit(9, "Tighten the M12 flange bolts of the pump housing to 85 N·m.", start=100)
    given = dict(enumerate(select_passages([m10, m12]), start=1))

    both = verify(
        "Tighten the M10 flange bolts to 49 N·m and the M12 flange bolts to 85 N·m [1][2].",
        given,
        VectorCache(embedder),
    )
    wrong = verify(
        "Tighten the M10 flange bolts to 60 N·m and the M12 flange bolts to 85 N·m [1][2].",
        given,
        VectorCache(embedder),
    )

    assert both.unsupported == () and all(c.supported for c in both.citations)
    assert [u.numbers for u in wrong.unsupported] == [(1, 2)]


def test_a_sentence_giving_a_name_from_another_passage_is_not_backed_by_the_one_it_cites(
    embedder: Embedder,
) -> None:
    # Asked which airplanes a proposed directive applies to, the packaged model answered with the maker
    # another passage named: support 0.57 against the directive for Boeing, counted as backed.
    directive = make_hit(
        11,
        "The FAA proposes to adopt a new airworthiness directive (AD) for certain The Boeing Company "
        "Model 737-8 and 737-9 airplanes. This AD applies to The Boeing Company Model 737-8 airplanes.",
        title="Federal Register 2020-17221",
    )
    pilatus = make_hit(
        14,
        "The FAA proposes to adopt a new airworthiness directive (AD) for all Pilatus Aircraft Ltd. "
        "Model PC-12 airplanes.",
        title="Federal Register 2020-17304",
    )
    given = dict(enumerate(select_passages([directive, pilatus]), start=1))
    asked = "Which airplanes does the proposed airworthiness directive apply to?"

    def check(answer: str) -> Verification:
        return verify(answer, given, VectorCache(embedder), question=asked)

    wrong = check("The proposed airworthiness directive applies to Pilatus Aircraft Ltd. [1]")
    right = check("The proposed airworthiness directive applies to Boeing Model 737-8 airplanes [1].")
    other = check("The proposed airworthiness directive applies to Pilatus Aircraft Ltd. airplanes [2].")

    assert [u.numbers for u in wrong.unsupported] == [(1,)] and not wrong.citations[0].supported
    assert right.unsupported == () and right.citations[0].supported
    assert other.unsupported == () and other.citations[0].supported  # cited where it is named


def test_a_sentence_copied_word_for_word_from_another_passage_is_not_backed_by_the_one_it_cites(
    embedder: Embedder,
) -> None:
    # The packaged model copied one passage's sentence and cited another that scored 0.67 for it: the
    # citation stood, and the reader opening it found a passage that does not say it.
    ours = make_hit(
        21, "Before first use, prime the pump: open the vent plug and fill the casing with water."
    )
    theirs = make_hit(
        22,
        "Before first use, prime the pump by opening the vent plug and filling the casing with clean "
        "water until it overflows.",
        title="Another pump's manual",
    )
    given = dict(enumerate(select_passages([ours, theirs]), start=1))
    copied = (
        "Before first use, prime the pump by opening the vent plug and filling the casing with clean water"
    )

    wrong = verify(f"{copied} [1].", given, VectorCache(embedder))
    right = verify(f"{copied} [2].", given, VectorCache(embedder))
    own = verify(
        "Before first use, open the vent plug and fill the casing with water [1].",
        given,
        VectorCache(embedder),
    )

    assert [u.numbers for u in wrong.unsupported] == [(1,)] and not wrong.citations[0].supported
    assert right.unsupported == () and right.citations[0].supported
    assert own.unsupported == () and own.citations[0].supported  # its own words, not the other's


def test_a_name_is_not_taken_from_another_passage_when_the_cited_ones_title_or_the_question_gives_it(
    embedder: Embedder,
) -> None:
    text = "Change the water filter every two months, or after 50 litres."
    lavazza = make_hit(15, "Descale the Lavazza Blue every three months.", title="Lavazza BLUE LB 1100")
    sentence = "Change the water filter of the Lavazza Blue every two months [1]."

    def supported(title: str, question: str = "", *, alone: bool = False) -> bool:
        hits = [make_hit(12, text, title=title)] + ([] if alone else [lavazza])
        given = dict(enumerate(select_passages(hits), start=1))
        return verify(sentence, given, VectorCache(embedder), question=question).citations[0].supported

    assert not supported("Espresso machine manual")  # the name came from passage [2]
    assert supported("Lavazza BLUE LB 1100")
    assert supported("Espresso machine manual", "How often is the Lavazza Blue's filter changed?")
    # A name no passage gives may be the writer's own words for what the passage says: not judged.
    assert supported("Espresso machine manual", alone=True)


def test_a_sentence_repeating_the_models_instructions_is_not_backed_by_a_passage(embedder: Embedder) -> None:
    # Asked "How do I inspect the stabilizer trim?" with the repair persona, the packaged model opened
    # with its own guidance, cited: backed at 0.56 by a passage of the manual.
    trim = make_hit(
        13,
        "Inspect the horizontal stabilizer trim in order: check the trim jackscrew, then the trim motor. "
        "Disconnect power before any inspection.",
    )
    given = {1: select_passages([trim])[0]}
    persona = PERSONAS["repair"]

    echo = verify(
        "To inspect the stabilizer trim, follow these steps in order, and put any safety warning from the "
        "sources first [1].",
        given,
        VectorCache(embedder),
        instructions=persona,
    )
    answer = verify(
        "Inspect the horizontal stabilizer trim in order: the jackscrew, then the trim motor [1].",
        given,
        VectorCache(embedder),
        instructions=persona,
    )

    assert [u.numbers for u in echo.unsupported] == [(1,)] and not echo.citations[0].supported
    assert answer.unsupported == () and answer.citations[0].supported
    # Without the instructions to compare, the echo scores as close in words as it is.
    assert verify(echo.unsupported[0].text, given, VectorCache(embedder)).citations[0].supported
