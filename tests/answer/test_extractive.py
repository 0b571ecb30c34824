"""The extractive answerer: the passages' own best sentences, each cited, on real text through real search."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from pathlib import Path

from citeline.answer import Complete, Event, Start
from citeline.answer.answer import answer_stream
from citeline.answer.citations import MARKER, CitationNumbering, claims
from citeline.answer.extractive import extractive_answer
from citeline.answer.llm import GenerationOptions
from citeline.answer.prompt import select_passages
from citeline.answer.support import PassageSentences, VectorCache, normalise, readable_rows, without_markers
from citeline.embed import Embedder
from citeline.engine import Citeline
from citeline.eval.answers import check_citations
from tests.conftest import PDFS, REPO, write

from .conftest import make_hit

MANUAL = """# Centrifugal pump CP-40: operating manual

## Priming

Before first use, prime the pump. Open the vent plug on top of the volute and fill the casing with
clean water until it overflows. Close the vent plug and start the motor. Priming takes about two minutes.

## Dry running

Never run the pump dry. Running without water destroys the mechanical seal within seconds and voids the
warranty. If the pump has run dry, replace the seal before the next start.

## Winter storage

In winter, drain the volute through the drain plug so that frost cannot crack the casing. Store the
pump in a dry room above 5 degrees Celsius.

## Electrical connection

The motor is rated 230 V, 50 Hz, 750 W. Connect it only to an outlet protected by a residual current
device of 30 mA. Have a qualified electrician check the earth connection once a year.
"""


def ask(
    cl: Citeline, question: str, numbering: CitationNumbering | None = None
) -> tuple[str, list[str], dict[int, str]]:
    """The extractive answer from a real search: its text, its sentences, and each number's passage text."""
    passages = select_passages(cl.search(question)[:5])
    numbering = CitationNumbering() if numbering is None else numbering
    extract = extractive_answer(question, passages, numbering, VectorCache(cl.embedder))
    by_number = {numbering.number(p.chunk_id): p.text for p in passages if p.chunk_id in extract.cited}
    return extract.text, [c.text for c in claims(extract.text)], by_number


def test_each_sentence_is_quoted_from_the_passage_it_cites(cl: Citeline, tmp_path: Path) -> None:
    write(tmp_path / "manual.md", MANUAL)
    cl.ingest([tmp_path])

    text, _, passages = ask(cl, "How do I prime the pump?")

    found = claims(text)
    assert 1 <= len(found) <= 3
    for claim in found:
        [number] = claim.numbers
        quoted = claim.text.removesuffix(".")
        assert quoted in normalise(passages[number]), claim
    assert set(passages) == {n for c in found for n in c.numbers}


def test_the_answering_sentences_are_picked_and_other_topics_left_out(cl: Citeline, tmp_path: Path) -> None:
    write(tmp_path / "manual.md", MANUAL)
    cl.ingest([tmp_path])

    cases = {
        # The answer follows the sentence naming the topic and shares no word with the question.
        "How do I prime the pump?": ("Open the vent plug on top of the volute and fill the casing", "230 V"),
        "What voltage does the motor need?": ("The motor is rated 230 V, 50 Hz, 750 W", "frost"),
        "What happens if the pump runs without water?": ("destroys the mechanical seal", "230 V"),
        "How do I protect the pump from frost?": ("drain the volute through the drain plug", "230 V"),
    }
    for question, (expected, unrelated) in cases.items():
        text, _, _ = ask(cl, question)
        assert expected in text, (question, text)
        assert unrelated not in text, (question, text)


def test_the_user_guide_answers_the_care_journey_question_from_the_scopes_page(cl: Citeline) -> None:
    cl.ingest([REPO / "docs" / "scopes.md", REPO / "docs" / "search.md", REPO / "docs" / "ingesting.md"])
    question = "How do I keep documents of one care journey apart from another?"

    text, sentences, _ = ask(cl, question)

    hits = {h.chunk_id: h for h in cl.search(question)[:5]}
    numbering = CitationNumbering()
    passages = select_passages(list(hits.values()))
    cited = extractive_answer(question, passages, numbering, VectorCache(cl.embedder)).cited
    assert hits[cited[0]].document_name == "scopes.md"
    assert any("give each care journey its own scope" in s for s in sentences), text


