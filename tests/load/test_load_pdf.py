"""PDF loading on the real fixtures: pages, reading order, failures and memory."""

from __future__ import annotations

import gc
import io
import re
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pypdf
import pytest

from citeline.errors import LoadError
from citeline.load import load
from citeline.load.pdf import (
    NO_TEXT_LAYER,
    RUNNING_WINDOW,
    running_lines,
    without_line_numbers,
    without_running_lines,
)
from citeline.split import split
from citeline.store.analyzer import Analyzer
from tests.load.conftest import Z_AS_MATH_X, _pdf_bytes, pdf_file


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_federal_register_has_fifteen_numbered_pages(pdf_dir: Path) -> None:
    source = load(pdf_dir / "multicol_federal_register_2020-17221.pdf")
    pages = list(source.pages)
    assert source.content_type == "application/pdf"
    assert [page.number for page in pages] == list(range(1, 16))
    assert source.metadata["pages"] == "15"
    # Page 8 is a page of figures: its only text was its running head and feet (see below).
    assert [page.number for page in pages if not page.text] == [8]
    assert "Investigation of the accident has been completed by the Indonesian authorities" in _squash(
        pages[1].text
    )


def test_running_heads_and_feet_are_no_part_of_a_page_s_text(pdf_dir: Path) -> None:
    pages = list(load(pdf_dir / "multicol_federal_register_2020-17221.pdf").pages)
    text = "\n".join(page.text for page in pages)
    # The journal head (its page number before or after it), the printer's line and the operator's
    # line were on every page; none is left, even where a figure's code was run into the last.
    for running in ("Federal Register / Vol. 85, No. 152", "VerDate Sep<11>2014", "jbell on DSKJLSW7X2PROD"):
        assert running not in text, running
    # The first page's own text, which speaks of the Federal Register, is kept.
    assert pages[0].text.startswith("This section of the FEDERAL REGISTER")
    assert pages[1].text.startswith("^1 Preliminary KNKT.18.10.35.04 Aircraft")


_BODIES = [
    "Prime the pump before first use.\nFill the casing with water.\nOpen the vent plug.",
    "Drain the volute before winter.\nFrost cracks a full casing.\nClose the drain plug after.",
    "Grease the bearings every 500 hours.\nCheck the seal for drips.\nClean the strainer.",
    "Replace the impeller when worn.\nTorque the nut to 40 Nm.\nTest the pump dry for no longer than 5 s.",
]


@pytest.mark.parametrize(
    ("heads", "feet", "kept"),
    [
        # A head with its page number on alternate sides, and a foot: both go, the body stays.
        ([f"{n} Pump Manual XR-200" if n % 2 else f"Pump Manual XR-200 {n}" for n in range(10, 14)],
         ["Rev. 3, 2024"] * 4, True),
        # A page number alone at the foot goes too.
        ([None] * 4, [str(n) for n in range(1, 5)], True),
        # Three pages at least: two are too few to tell a running line from a repeated one.
        (["Pump Manual"] * 2, [None] * 2, False),
    ],
)  # fmt: skip
def test_lines_at_the_edge_of_most_pages_are_running_lines(
    heads: list[str | None], feet: list[str | None], kept: bool
) -> None:
    pages = [
        "\n".join(line for line in (head, body, foot) if line)
        for head, body, foot in zip(heads, _BODIES, feet, strict=False)
    ]
    running = running_lines(pages)
    cut = [without_running_lines(text, running) for text in pages]
    assert cut == (_BODIES[: len(pages)] if kept else pages)


def test_a_line_repeated_inside_pages_is_text_not_a_running_line() -> None:
    warning = "Warning: isolate the power first."
    pages = [body.replace("\n", f"\n{warning}\n", 1) + "\nSee the next page." for body in _BODIES]
    running = running_lines(pages)
    # Every page ends the same way, so that line goes; the warning inside them stays.
    assert [without_running_lines(text, running) for text in pages] == [
        body.replace("\n", f"\n{warning}\n", 1) for body in _BODIES
    ]


def test_pages_is_a_lazy_iterator(pdf_dir: Path) -> None:
    source = load(pdf_dir / "multicol_latex_pypdf_sample.pdf")
    assert isinstance(source.pages, Iterator)
    assert next(source.pages).number == 1
    assert [page.number for page in source.pages] == [2, 3]


def test_two_column_latex_reads_down_each_column(pdf_dir: Path) -> None:
    first = next(load(pdf_dir / "multicol_latex_pypdf_sample.pdf").pages)
    text = _squash(first.text)
    # Starts at the foot of the left column and ends at the head of the right one.
    assert (
        "Vivamus viverra fermentum felis. Donec nonummy pellentesque ante. Phasellus adipiscing semper elit."
        in text
    )
    # "adip-/iscing" is hyphenated at a line end in the PDF.
    assert "consectetuer adipiscing elit. Ut purus elit, vestibulum ut, placerat ac, adipiscing vitae" in text
    assert text.index("Curabitur dictum gravida mauris") < text.index("Quisque ullamcorper placerat ipsum")


def test_rotated_table_rows_come_out_whole(pdf_dir: Path) -> None:
    # Its rows are Markdown rows (see tests/load/test_pdf_tables.py), each whole in the page's order.
    text = next(load(pdf_dir / "odd_nics_rotated_table.pdf").pages).text
    assert "| State / Territory | Permit | Handgun | Long Gun | *Other | **Multiple | Admin |" in text
    assert "| Florida | 15,907 | 50,796 | 28,981 | 2,268 | 1,957 | 121 | 8 | 9 | 0 | 2,248 | 1,135 |" in text


def test_line_numbers_do_not_split_transcript_sentences(pdf_dir: Path) -> None:
    text = _squash(next(load(pdf_dir / "odd_scotus_transcript_p1.pdf").pages).text)
    assert "The above-entitled matter came on for oral argument before the Supreme Court" in text


