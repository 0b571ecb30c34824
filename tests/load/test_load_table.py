"""CSV and TSV: one record per row, each with its exact span in the page text."""

from __future__ import annotations

from pathlib import Path

import pytest

from citeline.errors import LoadError
from citeline.load import load
from citeline.load.table import read_row


def _write(tmp_path: Path, text: str, name: str = "people.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return path


def test_rows_render_as_named_fields_with_record_spans(tmp_path: Path) -> None:
    source = load(_write(tmp_path, "name,city,age\r\nAda,London,36\r\nAlan,,41\r\n"))
    page = next(source.pages)
    assert source.content_type == "text/csv"
    assert source.title == "people"
    assert page.number == 1
    assert page.text == "name: Ada; city: London; age: 36\nname: Alan; age: 41"
    assert page.records is not None
    assert [page.text[start:end] for start, end in page.records] == [
        "name: Ada; city: London; age: 36",
        "name: Alan; age: 41",
    ]


def test_semicolon_delimiter_is_sniffed_and_quotes_respected(tmp_path: Path) -> None:
    text = 'product;note\n"Widget";"cheap; cheerful, and\nsmall"\nGadget;plain\n'
    page = next(load(_write(tmp_path, text)).pages)
    assert page.text == "product: Widget; note: cheap; cheerful, and small\nproduct: Gadget; note: plain"


def test_tsv_uses_tabs(tmp_path: Path) -> None:
    page = next(load(_write(tmp_path, "a\tb\n1, 2\t3\n", "data.tsv")).pages)
    assert page.text == "a: 1, 2; b: 3"


def test_ragged_rows_are_handled(tmp_path: Path) -> None:
    page = next(load(_write(tmp_path, "a,b\n1\n2,3,4,5\n,,\n6,7\n")).pages)
    assert page.text == "a: 1\na: 2; b: 3; column 3: 4; column 4: 5\na: 6; b: 7"
    assert page.records is not None
    assert len(page.records) == 3


def test_header_only_csv_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LoadError) as caught:
        load(_write(tmp_path, "name,city\n\n,\n"))
    assert caught.value.reason == "no data rows (header only)"


def test_blank_csv_is_empty(tmp_path: Path) -> None:
    with pytest.raises(LoadError) as caught:
        load(_write(tmp_path, "\n\n  \n"))
    assert caught.value.reason == "empty file"


def test_binary_csv_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "blob.csv"
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(LoadError, match="binary content, not text"):
        load(path)


@pytest.mark.parametrize(("delimiter", "quote"), [(";", ""), ("|", ""), (";", '"')])
def test_an_excel_separator_line_names_the_delimiter_and_is_not_the_header(
    tmp_path: Path, delimiter: str, quote: str
) -> None:
    # A CSV made for Excel (in a locale with decimal commas, say) opens with "sep=;". It was taken for the
    # header: every row read "sep=: part; column 2: torque", its real column names a row of data. Some
    # tools quote it as a one-cell row.
    rows = [f"{quote}sep={delimiter}{quote}", "part;torque", "bolt, M8;25,5", "nut;7"]
    text = "\r\n".join(row.replace(";", delimiter) for row in rows) + "\r\n"
    path = _write(tmp_path, text, name="torques.csv")
    source = load(path)
    [page] = source.pages
    assert page.text == "part: bolt, M8; torque: 25,5\npart: nut; torque: 7"
    assert source.metadata == {"rows": "2", "columns": "2", "column_names": ["part", "torque"]}


def test_a_quote_doubled_inside_a_quoted_cell_is_one_quote(tmp_path: Path) -> None:
    # Excel writes an inch mark in a cell that also holds a comma as "Pipe, 3/4"" steel". Python's sniffer
    # decided such files do not double their quotes, and the cell read 'Pipe, 3/4" steel"'.
    path = _write(tmp_path, 'part,description,qty\nA1,"Pipe, 3/4"" steel",4\nA2,"Hose, 1/2"" rubber",2\n')
    [page] = load(path).pages
    assert (
        page.text
        == 'part: A1; description: Pipe, 3/4" steel; qty: 4\npart: A2; description: Hose, 1/2" rubber; qty: 2'
    )


def test_a_quote_that_opens_no_quoted_cell_does_not_swallow_the_rows_after_it(tmp_path: Path) -> None:
    # A TSV written without quoting ('"Unbalanced title', '5" pipe'): the first quote ran on to the end of
    # the file, and rows 4 and 5 became part of row 3's title.
    text = (
        'id\ttitle\tyear\n1\t5" pipe fitting\t2001\n3\t"Unbalanced title\t2003\n'
        "4\tNext title\t2004\n5\tLast\t2005\n"
    )
    source = load(_write(tmp_path, text, "titles.tsv"))
    assert next(source.pages).text == (
        'id: 1; title: 5" pipe fitting; year: 2001\nid: 3; title: "Unbalanced title; year: 2003\n'
        "id: 4; title: Next title; year: 2004\nid: 5; title: Last; year: 2005"
    )
    assert source.metadata == {"rows": "4", "columns": "3", "column_names": ["id", "title", "year"]}
    # A quoted cell over two lines is still one cell.
    quoted = 'id\ttitle\tyear\n1\t"Two\nlines"\t2001\n2\tOne line\t2002\n'
    assert next(load(_write(tmp_path, quoted, "quoted.tsv")).pages).text == (
        "id: 1; title: Two lines; year: 2001\nid: 2; title: One line; year: 2002"
    )


