"""Ruled tables in PDFs, written into the page's text as Markdown tables (citeline.load.pdf_tables)."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium
import pytest

from citeline.load import load
from citeline.load.pdf_tables import ruled, with_tables
from citeline.load.pdfium_text import IndexedText
from citeline.split import split
from citeline.types import table_cells
from tests.conftest import PDFS
from tests.load.conftest import Z_AS_MATH_X, _pdf_bytes

_COLUMNS = (50, 150, 250, 350)
_ROWS = (250, 230, 210, 190)
_CELLS = [["Bolt", "Torque", "Where"], ["M10", "49 N m", "Base | flange"], ["M12", "85 N m", "Flange"]]
_RULINGS = {
    # Each rule a stroked line; each cell a stroked rectangle; each rule a thin filled rectangle.
    "lines": [b"%d %d m %d %d l S" % (_COLUMNS[0], y, _COLUMNS[-1], y) for y in _ROWS]
    + [b"%d %d m %d %d l S" % (x, _ROWS[-1], x, _ROWS[0]) for x in _COLUMNS],
    "cells": [
        b"%d %d %d %d re S"
        % (_COLUMNS[c], _ROWS[r + 1], _COLUMNS[c + 1] - _COLUMNS[c], _ROWS[r] - _ROWS[r + 1])
        for r in range(3)
        for c in range(3)
    ],
    "bars": [b"%d %.1f %d 0.6 re f" % (_COLUMNS[0], y - 0.3, _COLUMNS[-1] - _COLUMNS[0]) for y in _ROWS]
    + [b"%.1f %d 0.6 %d re f" % (x - 0.3, _ROWS[-1], _ROWS[0] - _ROWS[-1]) for x in _COLUMNS],
}


def _torque_pdf(ruling: str, *, sideways: bool = False) -> bytes:
    """A page of a sentence, a ruled table of bolt torques (``_CELLS``) and a sentence; ``sideways``:
    all of it turned a quarter anticlockwise, as a landscape table on a portrait page."""
    lines = [b"BT /F1 10 Tf 50 270 Td (Tighten the bolts as listed below.) Tj ET"]
    for r, row in enumerate(_CELLS):
        for c, cell in enumerate(row):
            lines.append(
                b"BT /F1 10 Tf %d %d Td (%s) Tj ET" % (_COLUMNS[c] + 4, _ROWS[r] - 14, cell.encode())
            )
    lines.append(b"BT /F1 10 Tf 50 170 Td (Check again after 50 hours.) Tj ET")
    lines.extend(_RULINGS[ruling])
    if sideways:
        lines = [b"q 0 1 -1 0 400 0 cm", *lines, b"Q"]
    return _pdf_bytes(b"\n".join(lines), (400, 400) if sideways else (400, 300), None)


@contextmanager
def _page(pdf: bytes | Path, index: int = 0) -> Iterator[tuple[Any, Any, str]]:
    """Page ``index`` of ``pdf``, its text page and its text as the loader reads it (before cleaning)."""
    doc = pdfium.PdfDocument(pdf)
    try:
        page = doc[index]
        textpage = page.get_textpage()
        yield page, textpage, textpage.get_text_bounded()
    finally:
        doc.close()


def _read(pdf: bytes | Path, index: int = 0) -> tuple[str, str]:
    """The text of page ``index`` of ``pdf`` as PDFium reads it, and with its ruled tables written in."""
    with _page(pdf, index) as (page, textpage, text):
        return text, with_tables(page, IndexedText(textpage), text)


_TORQUES = (
    "Tighten the bolts as listed below.\n\n"
    "| Bolt | Torque | Where |\n"
    "| --- | --- | --- |\n"
    "| M10 | 49 N m | Base \\| flange |\n"
    "| M12 | 85 N m | Flange |\n\n"
    "Check again after 50 hours."
)


@pytest.mark.parametrize("ruling", sorted(_RULINGS))
@pytest.mark.parametrize("sideways", [False, True], ids=["level", "sideways"])
def test_a_ruled_table_is_written_as_a_markdown_table_between_its_page_s_text(
    ruling: str, sideways: bool
) -> None:
    before, after = _read(_torque_pdf(ruling, sideways=sideways))
    # PDFium read the rows as runs of words (sideways, it even ran each row into the next: "WhereM10");
    # the table is one Markdown table, its first row the header, the pipe in a cell escaped.
    assert "Bolt Torque Where" in before
    assert after == _TORQUES
    assert [table_cells(row) for row in after.splitlines()[4:6]] == [
        ["M10", "49 N m", "Base | flange"],
        ["M12", "85 N m", "Flange"],
    ]


def test_a_mark_put_in_the_page_s_text_before_stays_with_its_cell() -> None:
    # The loader marks a superscript with ^ ("M^10") before the tables are read.
    with _page(_torque_pdf("lines")) as (page, textpage, text):
        after = with_tables(page, IndexedText(textpage), text.replace("M10", "M^10"))
    assert after == _TORQUES.replace("M10", "M^10")


def test_a_table_after_a_character_outside_the_bmp_is_written_as_a_markdown_table() -> None:
    # PDFium lists such a character (here "Z", read as U+1D465) as its two UTF-16 halves, which the page's
    # text holds as one: the boxes of the characters after it are still looked up by their own index, so
    # the table, one of whose cells holds such a character too, is read whole.
    lines = [b"BT /F1 10 Tf 50 270 Td (Tighten the Z bolts as listed below.) Tj ET"]
    cells = [[cell.replace("Flange", "Flange Z") for cell in row] for row in _CELLS]
    for r, row in enumerate(cells):
        for c, cell in enumerate(row):
            lines.append(
                b"BT /F1 10 Tf %d %d Td (%s) Tj ET" % (_COLUMNS[c] + 4, _ROWS[r] - 14, cell.encode())
            )
    lines.append(b"BT /F1 10 Tf 50 170 Td (Check again after 50 hours.) Tj ET")
    pdf = _pdf_bytes(b"\n".join(lines + _RULINGS["lines"]), (400, 300), None, to_unicode=Z_AS_MATH_X)
    before, after = _read(pdf)
    assert "Tighten the \U0001d465 bolts" in before
    assert after == _TORQUES.replace("the bolts", "the \U0001d465 bolts").replace(
        "| Flange |", "| Flange \U0001d465 |"
    )


def test_a_page_without_rules_is_not_looked_at_and_keeps_its_text() -> None:
    content = (
        b"BT /F1 10 Tf 50 270 Td (Bolt Torque Where) Tj 0 -20 Td (M10 49 N m Base) Tj ET 50 260 m 350 260 l S"
    )
    pdf = _pdf_bytes(content, (400, 300), None)
    with _page(pdf) as (page, _, _):
        assert not ruled(page)
    before, after = _read(pdf)
    assert after == before


def test_boxes_with_no_text_in_most_cells_are_no_table() -> None:
    # A frame around a figure, ruled into panels with one label among them.
    frame = [b"%d %d %d %d re S" % (50 + 100 * c, 100 + 60 * r, 100, 60) for r in range(2) for c in range(3)]
    content = b"\n".join([*frame, b"BT /F1 10 Tf 60 140 Td (Figure 2-1) Tj ET"])
    before, after = _read(_pdf_bytes(content, (400, 300), None))
    assert after == before


def test_rows_set_without_rules_between_them_are_rows_of_their_own() -> None:
    # Ruled under the header and around every three rows, as printed statistics often are.
    names = ["Alabama", "Alaska", "Arizona", "Arkansas", "California", "Colorado"]
    text = [b"BT /F1 10 Tf 54 %d Td (State) Tj 100 0 Td (Permits) Tj ET" % 266]
    y = 246
    for number, name in enumerate(names):
        text.append(b"BT /F1 10 Tf 54 %d Td (%s) Tj 100 0 Td (%d) Tj ET" % (y, name.encode(), 1000 + number))
        y -= 14 if number % 3 < 2 else 18
    rules = [b"50 %d m 350 %d l S" % (at, at) for at in (280, 260, 214, 172)]
    rules += [b"%d 172 m %d 280 l S" % (x, x) for x in (50, 150, 350)]
    _, after = _read(_pdf_bytes(b"\n".join(text + rules), (400, 300), None))
    assert after == "\n".join(
        ["| State | Permits |", "| --- | --- |"]
        + [f"| {name} | {1000 + number} |" for number, name in enumerate(names)]
    )


def _grouped_pdf(group: bytes) -> bytes:
    """A table of bolts whose header is two lines in one cell over the columns Min and Max (the rule
    between them stops under the header), the first line ``group`` (a text object drawn first)."""
    text = [
        group,
        b"BT /F1 10 Tf 54 224 Td (Bolt) Tj ET",
        b"BT /F1 10 Tf 154 224 Td (Min) Tj 100 0 Td (Max) Tj ET",
        b"BT /F1 10 Tf 54 206 Td (M10) Tj 100 0 Td (40) Tj 100 0 Td (49) Tj ET",
        b"BT /F1 10 Tf 54 186 Td (M12) Tj 100 0 Td (70) Tj 100 0 Td (85) Tj ET",
    ]
    rules = [b"50 %d m 350 %d l S" % (at, at) for at in (250, 220, 200, 180)]
    rules += [b"%d 180 m %d 250 l S" % (x, x) for x in (50, 150, 350)] + [b"250 180 m 250 220 l S"]
    return _pdf_bytes(b"\n".join(text + rules), (400, 300), None)


@pytest.mark.parametrize(
    ("group", "header"),
    [
        # "Torque" (31.7 points wide) centred over both columns: it names each.
        (b"BT /F1 10 Tf 234.2 236 Td (Torque) Tj ET", "| Bolt | Min Torque | Max Torque |"),
        # Wider than one column, from the first: it names each.
        (b"BT /F1 10 Tf 154 236 Td (Tightening torque in newton metres) Tj ET", None),
        # In line with the first column's name, within that column: that column's name's first line.
        (b"BT /F1 10 Tf 154 236 Td (Rated) Tj ET", "| Bolt | Rated Min | Max |"),
    ],
    ids=["centred", "wide", "in-line"],
)
def test_a_group_s_name_over_columns_ruled_below_it_names_each_of_them(
    group: bytes, header: str | None
) -> None:
    _, after = _read(_grouped_pdf(group))
    wide = "Tightening torque in newton metres"
    assert after.splitlines() == [
        header or f"| Bolt | Min {wide} | Max {wide} |",
        "| --- | --- | --- |",
        "| M10 | 40 | 49 |",
        "| M12 | 70 | 85 |",
    ]


# -- the shared fixtures -----------------------------------------------------------------------------

_NICS = PDFS / "odd_nics_rotated_table.pdf"
_HEADER = (
    "| State / Territory | Permit | Handgun | Long Gun | *Other | **Multiple | Admin "
    "| Handgun Pre-Pawn | Long Gun Pre-Pawn | *Other Pre-Pawn "
    "| Handgun Redemption | Long Gun Redemption | *Other Redemption "
    "| Handgun Returned/Disposition | Long Gun Returned/Disposition | *Other Returned/Disposition "
    "| Handgun Rentals | Long Gun Rentals "
    "| Handgun Private Sale | Long Gun Private Sale | *Other Private Sale "
    "| Handgun Return to Seller - Private Sale | Long Gun Return to Seller - Private Sale "
    "| *Other Return to Seller - Private Sale | Totals |"
)


def test_the_nics_table_reads_as_a_table_under_its_column_names() -> None:
    before, after = _read(_NICS)
    assert "Florida 15,907 50,796 28,981 2,268 1,957 121 8 9 0 2,248 1,135" in before
    lines = after.splitlines()
    # The title inside the table's frame is a line above it; the header row names each column, a group's
    # name (Pre-Pawn, centred over its three columns; Returned/Disposition, wider than one) with each
    # column of its cell, not only the one it stands over; each state is a row of its own, though the
    # table is ruled only every fifth state; the notes under the table follow it.
    assert lines[:3] == ["NICS Firearm Background Checks November - 2015", "", _HEADER]
    assert lines[3] == "| --- " * 25 + "|"
    assert (
        "| Florida | 15,907 | 50,796 | 28,981 | 2,268 | 1,957 | 121 | 8 | 9 | 0 | 2,248 | 1,135 | 2 "
        "| 40 | 5 | 0 |  |  | 36 | 19 | 0 | 0 | 0 | 0 | 103,532 |"
    ) in lines
    # PDFium ran two cells together ("Hawaii 1,248 0 00 0"): the table parts them.
    assert "Hawaii 1,248 0 00 0" in before
    assert "| Hawaii | 1,248 | 0 | 0 | 0 | 0 |" in after
    rows = [line for line in lines if line.startswith("| ")]
    assert len(rows) == 2 + 56 and rows[-1].startswith("| Totals | 804,006 |")
    assert lines[lines.index(rows[-1]) + 2].startswith(
        "NOTES: **Multiple (multiple types of firearms selected)"
    )


def test_a_manual_page_of_framed_figures_gets_no_table() -> None:
    before, after = _read(PDFS / "manual_faa_amt_handbook_sample.pdf")
    assert after == before


def test_the_federal_register_is_unchanged() -> None:
    # Its cost table is ruled, but PDFium reads the unruled table beside it into the same lines: not
    # one run of the page's text, so left as it is.
    path = PDFS / "multicol_federal_register_2020-17221.pdf"
    for index in range(15):
        before, after = _read(path, index)
        assert after == before, index + 1


_DELIMITER_ROW = re.compile(r"\|(?: --- \|)+")


def _words(text: str) -> Counter[str]:
    """The words of ``text``, those of a Markdown table's rows read as citeline reads its cells."""
    words: Counter[str] = Counter()
    for line in text.splitlines():
        if _DELIMITER_ROW.fullmatch(line):
            continue
        cells = table_cells(line) if line.startswith("| ") else [line]
        words.update(word for cell in cells for word in cell.split())
    return words