def test_a_margin_column_of_line_numbers_is_not_page_text(pdf_dir: Path) -> None:
    # The transcript numbers its 25 lines in the margin, which PDFium reads as one block "1\n2\n...25"
    # before the text: a run of numbers that opened the first chunk and matched every query for "12".
    text = next(load(pdf_dir / "odd_scotus_transcript_p1.pdf").pages).text
    assert text.startswith("Official - Subject to Final Review\nIN THE SUPREME COURT OF THE UNITED STATES")
    assert [line for line in text.splitlines() if line.strip().isdigit()] == ["1"]  # the page number


def test_numbers_that_are_the_texts_own_are_kept() -> None:
    column = "\n".join(str(n) for n in range(1, 13))
    assert without_line_numbers(f"Title\n{column}\nBody text.") == "Title\nBody text."
    assert without_line_numbers(f"Body text.\n{column}") == "Body text."
    # A short run (a table's column), and a run that does not count up by one, are the text's own.
    short = "Rank\n1\n2\n3\n4\n5\nEnd."
    assert without_line_numbers(short) == short
    skipping = "\n".join(str(n) for n in (1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12))
    assert without_line_numbers(skipping) == skipping


def test_title_is_the_metadata_title(pdf_dir: Path) -> None:
    assert load(pdf_dir / "manual_faa_amt_handbook_sample.pdf").title == "AMT General Handbook"


def test_without_a_metadata_title_the_largest_text_on_page_1_is_the_title(pdf_dir: Path) -> None:
    # The LaTeX sample has no metadata title; its title is set at 17.2 points over 10-point body text.
    assert load(pdf_dir / "multicol_latex_pypdf_sample.pdf").title == "Two-Column Document with Lorem Ipsum"


def test_a_title_set_sideways_on_two_lines_is_joined(pdf_dir: Path) -> None:
    # The NICS table is turned a quarter; its title and the month under it are set at 15.1 points (a
    # scaled font). A date line is joined after a colon.
    title = load(pdf_dir / "odd_nics_rotated_table.pdf").title
    assert title == "NICS Firearm Background Checks: November - 2015"


def test_a_masthead_repeated_atop_the_next_pages_is_not_the_title(pdf_dir: Path) -> None:
    # "Proposed Rules" is the largest text on page 1 and runs atop every later page; the page number
    # "47698" is the next largest. Neither is a title, so the file name stays.
    pdf = pdf_dir / "multicol_federal_register_2020-17221.pdf"
    assert load(pdf).title == "multicol_federal_register_2020-17221"


def test_title_falls_back_to_the_stem_when_no_text_stands_out(pdf_dir: Path) -> None:
    # The transcript's metadata title is "10811.exe", and its page is set in one size throughout.
    assert load(pdf_dir / "odd_scotus_transcript_p1.pdf").title == "odd_scotus_transcript_p1"


@pytest.mark.parametrize(
    "metadata_title",
    [
        "",
        "untitled",
        "Untitled-1",
        "Document1",
        "Microsoft Word - report",
        "report.docx",
        "pump_report",
        "Title",
    ],
)
def test_a_placeholder_metadata_title_gives_way_to_the_largest_text(
    tmp_path: Path, metadata_title: str
) -> None:
    content = (
        b"BT /F1 1 Tf 24 0 0 24 20 150 Tm (Pump Care and) Tj ET "
        b"BT /F1 1 Tf 24 0 0 24 20 124 Tm (Maintenance) Tj ET "
        b"BT /F1 10 Tf 20 90 Td (Check the seals every month and the bearings every year.) Tj ET "
        b"BT /F1 10 Tf 20 76 Td (Replace a seal that weeps.) Tj ET "
        b"BT /F1 14 Tf 280 20 Td (3) Tj ET"
    )
    path = tmp_path / "pump_report.pdf"
    path.write_bytes(_pdf_bytes(content, (400, 200), metadata_title or None))
    assert load(path).title == "Pump Care and Maintenance"


def test_a_title_in_small_capitals_is_one_title(tmp_path: Path) -> None:
    # Small capitals: each word's first letter at 24 points, the rest at 18, over 10-point body text.
    content = (
        b"BT /F1 24 Tf 20 150 Td (P) Tj /F1 18 Tf (UMP ) Tj /F1 24 Tf (C) Tj /F1 18 Tf (ARE) Tj ET "
        b"BT /F1 10 Tf 20 90 Td (Check the seals every month and the bearings every year.) Tj ET"
    )
    path = tmp_path / "pump.pdf"
    path.write_bytes(_pdf_bytes(content, (400, 200), None))
    assert load(path).title == "PUMP CARE"


@pytest.mark.parametrize(
    "large",
    [
        b"12",
        b"xii",
        b"August 6, 2020",
        b"Thursday, 6 August 2020",
        b"Abstract",
        b"Page 3 of 9",
        b"Seal " * 41,
    ],
)
def test_a_page_number_date_heading_or_paragraph_set_large_is_not_a_title(
    tmp_path: Path, large: bytes
) -> None:
    body = b"Check the seals every month and the bearings every year, and replace a seal that weeps. " * 3
    content = b"BT /F1 24 Tf 20 150 Td (%s) Tj ET BT /F1 10 Tf 20 90 Td (%s) Tj ET" % (large, body)
    path = tmp_path / "notes.pdf"
    path.write_bytes(_pdf_bytes(content, (3000, 200), None))
    assert load(path).title == "notes"


def test_a_pdf_with_neither_text_nor_image_fails_up_front(tmp_path: Path) -> None:
    writer = pypdf.PdfWriter()
    writer.add_blank_page(612, 792)
    blank = tmp_path / "blank.pdf"
    with blank.open("wb") as fh:
        writer.write(fh)
    with pytest.raises(LoadError) as caught:
        load(blank)
    assert caught.value.reason == NO_TEXT_LAYER == "no text layer (scanned?)"


