"""The splitter: pages in, chunks with exact page offsets out."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from citeline.errors import InvalidRequestError
from citeline.load import load
from citeline.split import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    rebuild_page_text,
    sentence_ends,
    split,
)
from citeline.types import ChunkDraft, Page, Section
from tests.conftest import PDFS


def texts(pages: list[Page], *, chunk_size: int, chunk_overlap: int = 0) -> list[str]:
    return [chunk.text for chunk in split(pages, chunk_size=chunk_size, chunk_overlap=chunk_overlap)]


def test_chunks_know_their_page_and_exact_offsets_across_pages() -> None:
    pages = [Page(1, "Alpha beta.\n\nGamma delta epsilon.\n"), Page(2, "\n  Omega.  ")]

    chunks = list(split(pages, chunk_size=20, chunk_overlap=0))

    assert chunks == [
        ChunkDraft(index=0, text="Alpha beta.", page=1, start=0, end=11),
        ChunkDraft(index=1, text="Gamma delta epsilon.", page=1, start=13, end=33),
        ChunkDraft(index=2, text="Omega.", page=2, start=3, end=9),
    ]


def test_a_page_that_fits_is_one_chunk_without_its_surrounding_whitespace() -> None:
    page = Page(7, "\n\n  One short page.\n\nWith two paragraphs.\t\n")

    (chunk,) = split([page], chunk_size=100, chunk_overlap=10)

    assert (chunk.page, chunk.start, chunk.end) == (7, 4, 41)
    assert chunk.text == "One short page.\n\nWith two paragraphs."


def test_indexes_run_on_across_pages_and_blank_pages_yield_nothing() -> None:
    pages = [Page(1, "one two three four"), Page(2, " \n\t\n "), Page(3, ""), Page(4, "five six seven")]

    chunks = list(split(pages, chunk_size=9, chunk_overlap=0))

    assert [chunk.index for chunk in chunks] == list(range(len(chunks)))
    assert [(chunk.page, chunk.text) for chunk in chunks] == [
        (1, "one two"),
        (1, "three"),
        (1, "four"),
        (4, "five six"),
        (4, "seven"),
    ]


def test_a_paragraph_break_is_preferred_to_a_sentence_end() -> None:
    # Cutting at sentences would fill the first chunk with "...\n\nFive six." instead.
    page = Page(1, "One two. Three four.\n\nFive six. Seven eight.")

    assert texts([page], chunk_size=40) == ["One two. Three four.", "Five six. Seven eight."]


def test_a_line_break_is_preferred_to_a_sentence_end() -> None:
    page = Page(1, "Aa. Bb.\nCc. Dd. Ee.")

    assert texts([page], chunk_size=15) == ["Aa. Bb.", "Cc. Dd. Ee."]


def test_a_line_that_only_wraps_a_sentence_is_cut_at_the_sentence_end_instead() -> None:
    # PDF columns and hard-wrapped Markdown break prose mid-sentence. Cut at the line break, the first
    # chunk ended "... in the same direction as a" and the second began "force ...".
    page = Page(
        1,
        "The Boots self-locking nut is of one piece, all-metal\n"
        "construction. The spring exerts a constant force in\n"
        "the same direction as a force that would tighten it.",
    )

    assert texts([page], chunk_size=110) == [
        "The Boots self-locking nut is of one piece, all-metal\nconstruction.",
        "The spring exerts a constant force in\nthe same direction as a force that would tighten it.",
    ]


def test_rows_headings_list_items_and_short_lines_still_end_at_their_line_break() -> None:
    # Only a long line ending in a word, a comma or a hyphen, followed by a small letter, is a wrap.
    rows = Page(1, "Model HX-4000 maximum pressure sixteen bar\nModel HX-5000 maximum pressure twenty bar")
    items = Page(1, "- the first item of the list, in words\n- the second item of the list, in words")
    code = Page(1, "import os\nimport sys\nimport json\nprint(os.getcwd())")
    colon = Page(1, "The parts of the nut are listed as follows:\nthe case, the core and the key of it.")

    assert texts([rows], chunk_size=50) == rows.text.split("\n")
    assert texts([items], chunk_size=45) == items.text.split("\n")
    assert texts([code], chunk_size=30) == ["import os\nimport sys", "import json\nprint(os.getcwd())"]
    assert texts([colon], chunk_size=45) == colon.text.split("\n")


def test_real_hard_wrapped_pdf_prose_is_chunked_at_sentence_ends() -> None:
    [page] = load(PDFS / "manual_faa_amt_handbook_sample.pdf").pages
    chunks = list(split([page], chunk_size=DEFAULT_CHUNK_SIZE, chunk_overlap=DEFAULT_CHUNK_OVERLAP))

    ends = set(sentence_ends(page.text))
    # Cut at line breaks, 1 of the 6 chunks ended a sentence; now most do, the last one at the page's end.
    assert sum(chunk.end in ends or chunk.end == len(page.text.rstrip()) for chunk in chunks) >= 4


def test_a_sentence_end_is_preferred_to_a_space() -> None:
    # Cutting at spaces would fill the first chunk with "One two three. Four five".
    page = Page(1, "One two three. Four five six seven.")

    assert texts([page], chunk_size=25) == ["One two three.", "Four five six seven."]


def test_sentences_end_at_question_and_exclamation_marks_and_after_closing_quotes() -> None:
    page = Page(1, 'Is it so? Yes! He said "no." Then left.')

    assert texts([page], chunk_size=13) == ["Is it so?", "Yes!", 'He said "no."', "Then left."]


def test_a_space_is_preferred_to_cutting_inside_a_word() -> None:
    assert texts([Page(1, "alpha beta gamma")], chunk_size=11) == ["alpha beta", "gamma"]


def test_text_without_whitespace_is_cut_into_characters() -> None:
    assert texts([Page(1, "abcdefghij")], chunk_size=4) == ["abcd", "efgh", "ij"]


def test_a_sentence_too_long_for_a_chunk_is_cut_at_spaces_and_merged_with_its_neighbours() -> None:
    page = Page(1, "Short one. This sentence is far too long to fit. Tail.")

    assert texts([page], chunk_size=20) == [
        "Short one. This",
        "sentence is far too",
        "long to fit. Tail.",
    ]


def test_small_pieces_are_merged_greedily_keeping_the_text_between_them() -> None:
    page = Page(1, "One.\n\nTwo.\n\nThree.\n\nFour.")

    assert texts([page], chunk_size=16) == ["One.\n\nTwo.", "Three.\n\nFour."]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("See e.g.", " the appendix for details."),
        ("That is, i.e.", " the same result again."),
        ("As shown in Fig.", " 3 the value rises."),
        ("Smith et al.", " reported it first."),
        ("Dr.", " Jones measured it twice."),
        ("The ratio was 3.", "5 on average."),
        ("Made in the U.S.", " by the company."),
        ("Written by J.", " R. R. Tolkien."),
        ("Nuts range in size from No.", " 6 up to 1/4 inch."),
        ("As Art.", " 5 of the treaty says."),
    ],
)
def test_abbreviations_initials_and_decimals_do_not_end_a_sentence(before: str, after: str) -> None:
    # Sized so that a sentence end after ``before`` would merge ``before`` into the first chunk.
    opening = "Opening words here."
    sentence = before + after
    size = max(len(sentence), len(opening) + 1 + len(before))

    assert texts([Page(1, f"{opening} {sentence}")], chunk_size=size) == [opening, sentence]


def test_no_ends_a_sentence_unless_a_number_follows_it() -> None:
    text = "Is the valve open? The answer is no. Then close it. Use bolts No. 6 to No. 8 here."
    ends = list(sentence_ends(text + " "))

    assert [text[a:b].strip() for a, b in zip([0, *ends], ends, strict=False)] == [
        "Is the valve open?",
        "The answer is no.",
        "Then close it.",
        "Use bolts No. 6 to No. 8 here.",
    ]


def test_each_chunk_reaches_back_by_the_overlap_to_a_word_start() -> None:
    page = Page(1, "aaa bbb ccc ddd eee fff ggg hhh")

    chunks = list(split([page], chunk_size=15, chunk_overlap=7))

    assert [chunk.text for chunk in chunks] == ["aaa bbb ccc ddd", "ccc ddd eee fff", "eee fff ggg hhh"]
    assert [chunk.start for chunk in chunks] == [0, 8, 16]


def test_the_overlap_snaps_forward_rather_than_cutting_a_word() -> None:
    # Seven characters back from "ddd"'s end is the middle of "ccc": the overlap starts at "ddd".
    page = Page(1, "aaa bbb ccc ddd eee fff ggg hhh")

    assert texts([page], chunk_size=15, chunk_overlap=6) == [
        "aaa bbb ccc ddd",
        "ddd eee fff ggg",
        "ggg hhh",
    ]


def test_the_overlap_starts_at_a_line_start_where_one_is_in_reach() -> None:
    # Rows of a table, lines of a PDF: an overlap snapped only to a word start began mid-row, a row's
    # tail ("0 0 0 42,271") read as a row of its own. A line (or paragraph, or sentence) starting
    # within the overlap is where the chunk starts, as the splitter's own cuts prefer them.
    page = Page(1, "id apples pears\nrow one 1 2\nrow two 3 4\nrow three 5 6")

    assert texts([page], chunk_size=27, chunk_overlap=14) == [
        "id apples pears\nrow one 1 2",
        "row one 1 2\nrow two 3 4",
        "row two 3 4\nrow three 5 6",
    ]
    # A sentence start is preferred to a word start, a paragraph start to both.
    prose = Page(1, "Alpha beta gamma. Delta epsilon zeta eta theta.")
    assert texts([prose], chunk_size=30, chunk_overlap=20)[1] == "Delta epsilon zeta eta theta."


def test_a_markdown_table_row_too_long_for_the_overlap_is_not_entered_mid_row() -> None:
    # Half a row ("| rotated table | FBI ... |") is cells under no header, in no row: the chunk starts
    # at the next whole row instead, with no overlap.
    rows = [f"| row{i} | {'cell text ' * 6}| {'more words ' * 5}|" for i in range(4)]
    page = Page(1, "| name | a | b |\n| --- | --- | --- |\n" + "\n".join(rows))

    chunks = texts([page], chunk_size=200, chunk_overlap=60)

    assert len(chunks) > 1
    lines = set(page.text.splitlines())
    assert all(set(chunk.splitlines()) <= lines for chunk in chunks), chunks


def test_the_overlap_of_a_real_pdf_table_repeats_whole_rows() -> None:
    [page] = load(PDFS / "odd_nics_rotated_table.pdf").pages
    chunks = list(split([page], chunk_size=DEFAULT_CHUNK_SIZE, chunk_overlap=DEFAULT_CHUNK_OVERLAP))

    assert len(chunks) > 3
    for chunk in chunks:
        # Every row is whole; only a line too long for the overlap to reach its start (the table's
        # disclaimer) is entered elsewhere.
        line_start = page.text.rfind("\n", 0, chunk.start) + 1
        assert chunk.start == line_start or chunk.start - line_start > DEFAULT_CHUNK_OVERLAP


def test_the_overlap_is_empty_when_no_whole_word_fits_in_it() -> None:
    page = Page(1, "extraordinary circumstances prevail")

    assert texts([page], chunk_size=27, chunk_overlap=5) == ["extraordinary circumstances", "prevail"]


def test_the_overlap_shrinks_so_that_a_piece_that_fits_stays_whole() -> None:
    page = Page(1, "aaaa bbbb\n\ncccc dddd")

    assert texts([page], chunk_size=9, chunk_overlap=4) == ["aaaa bbbb", "cccc dddd"]


def test_text_without_whitespace_overlaps_by_characters() -> None:
    assert texts([Page(1, "abcdefghij")], chunk_size=4, chunk_overlap=1) == ["abc", "cdef", "fghi", "ij"]


def test_chunks_never_overlap_into_the_previous_page() -> None:
    pages = [Page(1, "one two three"), Page(2, "four five six")]

    chunks = list(split(pages, chunk_size=9, chunk_overlap=8))

    assert [(chunk.page, chunk.text) for chunk in chunks] == [
        (1, "one two"),
        (1, "two three"),
        (2, "four five"),
        (2, "five six"),
    ]


def test_the_section_in_force_at_a_chunks_start_is_carried_across_pages() -> None:
    pages = [
        Page(1, "Preface.\n\nIntroduction text.", sections=(Section(10, "Introduction"),)),
        Page(2, "Still introducing.\n\nMethods text.", sections=(Section(20, "Methods"),)),
        Page(3, "Last words."),
    ]

    chunks = list(split(pages, chunk_size=18, chunk_overlap=0))

    assert [(chunk.page, chunk.text, chunk.section) for chunk in chunks] == [
        (1, "Preface.", None),
        (1, "Introduction text.", "Introduction"),
        (2, "Still introducing.", "Introduction"),
        (2, "Methods text.", "Methods"),
        (3, "Last words.", "Methods"),
    ]


def test_a_chunk_takes_the_last_section_started_at_or_before_its_start() -> None:
    text = "Intro.\n# A\nAlpha.\n# B\nBeta."
    page = Page(1, text, sections=(Section(text.index("# A"), "A"), Section(text.index("# B"), "B")))

    assert [(c.text, c.section) for c in split([page], chunk_size=100, chunk_overlap=0)] == [
        ("Intro.", None),
        ("# A\nAlpha.", "A"),
        ("# B\nBeta.", "B"),
    ]


def test_no_chunk_runs_on_from_one_section_into_the_next() -> None:
    # A chunk holding the end of one section and the start of the next was cited under the first
    # heading for text under the second; each section is now chunked on its own, with no overlap
    # reaching back over its heading.
    first = "# Chunk size\n\n" + "The splitter cuts pages into chunks of at most the chunk size. " * 3
    second = "## Why 800\n\n" + "The model reads at most 256 tokens of a chunk. " * 3
    page = Page(
        1, first + "\n\n" + second, sections=(Section(0, "Chunk size"), Section(len(first) + 2, "Why 800"))
    )

    chunks = list(split([page], chunk_size=800, chunk_overlap=120))

    assert [(c.text, c.section) for c in chunks] == [
        (first.strip(), "Chunk size"),
        (second.strip(), "Why 800"),
    ]


def test_a_heading_with_nothing_under_it_goes_with_the_next_section() -> None:
    text = "# Ingesting\n\n## Folders\n\nA folder is read with everything under it.\n\n## Files\n\nOne file."
    starts = (0, text.index("## Folders"), text.index("## Files"))
    page = Page(
        1,
        text,
        sections=tuple(Section(s, h) for s, h in zip(starts, ("Ingesting", "Folders", "Files"), strict=True)),
    )

    chunks = list(split([page], chunk_size=800, chunk_overlap=120))

    # No chunk of "# Ingesting" alone: it stays with the section it heads, which the chunk is cited under.
    assert [(c.text, c.section) for c in chunks] == [
        (text[: starts[2]].strip(), "Folders"),
        ("## Files\n\nOne file.", "Files"),
    ]
    # Cut finer, the heading's own chunk is still cited under it.
    assert [c.section for c in split([page], chunk_size=20, chunk_overlap=0)][:2] == ["Ingesting", "Folders"]


def test_a_chunk_is_cited_under_the_heading_its_text_is_under(tmp_path: Path) -> None:
    # A user trial read the runbook's first chunk, "# Postgres failover runbook\n\n## When to use ...",
    # cited under "When to use" as a heading it holds further on. Its text is under "When to use": the
    # title heads nothing of its own (it is the document's title, shown as such). A chunk that starts
    # inside a section, in the overlap of the one before, is cited under that section's heading.
    runbook = tmp_path / "runbook.md"
    runbook.write_text(
        "# Postgres failover runbook\n\n## When to use\n"
        "Use this runbook when the primary has been unreachable for more than 90 seconds.\n\n"
        "## Steps\n1. Check replication lag on the standby.\n2. Promote the standby.\n"
    )

    def cited(path: Path, size: int, overlap: int) -> list[tuple[str, str | None]]:
        chunks = split(list(load(path).pages), chunk_size=size, chunk_overlap=overlap)
        return [(c.text.partition("\n")[0], c.section) for c in chunks]

    assert cited(runbook, 800, 120) == [
        ("# Postgres failover runbook", "When to use"),
        ("## Steps", "Steps"),
    ]
    assert cited(runbook, 60, 30)[1:] == [
        ("Use this runbook when the primary has been unreachable for", "When to use"),
        ("has been unreachable for more than 90 seconds.", "When to use"),
        ("## Steps", "Steps"),
        ("lag on the standby.", "Steps"),
    ]


def test_a_page_rebuilt_from_its_chunks_keeps_its_line_and_paragraph_breaks(tmp_path: Path) -> None:
    # A user trial: the page text rebuilt for the viewer read "than 90 seconds.  ## Steps", the blank
    # line before each heading (where no chunk reaches) come back as two spaces.
    note = tmp_path / "runbook.md"
    note.write_text(
        "# Postgres failover runbook\n\n## When to use\n"
        "Use this runbook when the primary has been unreachable for more than 90 seconds.\n\n"
        "## Steps\n1. Check replication lag on the standby.\n2. Promote the standby.\n\n"
        "## Data stores\nOrders live on the prod-eu cluster.\n"
        "## Contacts\n- The on-call DBA\n  (pager first)\n"
    )
    (page,) = load(note).pages

    for size, overlap in ((800, 120), (60, 30)):
        chunks = list(split([page], chunk_size=size, chunk_overlap=overlap))
        assert rebuild_page_text((c.start, c.end, c.text) for c in chunks) == page.text


def test_each_record_becomes_exactly_one_chunk_and_text_outside_records_is_ignored() -> None:
    text = "id,name\n1,alpha\n 2,beta \n3,\n"
    page = Page(1, text, records=((8, 15), (16, 24), (25, 28)))

    chunks = list(split([page], chunk_size=100, chunk_overlap=10))

    assert [(chunk.text, chunk.start, chunk.end) for chunk in chunks] == [
        ("1,alpha", 8, 15),
        ("2,beta", 17, 23),
        ("3,", 25, 27),
    ]


def test_a_record_chunk_holds_the_row_of_the_file_its_record_came_from() -> None:
    # A CSV's record is cited by its row in the file (load/table.py); a record longer than a chunk
    # gives every piece the same row. Text that is not records has no rows.
    text = "a: 1\nb: row two three four"
    page = Page(1, text, records=((0, 4), (5, 26)), record_rows=(2, 7))

    chunks = list(split([page], chunk_size=10, chunk_overlap=0))

    assert [(chunk.text, chunk.rows) for chunk in chunks] == [
        ("a: 1", (2, 2)),
        ("b: row two", (7, 7)),
        ("three four", (7, 7)),
    ]
    assert all(c.rows is None for c in split([Page(1, text)], chunk_size=10, chunk_overlap=0))
    assert all(
        c.rows is None for c in split([Page(1, text, records=((0, 4),))], chunk_size=10, chunk_overlap=0)
    )


def test_a_record_longer_than_the_chunk_size_is_split_within_its_span() -> None:
    text = "before\nrow one two three four\nafter"
    page = Page(1, text, records=((7, 29),))

    chunks = list(split([page], chunk_size=10, chunk_overlap=4))

    assert [chunk.text for chunk in chunks] == ["row one", "one two", "two three", "four"]
    assert all(chunk.start >= 7 and chunk.end <= 29 for chunk in chunks)


def test_blank_records_and_pages_with_no_records_yield_no_chunks() -> None:
    pages = [Page(1, "a,b\n   \n", records=((4, 7),)), Page(2, "ignored", records=())]

    assert list(split(pages, chunk_size=10, chunk_overlap=0)) == []


def test_a_record_outside_its_page_is_reported() -> None:
    page = Page(3, "a,b", records=((0, 9),))

    with pytest.raises(ValueError, match=r"page 3: record \(0, 9\)"):
        list(split([page], chunk_size=10, chunk_overlap=0))


def test_pages_are_consumed_one_at_a_time() -> None:
    consumed: list[int] = []

    def pages() -> Iterator[Page]:
        for number in range(1, 4):
            consumed.append(number)
            yield Page(number, f"Page {number} text.")

    chunks = split(pages(), chunk_size=100, chunk_overlap=0)

    assert consumed == []
    assert next(chunks).page == 1
    assert consumed == [1]


@pytest.mark.parametrize(
    ("chunk_size", "chunk_overlap", "message"),
    [
        (0, 0, "chunk_size must be at least 1 character, got 0"),
        (-10, 0, "chunk_size must be at least 1 character, got -10"),
        (100, -1, r"chunk_overlap must be at least 0 and less than chunk_size \(100\), got -1"),
        (100, 100, r"chunk_overlap must be at least 0 and less than chunk_size \(100\), got 100"),
        (100, 250, r"chunk_overlap must be at least 0 and less than chunk_size \(100\), got 250"),
    ],
)
def test_out_of_range_sizes_are_refused_before_any_page_is_read(
    chunk_size: int, chunk_overlap: int, message: str
) -> None:
    def pages() -> Iterator[Page]:
        pytest.fail("a page was read")
        yield Page(1, "never")

    with pytest.raises(InvalidRequestError, match=message):
        split(pages(), chunk_size=chunk_size, chunk_overlap=chunk_overlap)


def test_the_defaults_are_a_valid_request() -> None:
    assert 0 <= DEFAULT_CHUNK_OVERLAP < DEFAULT_CHUNK_SIZE
    page = Page(1, "word " * 1000)
    chunks = list(split([page], chunk_size=DEFAULT_CHUNK_SIZE, chunk_overlap=DEFAULT_CHUNK_OVERLAP))
    assert max(len(chunk.text) for chunk in chunks) <= DEFAULT_CHUNK_SIZE


# Property tests: random text made of the characters and tokens the rules care about.

_TOKENS = [
    "a", "word", "Longerword", "e.g.", "Fig.", "Dr.", "al.", "3.5", "U.S.", "x" * 30, "\u4f60\u597d",
    " ", "  ", "\t", "\u00a0", "\n", "\n\n", "\n \n", ".", "?", "!", '."', "\u3002",
]  # fmt: skip
_page_text = st.one_of(
    st.lists(st.sampled_from(_TOKENS), max_size=80).map("".join),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=200),
)


@st.composite
def _sizes(draw: st.DrawFn) -> tuple[int, int]:
    chunk_size = draw(st.integers(min_value=1, max_value=60))
    return chunk_size, draw(st.integers(min_value=0, max_value=chunk_size - 1))


def _assert_chunk_invariants(
    pages: list[Page], chunks: list[ChunkDraft], chunk_size: int, chunk_overlap: int
) -> None:
    by_number = {page.number: page for page in pages}
    assert [chunk.index for chunk in chunks] == list(range(len(chunks)))
    assert [chunk.page for chunk in chunks] == sorted(chunk.page for chunk in chunks)
    for chunk in chunks:
        text = by_number[chunk.page].text
        assert text[chunk.start : chunk.end] == chunk.text
        assert 1 <= len(chunk.text) <= chunk_size
        assert chunk.text == chunk.text.strip()
    for before, after in pairwise(chunks):
        if before.page != after.page or after.start >= before.end:
            continue
        assert before.start < after.start
        assert before.end < after.end
        assert before.end - after.start <= chunk_overlap
        text = by_number[after.page].text
        if not text[after.start - 1].isspace() and after.start not in set(sentence_ends(text)):
            # Only a word the previous chunk already cut may be cut again by the overlap (a sentence
            # after a CJK full stop starts with no space before it).
            assert not text[before.end - 1].isspace()
            assert not text[before.end].isspace()
            assert not any(char.isspace() for char in text[after.start : before.end])


def _uncovered(text: str, spans: list[tuple[int, int]], chunks: list[ChunkDraft]) -> list[int]:
    covered = {position for chunk in chunks for position in range(chunk.start, chunk.end)}
    return [
        position
        for start, end in spans
        for position in range(start, end)
        if not text[position].isspace() and position not in covered
    ]


@settings(max_examples=400)
@given(page_texts=st.lists(_page_text, min_size=1, max_size=4), sizes=_sizes())
def test_any_text_splits_into_bounded_exact_chunks_covering_every_character(
    page_texts: list[str], sizes: tuple[int, int]
) -> None:
    chunk_size, chunk_overlap = sizes
    pages = [Page(number, text) for number, text in enumerate(page_texts, start=1)]

    chunks = list(split(pages, chunk_size=chunk_size, chunk_overlap=chunk_overlap))

    _assert_chunk_invariants(pages, chunks, chunk_size, chunk_overlap)
    for page in pages:
        on_page = [chunk for chunk in chunks if chunk.page == page.number]
        assert _uncovered(page.text, [(0, len(page.text))], on_page) == []


@st.composite
def _page_with_records(draw: st.DrawFn) -> Page:
    text = draw(_page_text)
    bounds = sorted(draw(st.lists(st.integers(0, len(text)), max_size=10)))
    return Page(1, text, records=tuple(zip(bounds[::2], bounds[1::2], strict=False)))


@settings(max_examples=300)
@given(page=_page_with_records(), sizes=_sizes())
def test_records_split_into_chunks_within_each_record_covering_it(page: Page, sizes: tuple[int, int]) -> None:
    chunk_size, chunk_overlap = sizes
    assert page.records is not None

    chunks = list(split([page], chunk_size=chunk_size, chunk_overlap=chunk_overlap))

    _assert_chunk_invariants([page], chunks, chunk_size, chunk_overlap)
    for start, end in page.records:
        inside = [chunk for chunk in chunks if start <= chunk.start and chunk.end <= end]
        assert _uncovered(page.text, [(start, end)], inside) == []
        record = page.text[start:end].strip()
        if record and len(record) <= chunk_size:
            assert [chunk.text for chunk in inside] == [record]
    assert all(any(s <= c.start and c.end <= e for s, e in page.records) for c in chunks)


@settings(max_examples=300)
@given(page_text=_page_text, sizes=_sizes())
def test_a_rebuilt_page_holds_every_chunk_at_its_offsets(page_text: str, sizes: tuple[int, int]) -> None:
    chunks = list(split([Page(1, page_text)], chunk_size=sizes[0], chunk_overlap=sizes[1]))

    rebuilt = rebuild_page_text((c.start, c.end, c.text) for c in chunks)

    assert len(rebuilt) == max((c.end for c in chunks), default=0)
    assert all(rebuilt[c.start : c.end] == c.text for c in chunks)
    assert all(char.isspace() for char, was in zip(rebuilt, page_text, strict=False) if was.isspace())


def test_the_splitter_defaults_are_the_settings_defaults() -> None:
    from citeline.settings import Settings

    fields = Settings.model_fields
    assert (
        fields["chunk_size"].default,
        fields["chunk_overlap"].default,
    ) == (DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP)


def _table_page(rows: int) -> Page:
    body = "\n".join(
        f"| M{i} | {i * 5} N·m | {'torque for the bolts of part ' * 2}{i} |" for i in range(rows)
    )
    return Page(
        1, f"Torques.\n\n| Bolt | Torque | Where |\n| :--- | ---: | --- |\n{body}\n\nSee also the manual."
    )


def test_a_chunk_that_continues_a_markdown_table_is_read_with_its_header_row() -> None:
    chunks = list(split([_table_page(20)], chunk_size=300, chunk_overlap=50))

    assert len(chunks) > 3
    first, *rest = chunks
    # The first chunk holds the header itself; every later one starts among the rows and is read with
    # the header, which names its cells, while its text stays exactly its span of the page.
    assert "| Bolt | Torque | Where |" in first.text and first.context is None
    assert all(c.context == "| Bolt | Torque | Where |" for c in rest), [c.context for c in rest]
    assert all(c.text.startswith("| M") for c in rest)


def test_text_after_a_table_and_tables_that_are_not_tables_have_no_context() -> None:
    prose = "After the table, the manual goes on in prose about other things entirely. " * 4
    page = Page(1, _table_page(8).text + "\n\n" + prose)
    [*_, last] = split([page], chunk_size=300, chunk_overlap=50)
    assert last.text == prose.strip() and last.context is None
    # A pipe line over a line of dashes without a pipe is a heading underline, not a table.
    heading = Page(1, "Inputs | outputs\n----------\n" + "| a | b |\n" * 40)
    assert all(c.context is None for c in split([heading], chunk_size=100, chunk_overlap=20))
    # CSV records carry their column names in every row already.
    [record] = split(
        [Page(1, "| a | b |\n| - | - |\n| 1 | 2 |", records=((20, 29),))], chunk_size=50, chunk_overlap=0
    )
    assert record.context is None


def test_a_long_single_line_splits_as_fast_at_its_end_as_at_its_start() -> None:
    # Each chunk's overlap looked for its line's start back to the start of the text: on one line of
    # 3 MB cut every 30 characters that scanned 1.5 MB a chunk (5 to 10 s here; 219 s for 50 MB at the
    # default size), where only the text since the chunk before needs a look.
    text = "lorem ipsum " * 250_000
    chunks = list(split([Page(number=1, text=text)], chunk_size=50, chunk_overlap=20))
    assert len(chunks) == 100_000
    for before, after in pairwise(chunks):
        assert before.start < after.start < before.end  # each overlaps the one before it
        assert after.text.startswith(("lorem ", "ipsum "))


def test_a_chunk_starting_in_a_table_row_after_a_long_line_still_has_no_half_row() -> None:
    # Where each line starts is remembered from one chunk to the next: a long line before the table
    # does not make a chunk's overlap start in half a row.
    rows = "".join(f"| pump {i} | relief valve opens at {i} bar |\n" for i in range(40))
    text = "lorem ipsum. " * 400 + "\n\n| Pump | Setting |\n| --- | --- |\n" + rows
    chunks = list(split([Page(number=1, text=text)], chunk_size=200, chunk_overlap=60))
    in_table = [c for c in chunks if c.start > text.index("| Pump")]
    assert in_table and all(c.text.startswith("| ") for c in in_table)