def _made_of(word: str, pieces: Counter[str]) -> bool:
    """Whether ``word`` is two or more of ``pieces`` run together."""
    return any(
        word.startswith(piece) and (word[len(piece) :] in pieces or _made_of(word[len(piece) :], pieces))
        for piece in pieces
        if piece != word
    )


def _letters(words: Counter[str]) -> Counter[str]:
    return Counter(letter for word, n in words.items() for letter in word * n)


def _spread(gained: Counter[str], after: str) -> Counter[str]:
    """Of the words ``gained``, the copies a Markdown table's header row in ``after`` holds beyond the
    first: a group's name spread over the columns it spans."""
    headers: Counter[str] = Counter()
    for header, line in itertools.pairwise(after.splitlines()):
        if _DELIMITER_ROW.fullmatch(line):
            headers.update(word for cell in table_cells(header) for word in cell.split())
    return Counter({word: min(n, headers[word] - 1) for word, n in gained.items() if headers[word] > 1})


@pytest.mark.parametrize("pdf", sorted(PDFS.glob("*.pdf")), ids=lambda path: path.stem)
def test_no_word_is_lost_or_repeated_on_any_fixture_page(pdf: Path) -> None:
    doc = pdfium.PdfDocument(pdf)
    pages = len(doc)
    doc.close()
    for index in range(pages):
        before, after = _read(pdf, index)
        lost, gained = _words(before) - _words(after), _words(after) - _words(before)
        # A header row may repeat a group's name over its columns ("Handgun Pre-Pawn | Long Gun Pre-Pawn").
        gained -= _spread(gained, after)
        # Only a word PDFium ran across a rule becomes the words of its cells.
        assert all(_made_of(word, gained) for word in lost), (index + 1, lost)
        assert _letters(lost) == _letters(gained)


def test_a_chunk_of_a_pdf_table_s_later_rows_is_read_with_its_header_row() -> None:
    chunks = list(split(load(_NICS).pages, chunk_size=800, chunk_overlap=120))
    florida = next(chunk for chunk in chunks if "| Florida | 15,907 |" in chunk.text)
    assert _HEADER not in florida.text
    assert florida.context == _HEADER


def test_a_fault_of_the_table_finder_costs_the_page_its_tables_not_its_text(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Table finding reads odd drawings; whatever it trips on, the document loads as it did without it.
    def trips(*_: object) -> list[Any]:
        raise ZeroDivisionError("a degenerate rule")

    monkeypatch.setattr("citeline.load.pdf_tables.find_tables", trips)

    (page,) = load(_NICS).pages

    assert "Florida 15,907 50,796 28,981 2,268 1,957 121 8 9 0 2,248 1,135" in page.text
    assert "| Florida |" not in page.text
    assert f"{_NICS} page 1: ruled tables not read" in caplog.text