def test_a_blank_page_between_text_pages_keeps_its_number_and_claims_no_ocr(
    pdf_dir: Path, tmp_path: Path
) -> None:
    sample = pypdf.PdfReader(pdf_dir / "multicol_latex_pypdf_sample.pdf")
    writer = pypdf.PdfWriter()
    writer.add_page(sample.pages[0])
    writer.add_blank_page(612, 792)
    writer.add_page(sample.pages[1])
    path = tmp_path / "gap.pdf"
    with path.open("wb") as fh:
        writer.write(fh)
    source = load(path)
    pages = list(source.pages)
    assert [(p.number, bool(p.text)) for p in pages] == [(1, True), (2, False), (3, True)]
    # No page was read by OCR (a blank page has no image to read), so no OCR key at all.
    assert source.metadata == {"pages": "3"}


def test_a_scanned_pdf_fails_up_front_where_tesseract_is_not_installed_and_says_so(
    pdf_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reason was "no text layer (scanned?)" alone: the administrator knew the file was a scan, not
    # that this machine cannot read scans.
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LoadError) as caught:
        load(pdf_dir / "scanned_docling_ocr_test.pdf")
    assert caught.value.reason == (
        f"{NO_TEXT_LAYER}; Tesseract, which reads scanned pages, is not installed "
        "(make install installs it; Debian: apt-get install tesseract-ocr)"
    )


def test_a_page_drawing_only_a_white_background_is_blank_not_a_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Exporters write a blank page as one white rectangle. Any drawn object sent a page to OCR (a second
    # a page, "ocr_confidence 2=0"), and without Tesseract a PDF of such pages was said to need it.
    path = tmp_path / "blank.pdf"
    path.write_bytes(_pdf_bytes(b"1 1 1 rg 0 0 300 200 re f", (300, 200), None))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LoadError) as caught:
        load(path)
    assert caught.value.reason == NO_TEXT_LAYER


def _encrypted_copy(plain: Path, target: Path, user_password: str) -> Path:
    writer = pypdf.PdfWriter(clone_from=plain)
    writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm="AES-256")
    buffer = io.BytesIO()
    writer.write(buffer)
    target.write_bytes(buffer.getvalue())
    return target


def test_password_protected_pdf_is_refused(make_pdf: Callable[..., Path], tmp_path: Path) -> None:
    locked = _encrypted_copy(make_pdf(), tmp_path / "locked.pdf", user_password="secret")
    with pytest.raises(LoadError, match="encrypted PDF") as caught:
        load(locked)
    assert caught.value.source == str(locked)


def test_pdf_encrypted_without_an_open_password_loads(make_pdf: Callable[..., Path], tmp_path: Path) -> None:
    restricted = _encrypted_copy(
        make_pdf(text="Readable text."), tmp_path / "restricted.pdf", user_password=""
    )
    assert next(load(restricted).pages).text == "Readable text."


def test_truncated_pdf_is_reported_corrupt(pdf_dir: Path, tmp_path: Path) -> None:
    data = (pdf_dir / "multicol_latex_pypdf_sample.pdf").read_bytes()
    truncated = tmp_path / "truncated.pdf"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(LoadError, match="corrupt or truncated PDF"):
        load(truncated)


def test_text_named_pdf_is_not_a_pdf(tmp_path: Path) -> None:
    fake = tmp_path / "fake.pdf"
    fake.write_text("Just a note, saved with the wrong extension.\n")
    with pytest.raises(LoadError) as caught:
        load(fake)
    assert caught.value.reason == "not a PDF file (no %PDF header)"


def test_superscript_digits_after_a_word_are_marked_and_kept_apart_from_it(tmp_path: Path) -> None:
    """A reference marker or exponent set small and raised comes out after a ^, so "pathway12" is never
    one word to the keyword index; a subscript and a model number written at full size stay as they are."""
    content = (
        b"BT /F1 12 Tf 20 150 Td (The pathway) Tj /F1 7 Tf 5 Ts (12) Tj /F1 12 Tf 0 Ts "
        b"( was active in cells,) Tj /F1 7 Tf 5 Ts (3,4) Tj /F1 12 Tf 0 Ts ( and in water, H) Tj "
        b"/F1 7 Tf -3 Ts (2) Tj /F1 12 Tf 0 Ts (O; the X200 pump.) Tj ET"
    )
    path = tmp_path / "marks.pdf"
    path.write_bytes(_pdf_bytes(content, (600, 200), None))
    text = next(load(path).pages).text
    assert text == "The pathway^12 was active in cells,^3,4 and in water, H2O; the X200 pump."
    assert {"pathway", "cell"} <= set(Analyzer().term_counts(text))


def test_a_footnotes_own_raised_number_is_marked_and_kept_apart_from_its_first_word(tmp_path: Path) -> None:
    """A footnote opens with its number set small and raised, "1Preliminary" in PDF text: one word to the
    keyword index, so "preliminary" never matched it. It comes out as "^1 Preliminary"; digits at full
    size before a letter ("3M") stay as they are."""
    content = (
        b"BT /F1 7 Tf 20 150 Td 5 Ts (1) Tj /F1 12 Tf 0 Ts (Preliminary report, dated 2018.) Tj ET "
        b"BT /F1 12 Tf 20 120 Td (3M tape holds the wire.) Tj ET"
    )
    path = tmp_path / "footnote.pdf"
    path.write_bytes(_pdf_bytes(content, (600, 200), None))
    text = next(load(path).pages).text
    assert text == "^1 Preliminary report, dated 2018.\n3M tape holds the wire."
    assert "preliminari" in Analyzer().term_counts(text)


def test_superscripts_are_marked_on_a_page_holding_a_character_outside_the_bmp(tmp_path: Path) -> None:
    """PDFium lists a character outside the Basic Multilingual Plane (a mathematical italic "x" here) as
    its two UTF-16 halves, the page's text as one character: the marks after it are put in all the same,
    and the page's text holds it whole."""
    content = (
        b"BT /F1 12 Tf 20 150 Td (Let Z be the flow in the pathway) Tj /F1 7 Tf 5 Ts (12) Tj "
        b"/F1 12 Tf 0 Ts (, in litres.) Tj ET BT /F1 12 Tf 20 120 Td (The area is Z) Tj /F1 7 Tf 5 Ts (2) Tj "
        b"/F1 12 Tf 0 Ts (, in square metres.) Tj ET"
    )
    path = tmp_path / "marks.pdf"
    path.write_bytes(_pdf_bytes(content, (600, 200), None, to_unicode=Z_AS_MATH_X))
    text = next(load(path).pages).text
    assert text == (
        "Let \U0001d465 be the flow in the pathway^12, in litres.\n"
        "The area is \U0001d465^2, in square metres."
    )