def test_only_whole_sentences_of_a_pdf_are_quoted_never_headings_captions_or_cut_chunk_ends(
    cl: Citeline,
) -> None:
    # The FAA handbook page: headings ("Elastic Stop Nut"), figure labels and captions ("Figure 7-26.
    # Self-locking nuts."), and chunks that start or stop mid-sentence ("through the medium of ...").
    cl.ingest([PDFS / "manual_faa_amt_handbook_sample.pdf"])

    for question in (
        "What is an elastic stop nut?",
        "How is a self-locking nut installed on a bolt?",
        "What are the types of self-locking nuts?",
    ):
        text, sentences, _ = ask(cl, question)

        assert sentences, (question, text)
        for sentence in sentences:
            assert sentence[:1].isupper(), (question, sentence)
            assert len(sentence.split()) >= 6, (question, sentence)
            assert "Figure" not in sentence and "Nut " not in sentence, (question, sentence)


def test_a_table_row_is_quoted_whole(cl: Citeline, tmp_path: Path) -> None:
    write(tmp_path / "pumps.csv", "model,max_pressure_bar,seal\nXR200,12,mechanical\nXR300,16,mechanical\n")
    cl.ingest([tmp_path])

    text, _, _ = ask(cl, "What is the maximum pressure of the XR300?")

    assert "model: XR300; max_pressure_bar: 16; seal: mechanical [1]." in text, text


def test_a_sentence_repeated_by_overlapping_chunks_is_quoted_once(embedder: Embedder) -> None:
    shared = "Close the vent plug and start the motor."
    first = make_hit(1, f"Fill the casing with clean water until it overflows. {shared}", page=1)
    second = make_hit(2, f"{shared} Priming takes about two minutes.", page=1, start=60)
    passages = select_passages([first, second])

    extract = extractive_answer(
        "When do I start the motor?", passages, CitationNumbering(), VectorCache(embedder)
    )

    assert extract.text.count("Close the vent plug") == 1


def test_headings_and_code_blocks_are_not_quoted_and_a_table_row_is_quoted_as_its_headers_read_it(
    embedder: Embedder,
) -> None:
    text = (
        "## Deleting documents\n\n```sh\nciteline docs delete 1e1446a3\n```\n\n"
        "| Command | Effect |\n| --- | --- |\n| docs delete | removes a document |\n\n"
        "`docs delete` takes a document id and removes the whole document with its chunks."
    )
    extract = extractive_answer(
        "How do I delete a document?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert extract.text == (
        "Command: docs delete; Effect: removes a document [1]. "
        "`docs delete` takes a document id and removes the whole document with its chunks [1]."
    )


def test_a_markdown_tables_row_is_found_and_quoted_under_its_headers(embedder: Embedder) -> None:
    table = (
        "# Device table\n\n| Model | Max pressure (bar) | Flow (L/min) |\n| --- | --- | --- |\n"
        "| HX-2000 | 10 | 40 |\n| HX-4000 | 16 | 60 |\n| HX-6000 | 25 | 90 |"
    )
    extract = extractive_answer(
        "What is the max pressure of the HX-4000?",
        select_passages([make_hit(1, table)]),
        CitationNumbering(),
        VectorCache(embedder),
        max_sentences=1,
    )

    # Not the whole table run together with its heading, as one "sentence" of pipes.
    assert extract.text == "Model: HX-4000; Max pressure (bar): 16; Flow (L/min): 60 [1]."


def test_numbers_continue_the_conversation(embedder: Embedder) -> None:
    hits = [
        make_hit(1, "Drain the volute before winter so frost cannot crack it."),
        make_hit(2, "Never run it dry."),
    ]
    numbering = CitationNumbering([50, 51, 1])

    extract = extractive_answer(
        "How do I store the pump in winter?", select_passages(hits), numbering, VectorCache(embedder)
    )

    assert extract.text == "Drain the volute before winter so frost cannot crack it [3]."
    assert extract.cited == (1,)
    assert numbering.chunk_ids == [50, 51, 1]
    assert MARKER.findall(extract.text) == ["3"]
    assert re.fullmatch(r".* \[3\]\.", extract.text)


def test_a_quoted_sentence_loses_its_sources_own_reference_markers(embedder: Embedder) -> None:
    # A paper's "[2]" quoted beside citeline's "[1]" would read as a citation of another passage.
    text = (
        "Lymphatic filariasis prevalence fell sharply after mass drug administration (Box 1) [2]. "
        "Each campaign combined albendazole with ivermectin [3, 4]."
    )
    numbering = CitationNumbering()

    extract = extractive_answer(
        "Is albendazole used against lymphatic filariasis?",
        select_passages([make_hit(9, text)]),
        numbering,
        VectorCache(embedder),
    )

    assert "[2]" not in extract.text and "[3, 4]" not in extract.text
    assert set(MARKER.findall(extract.text)) == {"1"}
    assert "combined albendazole with ivermectin [1]." in extract.text