def test_each_record_knows_its_row_in_the_file_as_a_spreadsheet_numbers_it(tmp_path: Path) -> None:
    # A clinician opening the file finds "row 7" where Excel and LibreOffice show row 7: the header is row
    # 1. Rows the loader skips still count (a blank line, a row of empty cells), a quoted cell over two
    # lines is one row, and the "sep=;" line is none: Excel reads it and hides it.
    text = (
        "sep=;\r\n"
        "drug;dose\r\n"  # row 1
        "metformin;500 mg\r\n"  # row 2
        "\r\n"  # row 3, blank
        ";\r\n"  # row 4, empty cells
        'sitagliptin;"100 mg\r\nonce daily"\r\n'  # row 5, over two lines
        "empagliflozin;10 mg\r\n"  # row 6
    )
    [page] = load(_write(tmp_path, text, name="doses.csv")).pages
    assert page.records is not None
    assert [page.text[start:end].split(";")[0] for start, end in page.records] == [
        "drug: metformin",
        "drug: sitagliptin",
        "drug: empagliflozin",
    ]
    assert page.record_rows == (2, 5, 6)
    # Without a separator line, blank lines before the header count too.
    [page] = load(_write(tmp_path, "\nid,name\n1,a\n\n\n2,b\n", name="ids.csv")).pages
    assert page.record_rows == (3, 6)


def test_a_row_reads_back_by_the_column_names_whatever_its_cells_hold(tmp_path: Path) -> None:
    # A cell may hold "; " and ": " as a row's text parts its fields with them: read up to the first
    # "; ", the first cell was "Metformin" in both rows, and the notes were cut in two. The column
    # names kept in the metadata read each row back whole; the rendered text is as it always was.
    text = (
        "drug,adult dose,notes\n"
        '"Metformin; immediate release",500 mg twice daily,"take with food; avoid alcohol"\n'
        '"Metformin; extended release",1000 mg once daily,ratio: 1:2 with the evening meal\n'
    )
    source = load(_write(tmp_path, text, name="doses.csv"))
    [page] = source.pages
    assert page.text == (
        "drug: Metformin; immediate release; adult dose: 500 mg twice daily; "
        "notes: take with food; avoid alcohol\n"
        "drug: Metformin; extended release; adult dose: 1000 mg once daily; "
        "notes: ratio: 1:2 with the evening meal"
    )
    assert source.metadata["column_names"] == ["drug", "adult dose", "notes"]
    first, second = page.text.splitlines()
    assert read_row(first, ["drug", "adult dose", "notes"]) == [
        ("drug", "Metformin; immediate release"),
        ("adult dose", "500 mg twice daily"),
        ("notes", "take with food; avoid alcohol"),
    ]
    assert read_row(second, ["drug", "adult dose", "notes"]) == [
        ("drug", "Metformin; extended release"),
        ("adult dose", "1000 mg once daily"),
        ("notes", "ratio: 1:2 with the evening meal"),
    ]


def test_a_row_reads_back_with_its_empty_cells_unnamed_columns_and_extra_cells(tmp_path: Path) -> None:
    # An empty cell is left out of the row, a column without a name is "column N", and so is a cell
    # beyond the header: each is read back under the name it was written with.
    source = load(
        _write(tmp_path, 'code,,note\n"E1; x; y",,"; z"\nE2,,n: 1,"extra; more"\n', name="codes.csv")
    )
    [page] = source.pages
    names = source.metadata["column_names"]
    assert names == ["code", "column 2", "note"]
    assert [read_row(line, names) for line in page.text.splitlines()] == [
        [("code", "E1; x; y"), ("note", "; z")],
        [("code", "E2"), ("note", "n: 1"), ("column 4", "extra; more")],
    ]
    # A line the names do not account for is no row of that table.
    assert read_row("dose: 5 mg", names) is None


def test_text_files_have_no_rows(tmp_path: Path) -> None:
    [page] = load(_write(tmp_path, "# Notes\n\nplain text\n", name="notes.md")).pages
    assert page.record_rows is None


def test_rows_with_fewer_or_more_cells_than_the_header_are_counted_in_the_metadata(tmp_path: Path) -> None:
    # A clinical trial: a dosing table's row missing its dose, or with a cell too many, loaded silently.
    path = tmp_path / "dosing.csv"
    path.write_text("drug,dose,note\nA,1 mg,ok\nB,2 mg\nC,3 mg,x,extra\nD,4 mg,y,\n", encoding="utf-8")

    source = load(path)

    # B lacks its note; C has text past the header; D's empty extra cell is no extra text.
    assert source.metadata["ragged_rows"] == "2 (rows 3, 4)"
    assert "ragged_rows" not in load(_write(tmp_path, "a,b\n1,2\n", "even.csv")).metadata