def test_footnote_markers_in_real_pdfs_are_marked_and_nothing_else_is(pdf_dir: Path) -> None:
    register = list(load(pdf_dir / "multicol_federal_register_2020-17221.pdf").pages)
    marked = {(p.number, m.group()) for p in register for m in re.finditer(r"\w+[,.]?\^\d+", p.text)}
    # Its five footnote markers; not the running heads' codes, the rotated margin text or "2120-AA64".
    assert marked == {
        (2, "alert,^5"),
        (2, "action.^6"),
        (2, "alert,^9"),
        (3, "threshold,^11"),
        (3, "checklists,^15"),
    }
    # And its footnotes' own numbers, at the start of each footnote.
    opening = [m.group() for p in register for m in re.finditer(r"^\^\d+ \w+", p.text, re.MULTILINE)]
    assert opening[:4] == ["^1 Preliminary", "^2 The", "^3 An", "^4 The"]
    assert sum(p.text.count("^") for p in register) == 5 + len(opening)
    latex = " ".join(p.text for p in load(pdf_dir / "multicol_latex_pypdf_sample.pdf").pages)
    assert "Area (km^2)" in latex


def test_page_without_pdfium_text_is_read_by_the_fallback(make_pdf: Callable[..., Path]) -> None:
    # pypdfium2 reads only text inside the page box; pypdf reads the whole content stream.
    path = make_pdf(text="Beyond the page edge", at=(500, 500), size=(200, 200))
    assert next(load(path).pages).text == "Beyond the page edge"


def test_errors_found_while_iterating_raise_load_error(make_pdf: Callable[..., Path]) -> None:
    path = make_pdf()
    source = load(path)
    path.unlink()
    with pytest.raises(LoadError, match="file not found"):
        next(source.pages)


def _peak_traced_bytes(path: Path) -> tuple[int, int]:
    """Peak Python allocation while reading every page of ``path``, and its longest page's length."""
    gc.collect()
    tracemalloc.start()
    try:
        longest = max(len(page.text) for page in load(path).pages)
        return tracemalloc.get_traced_memory()[1], longest
    finally:
        tracemalloc.stop()


def test_memory_stays_flat_as_page_count_grows(pdf_dir: Path, tmp_path: Path) -> None:
    fifteen = pdf_dir / "multicol_federal_register_2020-17221.pdf"
    three = pdf_dir / "multicol_latex_pypdf_sample.pdf"
    # The same fifteen pages ten times over, sharing fonts as a real long document does.
    reader = pypdf.PdfReader(fifteen)
    writer = pypdf.PdfWriter()
    for _ in range(10):
        for page in reader.pages:
            writer.add_page(page)
    long_pdf = tmp_path / "long.pdf"
    with long_pdf.open("wb") as file:
        writer.write(file)
    # Warm up imports and caches (the loader keeps one text buffer, grown to the longest page it read).
    for path in (three, fifteen):
        _peak_traced_bytes(path)
    peaks = {path.name: _peak_traced_bytes(path) for path in (three, fifteen, long_pdf)}
    # Peak memory follows the pages read ahead for the running lines (RUNNING_WINDOW, fewer than the
    # fifteen), not the number of pages: ten times the pages, about the same peak (1.17 to 1.29 times
    # in repeated runs; pages held for every page read would make it several times).
    assert RUNNING_WINDOW < 15
    assert peaks["long.pdf"][0] < 1.5 * peaks[fifteen.name][0]


def test_a_nul_in_the_title_or_author_is_dropped(make_pdf: Callable[..., Path]) -> None:
    # PDF strings may hold any byte: "\000" is a NUL, which PostgreSQL cannot store in a title.
    source = load(make_pdf(title=r"Pump\000 Guide) /Author (Ann\000 Lee"))
    assert source.title == "Pump Guide"
    assert source.metadata["author"] == "Ann Lee"


def test_half_a_surrogate_pair_in_the_title_does_not_make_the_pdf_unreadable(
    make_pdf: Callable[..., Path],
) -> None:
    # UTF-16 (byte-order mark FE FF) "Pump" then a high surrogate with nothing after it: pypdfium2's own
    # metadata reader raised UnicodeDecodeError, so the whole PDF failed to load.
    source = load(make_pdf(title=r"\376\377\000P\000u\000m\000p\330\000"))
    assert source.title == "Pump\ufffd"
    assert "Hello from a tiny PDF." in next(source.pages).text


def test_an_exponent_after_a_number_is_marked_and_plain_numbers_are_not(tmp_path: Path) -> None:
    """An exponent set small and raised after a digit read as part of the number ("105" for 10^5); digits
    of one size on one baseline stay one number however long."""
    content = (
        b"BT /F1 12 Tf 20 150 Td (Growth of 10) Tj /F1 7 Tf 5 Ts (5) Tj /F1 12 Tf 0 Ts ( cells in 10) Tj "
        b"/F1 7 Tf 5 Ts (-3) Tj /F1 12 Tf 0 Ts ( s; pump 1050 in 2019) Tj /F1 7 Tf 5 Ts (4) Tj "
        b"/F1 12 Tf 0 Ts (, CO) Tj /F1 7 Tf -3 Ts (2) Tj /F1 12 Tf 0 Ts (.) Tj ET"
    )
    path = tmp_path / "exponents.pdf"
    path.write_bytes(_pdf_bytes(content, (600, 200), None))
    # PDFium breaks the line after a one-character raised run in this hand-built PDF, marked or not.
    text = " ".join(next(load(path).pages).text.split())
    assert text == "Growth of 10^5 cells in 10^-3 s; pump 1050 in 2019^4, CO2."