def test_each_passage_gives_its_best_sentence_before_any_passage_gives_a_second(embedder: Embedder) -> None:
    # Three sentences of the first passage match the question better than the second passage's best.
    first = make_hit(
        1,
        "Statins lower LDL cholesterol in adults. Statins lower LDL cholesterol by a third. "
        "Statins lower LDL cholesterol within six weeks.",
    )
    second = make_hit(2, "In children, statins lowered LDL cholesterol less than in adults.", page=2)

    extract = extractive_answer(
        "Do statins lower LDL cholesterol?",
        select_passages([first, second]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert extract.cited == (1, 2)
    assert extract.text.count("[1]") == 2 and extract.text.count("[2]") == 1


def test_the_passages_are_quoted_in_the_order_the_search_ranked_them(embedder: Embedder) -> None:
    # The search ranked the page with the steps first; the second passage's sentence repeats the
    # question's words, so it scores higher, and it used to be quoted first, as [1]. The search's
    # rank, which weighs the whole passage, put an answering section first in 22 of 32 questions on the
    # user guide, the best-scoring sentence's passage in 13 (python -m bench.guide_answers).
    ranked_first = make_hit(
        1,
        "When pgvector is missing, install the extension in the server's database. On Debian, install "
        "the postgresql-17-pgvector package and run CREATE EXTENSION vector.",
    )
    ranked_second = make_hit(
        2,
        "What to do when the pgvector extension is missing: see the troubleshooting page for the steps.",
        page=2,
    )

    extract = extractive_answer(
        "What should I do when the pgvector extension is missing?",
        select_passages([ranked_first, ranked_second]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert extract.cited == (1, 2), extract.text
    assert extract.text.startswith("When pgvector is missing")


def test_a_list_item_cut_off_where_its_passage_ends_is_not_quoted(embedder: Embedder) -> None:
    # The chunk ends mid-item; its next passage has the item whole. Quoted, the piece would say
    # that a negation turns "do not operate it above" into something.
    text = (
        "- *Ranges and bounds*: up to, at most and less than make an upper bound of the quoted figure.\n"
        "- *Negations*: a negation turns a lower bound into an upper bound for the maximum pressure "
        '("do not operate it above'
    )
    hit = make_hit(1, text)
    hit = replace(hit, chunk_index=0, total_chunks=3)
    extract = extractive_answer(
        "Which negation turns a bound into a maximum pressure?",
        select_passages([hit]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert "operate it above" not in extract.text
    # Quoted without its bullet and emphasis.
    assert extract.text.startswith("Ranges and bounds: up to, at most")


def test_a_passage_that_starts_mid_sentence_is_quoted_from_its_first_whole_sentence(
    embedder: Embedder,
) -> None:
    # A chunk starting mid-sentence, where a colon and a line break split the sentence in two pieces:
    # both pieces are one sentence's, cut off at its start.
    text = (
        'giving 10 bar as the operating pressure does not disagree with "the maximum is 10 bar":\n'
        "it states the figure, and PDF tables whose cells lose their column are not read at all.\n"
        "The check of quantities reads the pressure of each table row under its column header."
    )
    extract = extractive_answer(
        "Are PDF tables whose cells lose their column read?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert "it states the figure" not in extract.text
    assert extract.text == (
        "The check of quantities reads the pressure of each table row under its column header [1]."
    )


def test_a_sentence_that_goes_on_after_a_quotation_is_not_quoted_in_halves(embedder: Embedder) -> None:
    # The quotation's own full stop ends no sentence: neither half says what the whole one says.
    text = (
        "The check of quantities compares figures of one kind. "
        'A claim such as "The max pressure of the HX-4000 is 10 bar." is still found supported by a '
        "passage about the HX-4000's motor that names no pressure. "
        "A passage stating 16 bar for the HX-4000 does not support a claim of 10 bar."
    )
    extract = extractive_answer(
        "Is a passage about the HX-4000's motor that names no pressure found supported?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert "is still found supported" not in extract.text
    assert "is 10 bar [1]." not in extract.text
    assert extract.text


def test_a_pdf_tables_cells_joined_by_dot_leaders_are_not_quoted(embedder: Embedder) -> None:
    # From the Federal Register's table of estimated costs: "Stabilizer wiring change" and its dot
    # leaders made a "sentence" of three content terms, quoted as an answer on what a part costs.
    text = (
        "ESTIMATED COSTS\nAction Labor cost Parts cost Cost per product\n"
        "Stabilizer wiring change ........................ Up to 79 work-hours x $85 per hour =\n"
        "Up to $6,715.\nThe FAA has received no definitive data on the cost of the stabilizer wiring change."
    )
    extract = extractive_answer(
        "How much does the stabilizer wiring change cost?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert "...." not in extract.text
    assert "The FAA has received no definitive data" in extract.text


def test_a_passage_that_starts_inside_a_bracket_is_quoted_from_its_first_whole_sentence(
    embedder: Embedder,
) -> None:
    # SciFact's ART abstract, cut by the splitter inside a sentence's bracket: the piece says the
    # bracket's figure "unless" something, which is half of what the source says.
    text = (
        "(81% of people living with HIV on ART by 2020) unless they adopt a test-and-offer approach and "
        "increase ART coverage. Seven models estimated that HIV incidence is lower on ART."
    )
    extract = extractive_answer(
        "Are countries on course for 81% of people living with HIV on ART by 2020?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert "unless they adopt" not in extract.text
    assert extract.text == "Seven models estimated that HIV incidence is lower on ART [1]."


def test_a_sentence_that_opens_with_a_whole_bracket_is_quoted(embedder: Embedder) -> None:
    text = "(See the priming section.) Prime the pump before first use with clean water in the casing."
    extract = extractive_answer(
        "How do I prime the pump before first use?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert "Prime the pump before first use" in extract.text


def test_the_passages_bearing_out_a_verdict_are_quoted_first(embedder: Embedder) -> None:
    # The second passage shares the claim's words but only says what was studied; the first, in other
    # words, is the finding the verdict cites ("Yes: the sources support this claim [1]."), so the
    # reader's next sentence should say what it found.
    finding = make_hit(
        1, "Patients receiving the treatment had 40 percent fewer recurrences in the trial.", page=1
    )
    topic = make_hit(
        2, "Relapse rates of adults with the disease who take the drug were studied in this review.", page=2
    )
    claim = "The drug reduces relapse rates in adults with the disease."

    def answer(lead: tuple[int, ...]) -> str:
        passages = select_passages([finding, topic])
        return extractive_answer(claim, passages, CitationNumbering(), VectorCache(embedder), lead=lead).text

    # Ranked by score alone, the finding falls below the best sentence's floor and is not quoted.
    assert "fewer recurrences" not in answer(())
    assert answer((1,)) == (
        "Patients receiving the treatment had 40 percent fewer recurrences in the trial [1]. "
        "Relapse rates of adults with the disease who take the drug were studied in this review [2]."
    )


def test_a_lead_passage_is_quoted_even_when_its_sentences_score_below_the_others(embedder: Embedder) -> None:
    bearing = make_hit(1, "Mortality at one year was unchanged between the two study groups.", page=1)
    other = make_hit(2, "Aspirin lowers the risk of heart attack in adults with heart disease.", page=2)
    extract = extractive_answer(
        "Aspirin lowers the risk of heart attack in adults.",
        select_passages([bearing, other]),
        CitationNumbering(),
        VectorCache(embedder),
        lead=(1,),
    )

    assert extract.cited == (1, 2)
    assert "Mortality at one year was unchanged" in extract.text


def test_a_table_rows_citation_shows_the_row_under_its_headers_and_points_at_the_stored_row(
    cl: Citeline, tmp_path: Path
) -> None:
    table = (
        "# Device table\n\n| Model | Max pressure (bar) | Flow (L/min) |\n| --- | --- | --- |\n"
        "| HX-2000 | 10 | 40 |\n| HX-4000 | 16 | 60 |\n| HX-6000 | 25 | 90 |\n"
    )
    write(tmp_path / "devices.md", table)
    cl.ingest([tmp_path])
    question = "What is the max pressure of the HX-4000?"

    async def collect() -> list[Event]:
        stream = answer_stream(
            question,
            cl.search(question),
            llm=None,
            embedder=cl.embedder,
            numbering=CitationNumbering(),
            persona="general",
            options=GenerationOptions(),
        )
        return [event async for event in stream]

    start, *_, done = asyncio.run(collect())
    assert isinstance(start, Start) and isinstance(done, Complete)

    [citation] = done.citations
    # Every shell (CLI, API, web) shows this field: not the bare "| HX-4000 | 16 | 60 |".
    assert citation.excerpt == "Model: HX-4000; Max pressure (bar): 16; Flow (L/min): 60."
    assert table[citation.excerpt_start : citation.excerpt_end] == "| HX-4000 | 16 | 60 |"
    stored = {h.chunk_id: h for h in cl.fetch([citation.chunk_id])}
    assert check_citations(done, start.passages, stored) == ([1], [])


def test_a_sentence_wrapped_after_its_colon_is_quoted_whole_not_from_its_second_line(
    embedder: Embedder,
) -> None:
    text = (
        "The chunk settings compared are the command's own. Unlike labels, they are not kept when not "
        "given:\na document ingested with a chunk size of 600 becomes updated, rebuilt at the default "
        "size of 800, by an ingest that does not repeat it.\n\nThe splitter cuts each page into chunks."
    )
    extract = extractive_answer(
        "What happens to a document ingested with a chunk size of 600?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
        max_sentences=1,
    )

    assert extract.text == (
        "Unlike labels, they are not kept when not given: a document ingested with a chunk size of 600 "
        "becomes updated, rebuilt at the default size of 800, by an ingest that does not repeat it [1]."
    )


def test_no_piece_of_a_sentence_cut_inside_its_quotation_is_quoted(embedder: Embedder) -> None:
    # The splitter ends sentences at the ellipsis and at the full stop inside the quotation.
    text = (
        "Signing out forgets the key. A key the API refuses mid-session (revoked, expired) is forgotten "
        'too: the page goes back to its sign-in form and says why ("Signed out: API key cl_... was '
        'revoked (HTTP 401). Sign in again with a valid key."). Every text that comes from a document '
        "is inserted as text."
    )

    extract = extractive_answer(
        "What happens when the API refuses a key mid-session?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    # It was: 'A key the API refuses ... API key cl_.. [1]. was revoked (HTTP 401) [1].' and, without
    # its start, 'Sign in again with a valid key.") [1].'
    for claim in claims(extract.text):
        assert "cl_" not in claim.text and not claim.text[:1].islower(), extract.text
        assert claim.text.count("(") == claim.text.count(")") and claim.text.count('"') % 2 == 0, claim
    assert extract.text.startswith("Signing out forgets the key [1].")


def test_no_piece_of_a_sentence_cut_inside_its_brackets_is_quoted_but_a_numbered_list_is(
    embedder: Embedder,
) -> None:
    # The passage starts inside a sentence's bracket: "December 11, 2018" reads like a sentence start.
    text = (
        "December 11, 2018 (83 FR 63561)), was published in the Federal Register as an amendment to "
        "14 CFR 39.13. The rule takes effect on October 6, 2020. It applies to 1) operators of the "
        "affected airplanes and 2) their maintenance providers."
    )

    extract = extractive_answer(
        "When was the rule published in the Federal Register and when does it take effect?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert "December 11" not in extract.text, extract.text
    assert extract.text.startswith("The rule takes effect on October 6, 2020 [1].")
    assert "It applies to 1) operators of the affected airplanes and 2) their maintenance providers [1]." in (
        extract.text
    )


def test_a_table_row_whose_last_cell_ends_a_sentence_is_quoted_with_one_full_stop(embedder: Embedder) -> None:
    table = (
        "| Metric | Meaning |\n| --- | --- |\n"
        "| `ndcg@10` | Normalised discounted cumulative gain of the first 10 documents. |\n"
        "| `recall@10` | The share of relevant documents in the first 10. |"
    )
    extract = extractive_answer(
        "What does ndcg@10 mean?",
        select_passages([make_hit(1, table)]),
        CitationNumbering(),
        VectorCache(embedder),
        max_sentences=1,
    )

    assert extract.text == (
        "Metric: `ndcg@10`; Meaning: Normalised discounted cumulative gain of the first 10 documents [1]."
    )


def test_a_table_row_with_sentences_in_its_cells_is_one_row_and_a_row_cut_by_the_passage_is_not_read(
    embedder: Embedder,
) -> None:
    table = (
        "| Metric | Meaning |\n| --- | --- |\n"
        "| `ndcg@10` | Gain of the first 10 documents. 1.0 means the best possible order. |\n"
        "| `recall@100` | Share of the relevant documents found in the first 100. |\n"
        "| `mrr@10` | Reciprocal rank of th"
    )

    sentences = PassageSentences.of(table).sentences

    # The splitter ends a sentence inside the cell, leaving '1.0 means ...' and a lone '|': that '|'
    # was read as the table's rule and the next row as its header ('`recall@100`: `mrr@10`; ...').
    assert "Metric: `ndcg@10`; Meaning: Gain of the first 10 documents." in sentences
    # The cell's second sentence says which row it belongs to.
    assert "Metric: `ndcg@10`; 1.0 means the best possible order." in sentences
    assert (
        "Metric: `recall@100`; Meaning: Share of the relevant documents found in the first 100." in sentences
    )
    assert sentences[-1] == "| `mrr@10` | Reciprocal rank of th"
    extract = extractive_answer(
        "What does mrr@10 mean?",
        select_passages([make_hit(1, table)]),
        CitationNumbering(),
        VectorCache(embedder),
    )
    assert "Reciprocal rank of th" not in extract.text


def test_a_quoted_list_item_loses_its_bullet_and_emphasis(embedder: Embedder) -> None:
    text = (
        "The benchmark reports two figures.\n\n"
        "- **Ingest memory**: the peak Python memory while ingesting PDFs of 3, 15 and 150 pages.\n"
        "- **Search latency**: the time each search takes over the whole collection.\n"
    )

    extract = extractive_answer(
        "How much memory does ingesting PDFs take?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
        max_sentences=1,
    )

    assert extract.text == (
        "Ingest memory: the peak Python memory while ingesting PDFs of 3, 15 and 150 pages [1]."
    )


def test_a_pdf_line_ending_in_a_preposition_before_a_name_goes_on_and_is_no_heading(
    embedder: Embedder,
) -> None:
    text = (
        "SUMMARY: The FAA proposes to adopt a\nnew airworthiness directive (AD) for\n"
        "Pilatus Aircraft Ltd. Model PC\u201312/47E\nairplanes. This proposed AD results\n"
        "from mandatory continuing\nairworthiness information.\n"
    )

    extract = extractive_answer(
        "Which airplanes does the airworthiness directive apply to?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
        max_sentences=1,
    )

    # It was 'Pilatus Aircraft Ltd. Model PC-12/47E airplanes [1].', the line break after "for" read
    # as the end of a heading.
    assert extract.text == (
        "SUMMARY: The FAA proposes to adopt a new airworthiness directive (AD) for Pilatus Aircraft Ltd. "
        "Model PC\u201312/47E airplanes [1]."
    )


def test_a_sentence_with_a_citation_number_in_inline_code_is_not_quoted(embedder: Embedder) -> None:
    # Quoted, the code's "[1]" would be read as a citation; with it removed as the source's own marker,
    # the guide's sentence read "The model sees the passages numbered `` to `[n]`".
    text = (
        "The model sees the passages numbered `[1]` to `[n]` in the prompt. "
        "The model sees each passage with its number and its title in the prompt."
    )
    extract = extractive_answer(
        "How does the model see the passages in the prompt?",
        select_passages([make_hit(1, text)]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    assert "``" not in extract.text and "[n]" not in extract.text
    assert extract.text == "The model sees each passage with its number and its title in the prompt [1]."


def test_a_table_cells_later_sentence_is_not_quoted_when_the_passage_lacks_the_tables_headers(
    embedder: Embedder,
) -> None:
    # A passage of docs/configuration.md that starts at a row: without the headers the row cannot be
    # read, so it is not quoted, and its cell's second sentence alone says nothing of which setting.
    row = (
        "| `CITELINE_ANSWER_MIN_SIMILARITY` | `0.25` | When no passage reaches this cosine similarity to "
        "the question, and no sentence holds half of the question's terms (two at least, or an identifier "
        "such as E42), citeline says the documents hold no evidence and calls no model; 0 to 1, `0` turns "
        "the check off. Measured for the default embedder: see `conversations.md`. |\n\n### Conversations"
    )
    troubleshooting = (
        "`citeline ask` says this, without calling the model, when no passage found for the question "
        "reaches `CITELINE_ANSWER_MIN_SIMILARITY` (cosine similarity, 0.25 by default) and no sentence "
        "holds half of the question's terms (two of them at least, or an identifier such as `E42`)."
    )
    passages = select_passages([make_hit(1, row), make_hit(2, troubleshooting, page=2)])

    for lead in ((), (1,)):
        extract = extractive_answer(
            "Is it true that CITELINE_ANSWER_MIN_SIMILARITY is 0.25 by default?",
            passages,
            CitationNumbering(),
            VectorCache(embedder),
            lead=lead,
        )

        # The verdict's passage (lead) put it first: 'Measured for the default embedder: see
        # `conversations.md` [1].' opened the answer.
        assert "Measured for the default embedder" not in extract.text, extract.text
        assert extract.text.startswith("`citeline ask` says this"), extract.text


def test_a_quoted_sentence_loses_the_footnote_marks_a_pdf_gives_it_but_keeps_its_exponents(
    embedder: Embedder,
) -> None:
    # As the PDF loader marks them (docs/ingesting.md): a footnote's own number at the start of its
    # line, a footnote mark raised after a comma; an exponent after a digit or a unit stays.
    text = (
        "Stall warning is the activation of the stick shaker,^8 with other warnings.\n"
        "^9 An AOA disagree alert is a visual alert that the two AOA sensors of the 737 MAX disagree.\n"
        "The vane area is 25 cm^2 and the sensor samples 10^3 times each second.\n"
    )

    extract = extractive_answer(
        "What is an AOA disagree alert on the 737 MAX stick shaker vane sensors?",
        select_passages([replace(make_hit(1, text), content_type="application/pdf")]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    # "^9 An AOA disagree alert ..." opened the answer to what an AOA disagree alert is.
    assert "An AOA disagree alert is a visual alert" in extract.text, extract.text
    assert "^9" not in extract.text and "^8" not in extract.text, extract.text
    assert "25 cm^2" in extract.text and "10^3 times" in extract.text, extract.text
    assert without_markers("the stick shaker,^8 with others") == "the stick shaker, with others"
    # After a closing bracket it is an exponent too (7f7ecc5 took "(2r)^2" for a footnote mark).
    for formula in ("The area grows as (2r)^2 with the radius.", "Stress in [N/mm]^2 units."):
        assert without_markers(formula) == formula


def test_a_passage_opening_with_the_tail_of_a_sentence_another_passage_holds_does_not_quote_it(
    embedder: Embedder,
) -> None:
    # Chunks 30 and 31 of the federal register fixture: 31 starts where its overlap with 30 cuts a
    # sentence, on a capital ("MCAS"), so it read as a whole sentence and opened the answer to "What
    # is MCAS?": 'MCAS activation as a result of input from a single AOA sensor [1].'
    before = replace(
        make_hit(
            30,
            "This is in contrast to the original MCAS design, which relied on data from only one sensor "
            "at a time, and allowed repeated MCAS activation as a result of input from a single AOA sensor.",
        ),
        chunk_index=30,
        total_chunks=60,
    )
    after = replace(
        make_hit(
            31,
            "MCAS activation as a result of input from a single AOA sensor. These revised flight control "
            "laws would use inputs from both AOA sensors to activate MCAS.",
        ),
        chunk_index=31,
        total_chunks=60,
    )

    extract = extractive_answer(
        "What is MCAS activation from a single AOA sensor?",
        select_passages([after, before]),
        CitationNumbering(),
        VectorCache(embedder),
    )

    quoted = [c.text for c in claims(extract.text)]
    assert not any(s.startswith("MCAS activation as a result") for s in quoted), extract.text
    assert any(s.startswith("This is in contrast to the original MCAS design") for s in quoted), extract.text


def test_a_pdf_line_starting_in_small_letters_is_no_heading_and_its_sentence_goes_on() -> None:
    # Chunk 31 of the federal register fixture, as the PDF loader gives its narrow column.
    text = (
        "If the difference between the AOA\nsensor inputs is above a calculated\nthreshold, the FCC "
        "would disable the\nspeed trim system (STS), including its\nMCAS function, for the remainder of\n"
        "that flight, and provide a corresponding\nindication of such deactivation on the\nflight deck.\n"
        "Boots Self-Locking Nut\nThe Boots self-locking nut is of one piece."
    )

    assert PassageSentences.of(text).sentences == (
        "If the difference between the AOA sensor inputs is above a calculated threshold, the FCC would "
        "disable the speed trim system (STS), including its MCAS function, for the remainder of that "
        "flight, and provide a corresponding indication of such deactivation on the flight deck.",
        "Boots Self-Locking Nut",
        "The Boots self-locking nut is of one piece.",
    )


def test_a_pipe_escaped_in_a_cell_is_the_cells_own_when_a_row_is_read_under_its_headers() -> None:
    # The loaders write a pipe inside a cell as "\|"; split on it, the row had a cell too many and was
    # left unread, so it could not be quoted or cited under its headers.
    rows = ["| Setting | Values |", "| --- | --- |", "| CITELINE_FUSION | rrf \\| weighted \\| dbsf |"]
    assert readable_rows(rows)[2] == "Setting: CITELINE_FUSION; Values: rrf | weighted | dbsf."


def test_a_citation_follows_the_quotation_or_bracket_that_closes_its_sentence(embedder: Embedder) -> None:
    # Put before the sentence's last full stop or question mark, the marker fell inside the quotation
    # the sentence ends with: '("Is it safe to run the pump dry [1]?")' misquotes the source.
    cases = {
        'Most support calls about the CP-40 pump ask one thing ("Is it safe to run the pump dry?")': (
            'Most support calls about the CP-40 pump ask one thing ("Is it safe to run the pump dry?") [1]'
        ),
        'The first rule of the CP-40 pump manual reads "Never run the pump dry."': (
            'The first rule of the CP-40 pump manual reads "Never run the pump dry." [1]'
        ),
        "(Never run the CP-40 pump dry, not even for a few seconds.)": (
            "(Never run the CP-40 pump dry, not even for a few seconds.) [1]"
        ),
        # A bracket the sentence closes before its own full stop keeps the marker before the stop.
        "Never run the CP-40 pump dry (not even for a few seconds).": (
            "Never run the CP-40 pump dry (not even for a few seconds) [1]."
        ),
    }
    for text, expected in cases.items():
        extract = extractive_answer(
            "Is it safe to run the CP-40 pump dry?",
            select_passages([make_hit(1, text)]),
            CitationNumbering(),
            VectorCache(embedder),
        )

        assert extract.text == expected
        [claim] = claims(extract.text)
        assert claim.numbers == (1,) and claim.text in normalise(text)


_ERROR_TABLE = (
    "## 2. Error codes\n\n| Code | Meaning | Action |\n|---|---|---|\n"
    "| E4021 | Overheating: heat sink temperature above 95 °C | Check fan 5520-1100-07 and thermal pad |\n"
    "| E4022 | Fan tachometer signal missing | Replace cooling fan assembly 5520-1100-07 |\n"
    "| E5100 | Power supply undervoltage on 12 V rail | Measure TP3; replace PSU if below 11.4 V |\n"
    "| E5101 | Power supply overvoltage | Replace PSU |"
)
_NO_POWER = (
    "### 3.3 No power\n\nWhen the display stays dark and E5100 is logged, check the 12 V rail at TP3. "
    "Replace the fuse F2 before the supply. Code E4022 is logged when the fan stops."
)


def test_a_lookup_of_a_code_quotes_the_sentences_that_write_it_not_the_rows_around_it(
    embedder: Embedder,
) -> None:
    # A repair trial: "What does E5100 mean?" quoted the E4021, E5100 and E5101 rows, E4021's first.
    passages = select_passages([make_hit(1, _ERROR_TABLE), make_hit(2, _NO_POWER, page=2)])

    for question in ("What does E5100 mean?", "E5100", "error code E5100"):
        extract = extractive_answer(question, passages, CitationNumbering(), VectorCache(embedder))

        quoted = [c.text for c in claims(extract.text)]
        assert quoted[0].startswith("Code: E5100; Meaning: Power supply undervoltage"), question
        assert all("E5100" in q or q.startswith("Replace the fuse F2") for q in quoted), quoted
        assert not any(code in extract.text for code in ("E4021", "E4022", "E5101")), quoted
    # What follows a sentence that writes it goes on about it, up to another code of its kind: the
    # fuse F2 (another kind of code) is E5100's; the next sentence (E4022) is not.
    followed = extractive_answer(
        "What does E5100 mean?", passages[1:], CitationNumbering(), VectorCache(embedder), max_sentences=5
    )
    assert "Replace the fuse F2" in followed.text
    assert "E4022" not in followed.text


def test_a_question_in_words_or_about_a_code_no_passage_writes_is_answered_from_the_best_sentences(
    embedder: Embedder,
) -> None:
    passages = select_passages([make_hit(1, _ERROR_TABLE), make_hit(2, _NO_POWER, page=2)])

    # A question in words: every row may answer ("overheating" is E4021's).
    worded = extractive_answer(
        "Which fault is overheating?", passages, CitationNumbering(), VectorCache(embedder)
    )
    assert "E4021" in worded.text
    # A code no passage writes: what is there is quoted rather than nothing.
    missing = extractive_answer("What does E9999 mean?", passages, CitationNumbering(), VectorCache(embedder))
    assert missing.text