def test_a_pdf_without_pages_says_so(tmp_path: Path) -> None:
    # PDFium refuses a document whose page tree is empty, with an error code of "success" (or, read on
    # another thread, "format"): the reason read "cannot open PDF (Failed to load document (PDFium:
    # Success).)" or "corrupt or truncated", of a file pypdf wrote and reads back without a fault.
    writer = pypdf.PdfWriter()
    path = tmp_path / "empty-binder.pdf"
    with path.open("wb") as file:
        writer.write(file)
    with pytest.raises(LoadError) as caught:
        load(path)
    assert (caught.value.source, caught.value.reason) == (str(path), "PDF has no pages")


def test_a_broken_pdf_is_reported_once_without_pypdf_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.4\nthis is not really a pdf\n")
    with pytest.raises(LoadError, match="corrupt or truncated PDF"):
        load(path)
    assert not [record for record in caplog.records if record.name.startswith("pypdf")]
    # Only citeline's own pypdf calls are quiet: an application reading PDFs with pypdf itself keeps
    # its warnings (the level of pypdf's logger was set for the whole process).
    import pypdf

    with path.open("rb") as file, pytest.raises(pypdf.errors.PdfReadError):
        pypdf.PdfReader(file)
    assert [record for record in caplog.records if record.name.startswith("pypdf")]


def _form_pdf(fields: list[tuple[str, str, int, bool]]) -> bytes:
    """A one-page PDF form: for each ``(label, value, y, appearance)`` a label in the page's text and a
    filled text field beside it, with an appearance stream of its value or (as some form fillers leave
    it) none, for the reader to draw from the value."""
    content = b" ".join(
        b"BT /F1 12 Tf 20 %d Td (%s:) Tj ET" % (y, label.encode()) for label, _, y, _ in fields
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [%s] /DA (/Helv 0 Tf 0 g)"
        b" /DR << /Font << /Helv 5 0 R >> >> >> >>"
        % b" ".join(b"%d 0 R" % (6 + 2 * i) for i in range(len(fields))),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 300] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> /Annots [%s] >>"
        % b" ".join(b"%d 0 R" % (6 + 2 * i) for i in range(len(fields))),
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, (label, value, y, appearance) in enumerate(fields):
        shown = b"/Tx BMC BT /Helv 12 Tf 2 6 Td (%s) Tj ET EMC" % value.encode()
        objects.append(
            b"<< /Type /Annot /Subtype /Widget /FT /Tx /T (%s) /V (%s) /Rect [180 %d 380 %d] /P 3 0 R"
            b" /DA (/Helv 12 Tf 0 g)%s >>"
            % (
                label.encode(),
                value.encode(),
                y - 6,
                y + 16,
                b" /AP << /N %d 0 R >>" % (7 + 2 * i) if appearance else b"",
            )
        )
        objects.append(
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 200 22] /Resources << /Font << /Helv 5 0 R >> >>"
            b" /Length %d >>\nstream\n%s\nendstream" % (len(shown), shown)
        )
    return pdf_file(objects)


def test_the_values_filled_into_a_pdf_form_are_part_of_its_text(tmp_path: Path) -> None:
    # A filled form (an inspection report, an application) keeps its answers in form fields, which are
    # not page content: only the labels were read, "Inspector:" with no name, "Result:" with no result.
    path = tmp_path / "inspection.pdf"
    path.write_bytes(
        _form_pdf(
            [
                ("Inspector", "Ada Lovelace", 250, True),
                ("Result", "Relief valve leaking at 6 bar", 200, False),
            ]
        )
    )
    [page] = load(path).pages
    assert "Ada Lovelace" in page.text
    assert "Relief valve leaking at 6 bar" in page.text
    assert "Inspector:" in page.text and "Result:" in page.text


def test_scanned_pages_left_unread_without_tesseract_are_named(
    make_pdf: Callable[..., Path], pdf_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A PDF of text pages and scanned ones loads on a machine without Tesseract (it has text), and its
    # scanned pages came out empty with nothing anywhere saying they were not read.
    writer = pypdf.PdfWriter()
    writer.append(make_pdf(text="Prime the pump before the first start."))
    writer.append(pdf_dir / "scanned_docling_ocr_test.pdf")
    path = tmp_path / "mixed.pdf"
    with path.open("wb") as file:
        writer.write(file)
    monkeypatch.setenv("PATH", "/nonexistent")
    source = load(path)
    assert [page.text for page in source.pages] == ["Prime the pump before the first start.", ""]
    assert source.metadata == {"pages": "2", "ocr_unread": "2"}


# -- sections from the document outline ----------------------------------------------------------


def _pages_pdf(pages: list[list[str]]) -> bytes:
    """A PDF of ``pages``, each a list of lines set in Helvetica, top down; no outline."""
    count = len(pages)
    kids = b" ".join(b"%d 0 R" % (3 + 2 * i) for i in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, count),
    ]
    for i, lines in enumerate(pages):
        content = b"BT /F1 11 Tf 50 750 Td 14 TL " + b"".join(
            b"(%s) Tj T* " % line.encode() for line in lines
        )
        content += b"ET"
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (4 + 2 * i, 3 + 2 * count)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return pdf_file(objects)


def _with_outline(raw: bytes, entries: list[tuple[str, int, int]]) -> bytes:
    """``raw`` with an outline of ``entries``: (title, 0-based page, level), as pypdf writes one."""
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(raw))
    parents: list[pypdf.generic.IndirectObject] = []
    for title, page, level in entries:
        del parents[level:]
        item = writer.add_outline_item(title=title, page_number=page, parent=parents[-1] if parents else None)
        parents.append(item)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


_MANUAL = [
    [
        "PX-200 Pump Manual",
        "1 Introduction",
        "This manual covers the PX-200 pump.",
        "2 Installation",
        "Mount the pump on a level base.",
    ],
    ["Bolt the base down with M10 bolts.", "3 Maintenance", "Change the seal every 2000 hours."],
    ["3.1 Torque values", "Tighten the M10 bolts to 49 N m."],
]


#: The manual's outline: (title, 0-based page, level).
_MANUAL_OUTLINE = [
    ("1 Introduction", 0, 0),
    ("2 Installation", 0, 0),
    ("3 Maintenance", 1, 0),
    ("3.1 Torque values", 2, 1),
]


def _sections(path: Path) -> list[tuple[int, str, str]]:
    """(page, heading, the line it starts at) for each section of the PDF at ``path``."""
    return [
        (page.number, section.heading, page.text[section.start :].split("\n", 1)[0])
        for page in load(path).pages
        for section in page.sections
    ]


def test_outline_bookmarks_become_sections_at_their_lines_on_the_pages_they_lead_to(tmp_path: Path) -> None:
    path = tmp_path / "manual.pdf"
    path.write_bytes(_with_outline(_pages_pdf(_MANUAL), _MANUAL_OUTLINE))
    assert _sections(path) == [
        (1, "1 Introduction", "1 Introduction"),
        (1, "2 Installation", "2 Installation"),
        (2, "3 Maintenance", "3 Maintenance"),
        (3, "3.1 Torque values", "3.1 Torque values"),
    ]


def test_a_pdf_without_an_outline_set_in_one_type_has_no_sections(tmp_path: Path) -> None:
    path = tmp_path / "manual.pdf"
    path.write_bytes(_pages_pdf(_MANUAL))
    assert _sections(path) == []


def test_a_bookmark_matches_its_heading_whatever_its_case_punctuation_and_numbering(tmp_path: Path) -> None:
    pages = [["Contents", "Chapter 2. SAFETY - NOTICES", "Wear gloves when the pump is hot."]]
    path = tmp_path / "safety.pdf"
    path.write_bytes(_with_outline(_pages_pdf(pages), [("Safety notices", 0, 0)]))
    # The words after "Chapter 2." are the heading; its line is where the section starts.
    assert _sections(path) == [(1, "Safety notices", "Chapter 2. SAFETY - NOTICES")]


def test_a_heading_is_found_at_a_line_start_rather_than_inside_an_earlier_sentence(tmp_path: Path) -> None:
    pages = [["Read the maintenance schedule before use.", "Maintenance schedule", "Every 2000 hours."]]
    path = tmp_path / "schedule.pdf"
    path.write_bytes(_with_outline(_pages_pdf(pages), [("Maintenance schedule", 0, 0)]))
    assert _sections(path) == [(1, "Maintenance schedule", "Maintenance schedule")]


def test_a_bookmark_worded_otherwise_than_its_page_starts_at_the_top_of_that_page(tmp_path: Path) -> None:
    path = tmp_path / "manual.pdf"
    outline = [("1 Introduction", 0, 0), ("Appendix: figures", 1, 0)]
    path.write_bytes(_with_outline(_pages_pdf(_MANUAL), outline))
    assert _sections(path) == [
        (1, "1 Introduction", "1 Introduction"),
        (2, "Appendix: figures", "Bolt the base down with M10 bolts."),
    ]


def test_a_bookmark_that_leads_by_a_go_to_action_is_a_section_and_a_web_link_is_not(tmp_path: Path) -> None:
    # Word's exports lead bookmarks to their pages by /A << /S /GoTo >> actions, not /Dest.
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R /Outlines 6 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"",  # the content stream, below
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Outlines /First 7 0 R /Last 8 0 R /Count 2 >>",
        b"<< /Title (Storage) /Parent 6 0 R /Next 8 0 R /A << /S /GoTo /D [3 0 R /Fit] >> >>",
        b"<< /Title (Our website) /Parent 6 0 R /Prev 7 0 R /A << /S /URI /URI (https://example.com/) >> >>",
    ]
    content = b"BT /F1 11 Tf 50 750 Td 14 TL (Intro text.) Tj T* (Storage) Tj T* (Keep it dry.) Tj T* ET"
    objects[3] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content)
    path = tmp_path / "word.pdf"
    path.write_bytes(pdf_file(objects))
    assert _sections(path) == [(1, "Storage", "Storage")]


def test_outline_sections_keep_each_chunk_within_one_section(tmp_path: Path) -> None:
    path = tmp_path / "manual.pdf"
    path.write_bytes(_with_outline(_pages_pdf(_MANUAL), _MANUAL_OUTLINE))
    chunks = [(c.page, c.section, c.text) for c in split(load(path).pages, chunk_size=800, chunk_overlap=120)]
    assert chunks == [
        (1, None, "PX-200 Pump Manual"),
        (1, "1 Introduction", "1 Introduction\nThis manual covers the PX-200 pump."),
        (1, "2 Installation", "2 Installation\nMount the pump on a level base."),
        # The section runs on over the page break; a chunk never does.
        (2, "2 Installation", "Bolt the base down with M10 bolts."),
        (2, "3 Maintenance", "3 Maintenance\nChange the seal every 2000 hours."),
        (3, "3.1 Torque values", "3.1 Torque values\nTighten the M10 bolts to 49 N m."),
    ]


# -- sections from the type, in a PDF without an outline --------------------------------------------


def _typeset_pdf(lines: list[str], *, to_unicode: bytes | None = None) -> bytes:
    """A one-page PDF of ``lines``, set as :func:`_typeset_pages` sets them."""
    return _typeset_pages([lines], to_unicode=to_unicode)


#: The marks around a line that set it in a type other than 11-point Helvetica: its font and size.
_TYPES = {"**": b"/F2 11", "//": b"/F3 11", "##": b"/F2 16", "~~": b"/F4 14", "++": b"/F1 13", "__": b"/F4 9"}


def _typeset_pages(pages: list[list[str]], *, to_unicode: bytes | None = None) -> bytes:
    """A PDF of ``pages``, each a list of lines from the top down in 11-point Helvetica; a line written
    ``**so**`` is set in Helvetica-Bold, ``//so//`` in Helvetica-Oblique, ``##so##`` in 16-point
    Helvetica-Bold, ``~~so~~`` in 14-point Times-Roman, ``++so++`` in 13-point Helvetica and ``__so__`` in
    9-point Times-Roman; every font's characters read by the ToUnicode map ``to_unicode`` if given."""
    count = len(pages)
    kids = b" ".join(b"%d 0 R" % (3 + 2 * i) for i in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, count),
    ]
    fonts = 3 + 2 * count
    for i, lines in enumerate(pages):
        content = b"BT 50 750 Td 16 TL "
        for line in lines:
            font = _TYPES.get(line[:2], b"/F1 11")
            text = line[2:-2] if line[:2] in _TYPES else line
            content += b"%s Tf (%s) Tj T* " % (font, text.encode("latin-1"))
        content += b"ET"
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R /Resources << /Font "
            b"<< /F1 %d 0 R /F2 %d 0 R /F3 %d 0 R /F4 %d 0 R >> >> >>"
            % (4 + 2 * i, fonts, fonts + 1, fonts + 2, fonts + 3)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    cmap = b" /ToUnicode %d 0 R" % (fonts + 4) if to_unicode else b""
    for name in (b"Helvetica", b"Helvetica-Bold", b"Helvetica-Oblique", b"Times-Roman"):
        objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /%s%s >>" % (name, cmap))
    if to_unicode:
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(to_unicode), to_unicode))
    return pdf_file(objects)


_BODY = [
    "The PX-200 pump moves up to 40 litres a minute against a head of 30 metres.",
    "Its casing is cast iron and its impeller bronze; the seal is a carbon face seal.",
    "Read every step of this manual before the pump is first started.",
]


def test_without_an_outline_headings_are_lines_set_in_bold_italics_or_larger_type(tmp_path: Path) -> None:
    lines = [
        "##PX-200 Pump Manual##",
        *_BODY,
        "**Installation**",
        *_BODY,
        "//Wiring the motor//",
        *_BODY,
        "**Torque values for the base bolts**",
        "**and the flange bolts**",
        *_BODY,
    ]
    path = tmp_path / "manual.pdf"
    path.write_bytes(_typeset_pdf(lines))
    assert _sections(path) == [
        (1, "PX-200 Pump Manual", "PX-200 Pump Manual"),
        (1, "Installation", "Installation"),
        (1, "Wiring the motor", "Wiring the motor"),
        # A heading wrapped onto two lines in one type is one heading.
        (1, "Torque values for the base bolts and the flange bolts", "Torque values for the base bolts"),
    ]


def test_headings_after_a_character_outside_the_bmp_are_read_whole(tmp_path: Path) -> None:
    # PDFium lists such a character ("Z", read as a mathematical italic "x") as its two UTF-16 halves:
    # the type of each character after it is still asked by its own index, and a heading holding one
    # keeps it whole.
    lines = [
        "##Sizing the Z pump##",
        "The flow Z is read off the dial in litres a minute.",
        *_BODY,
        "**Installation**",
        *_BODY,
        "//Choosing Z for the base//",
        *_BODY,
    ]
    path = tmp_path / "manual.pdf"
    path.write_bytes(_typeset_pdf(lines, to_unicode=Z_AS_MATH_X))
    assert _sections(path) == [
        (1, "Sizing the \U0001d465 pump", "Sizing the \U0001d465 pump"),
        (1, "Installation", "Installation"),
        (1, "Choosing \U0001d465 for the base", "Choosing \U0001d465 for the base"),
    ]
    assert load(path).title == "Sizing the \U0001d465 pump"


def test_bold_sentences_captions_and_lines_mixing_types_are_not_headings(tmp_path: Path) -> None:
    lines = [
        *_BODY,
        "**Never run the pump dry.**",
        *_BODY,
        "**Figure 3 The pump on its base**",
        *_BODY,
        "**12**",
        *_BODY,
    ]
    path = tmp_path / "manual.pdf"
    path.write_bytes(_typeset_pdf(lines))
    assert _sections(path) == []


def test_a_page_setting_apart_more_lines_than_headings_would_gets_none(tmp_path: Path) -> None:
    # A table's bold cells, a list set in bold: sixteen lines set apart on one page are not sixteen sections.
    lines = [line for n in range(16) for line in (f"**Step {n + 1} of the start-up**", _BODY[n % 3])]
    path = tmp_path / "steps.pdf"
    path.write_bytes(_typeset_pdf(lines))
    assert _sections(path) == []


def test_an_outline_when_there_is_one_decides_the_sections_not_the_type(tmp_path: Path) -> None:
    lines = ["**Installation**", *_BODY, "**Wiring**", *_BODY]
    path = tmp_path / "manual.pdf"
    path.write_bytes(_with_outline(_typeset_pdf(lines), [("Wiring", 0, 0)]))
    assert _sections(path) == [(1, "Wiring", "Wiring")]


def test_real_documents_headings_are_read_from_their_type(pdf_dir: Path) -> None:
    handbook = _sections(pdf_dir / "manual_faa_amt_handbook_sample.pdf")
    # Set in italics at the body's size; the figure's bold labels, set smaller, are not headings.
    assert [heading for _, heading, _ in handbook] == [
        "Boots Self-Locking Nut",
        "Stainless Steel Self-Locking Nut",
        "Elastic Stop Nut",
    ]
    register = {
        (page, heading)
        for page, heading, _ in _sections(pdf_dir / "multicol_federal_register_2020-17221.pdf")
    }
    assert {
        (1, "Background"),
        (3, "Proposed Design Changes"),
        (5, "Explanation of Change to the Applicability"),  # wrapped onto two lines of its column
        (14, "(k) Horizontal Stabilizer Trim Wire Bundle Routing Change"),
    } <= register
    # Run-in headings, bold words opening a paragraph, are not sections of their own.
    assert not any("FOR FURTHER INFORMATION" in heading for _, heading in register)
    assert len(register) < 40
    # An agency's name heads each document of the Register: a heading, though it names a Department.
    assert (1, "DEPARTMENT OF TRANSPORTATION Federal Aviation Administration 14 CFR Part 39") in register
    # The running head, set apart from the text on a page of figures (page 8), is no section.
    assert not any("Federal Register" in heading for _, heading in register)


def test_the_author_and_date_under_a_title_are_no_section(pdf_dir: Path) -> None:
    # LaTeX's \maketitle sets the author ("Your Name") and the date in larger type straight under the title.
    path = pdf_dir / "multicol_latex_pypdf_sample.pdf"
    assert _sections(path) == [
        (1, "Two-Column Document with Lorem Ipsum", "Two-Column Document with Lorem Ipsum"),
        (1, "Abstract", "Abstract"),
    ]
    chunks = [(c.section, c.text) for c in split(load(path).pages, chunk_size=800, chunk_overlap=120)]
    title = "Two-Column Document with Lorem Ipsum"
    assert chunks[0] == (title, f"{title}\nYour Name\nJanuary 3, 2024")
    assert chunks[1][0] == "Abstract"


_RUNNING_HEAD = "**Journal of Pump Engineering 3 (2020)**"
#: Lines of text for the pages of one paper, each page's its own: a line at the top or foot of most pages
#: would be a running line.
_SEAL = [
    "Carbon face seals wear fastest in the first hours of running.",
    "A seal run dry for a minute loses more than a week of wet running.",
    "The wear was measured on twelve pumps of three makers.",
    "Each pump ran for two thousand hours at its rated head.",
    "Wear rates were lower on the pumps with a flushed seal chamber.",
    "The faces were lapped flat before each test and weighed after it.",
]


@pytest.mark.parametrize(
    ("pages", "headings"),
    [
        pytest.param(
            [
                [
                    _RUNNING_HEAD,
                    "##Wear of Carbon Face Seals##",
                    *_SEAL[:2],
                    "**1 Introduction**",
                    *_SEAL[2:4],
                ],
                [_RUNNING_HEAD, *_SEAL[4:], "**2 Methods**", *_BODY, "**2.1 Data**", *_SEAL[:2]],
            ],
            ["Wear of Carbon Face Seals", "1 Introduction", "2 Methods", "2.1 Data"],
            # Too few pages to learn running lines from the text: the head's type and place tell.
            id="two pages",
        ),
        pytest.param(
            [
                [
                    _RUNNING_HEAD,
                    "##Wear of Carbon Face Seals##",
                    *_SEAL[:2],
                    "**1 Introduction**",
                    *_SEAL[2:4],
                ],
                [_RUNNING_HEAD, *_SEAL[4:], "**2 Methods**", *_BODY],
                [
                    _RUNNING_HEAD,
                    _SEAL[0],
                    "**3 Results**",
                    "The wear rates agree with those reported in",
                    "Journal of Pump Engineering 3 (2020) 12 for larger seals",
                    *_SEAL[1:3],
                ],
            ],
            ["Wear of Carbon Face Seals", "1 Introduction", "2 Methods", "3 Results"],
            # The head leaves the text as a running line, but the paper cites its own journal.
            id="citing its journal",
        ),
        pytest.param(
            [
                *[["++Journal of Pump Engineering 3 (2020)++", *_SEAL[i : i + 3]] for i in range(3)],
                [
                    "++Journal of Pump Engineering 3 (2020)++",
                    "__Figure 4 Seal wear against hours run, as printed in__",
                    "__Journal of Pump Engineering 3 (2020) and reprinted__",
                    "__by permission of its publisher.__",
                ],
            ],
            # Set in the body's font but larger, the head stands out only on the page of a figure, whose
            # caption is in small type (as the Federal Register's does on its page 8).
            [],
            id="set apart on one page",
        ),
    ],
)
def test_a_running_head_is_no_section(tmp_path: Path, pages: list[list[str]], headings: list[str]) -> None:
    path = tmp_path / "paper.pdf"
    path.write_bytes(_typeset_pages(pages))
    assert [heading for _, heading, _ in _sections(path)] == headings
    # What follows a page's head is in the section the page before ended in.
    chunks = [(c.page, c.section) for c in split(load(path).pages, chunk_size=800, chunk_overlap=120)]
    assert (2, headings[1] if headings else None) in chunks


def test_a_running_head_set_apart_in_type_leaves_the_text_of_a_two_page_paper(tmp_path: Path) -> None:
    # Two pages are too few to learn running lines from the text alone; the head's type and place tell.
    path = tmp_path / "paper.pdf"
    path.write_bytes(
        _typeset_pages(
            [
                [
                    _RUNNING_HEAD,
                    "##Wear of Carbon Face Seals##",
                    *_SEAL[:2],
                    "**1 Introduction**",
                    *_SEAL[2:4],
                ],
                [_RUNNING_HEAD, *_SEAL[4:], "**2 Methods**", *_BODY],
            ]
        )
    )

    pages = list(load(path).pages)

    assert len(pages) == 2
    assert all("Journal of Pump Engineering" not in page.text for page in pages)
    assert pages[0].text.startswith("Wear of Carbon Face Seals") and _SEAL[4] in pages[1].text


def test_author_affiliation_and_e_mail_lines_are_no_headings(tmp_path: Path) -> None:
    pages = [
        [
            "##Seal Wear in Small Pumps##",
            # Names without initials or markers: only their place, straight under the title, tells.
            "~~Anne Jones and Brian Lee~~",
            "**1 Introduction**",
            *_BODY,
            "**2 Materials and Methods**",
            *_BODY,
            "**Study Design and Data Sources**",
            *_BODY,
        ],
        # A second paper of the volume starts on page 2.
        [
            "##Noise of Small Centrifugal Pumps##",
            *_BODY,
            "**J. Smith1, A. Jones2 and B. Lee1**",
            "//1Department of Mechanical Engineering, University of Leeds//",
            "//2Pump Research Institute, Sheffield//",
            *_BODY,
            "~~j.smith@leeds.example.ac.uk~~",
            *_BODY,
            "**Results and Discussion**",
            *_BODY,
        ],
    ]
    path = tmp_path / "volume.pdf"
    path.write_bytes(_typeset_pages(pages))
    assert [(page, heading) for page, heading, _ in _sections(path)] == [
        (1, "Seal Wear in Small Pumps"),
        (1, "1 Introduction"),
        (1, "2 Materials and Methods"),
        (1, "Study Design and Data Sources"),
        (2, "Noise of Small Centrifugal Pumps"),
        (2, "Results and Discussion"),
    ]
