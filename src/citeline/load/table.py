"""Delimited tables (.csv, .tsv): one record per data row, all on page 1.

Named ``table`` rather than ``csv`` so it can never shadow the standard library module it uses.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path

from citeline.errors import LoadError
from citeline.load.clean import clean_inline
from citeline.load.text import read_text_file
from citeline.types import LoadedSource, Page, SourceMetadata

_DELIMITERS = ",;\t|"
_SNIFF_SAMPLE = 64 * 1024
# Excel's hint on a CSV's first line naming its delimiter ("sep=;"): Excel reads it and hides it, so it
# is neither the header nor a row.
# Some tools write it quoted, as a one-cell row ('"sep=;"').
_SEPARATOR_LINE = re.compile(r"(\"?)sep=([^\r\n\"])\1[ \t]*(?:\r\n|\r|\n|$)")


def _dialect(text: str, suffix: str) -> type[csv.Dialect]:
    if suffix == ".tsv":
        return csv.excel_tab
    sample = text[:_SNIFF_SAMPLE]
    if len(text) > _SNIFF_SAMPLE:
        # A row cut in half would look like a row with fewer delimiters.
        sample = sample[: sample.rfind("\n") + 1] or sample
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=_DELIMITERS)
    except csv.Error:
        # The sniffer gives up on single-column files and on samples it finds ambiguous.
        return csv.excel
    # A quote inside a quoted cell is written twice ("3/4"" steel"), as Excel and RFC 4180 have it. The
    # sniffer says otherwise whenever such a cell also holds the delimiter, and without an escape
    # character (which it never finds) a quote inside a cell could not be written at all.
    dialect.doublequote = True
    return dialect


def _rows(
    text: str, dialect: type[csv.Dialect], delimiter: str, *, quotes: bool
) -> list[tuple[int, list[str]]]:
    """The rows of ``text`` that hold any text, each with its number (1-based) among all the rows of
    ``text``, as a spreadsheet shows them: a blank row left out still counts, and a quoted cell over
    several lines is one row. With ``quotes`` false, a quote is a character as any."""
    stream = io.StringIO(text, newline="")
    if quotes:
        reader = csv.reader(stream, dialect, delimiter=delimiter)
    else:
        reader = csv.reader(stream, dialect, delimiter=delimiter, quoting=csv.QUOTE_NONE)
    return [(number, row) for number, row in enumerate(reader, start=1) if any(cell.strip() for cell in row)]


def _fitting(rows: list[tuple[int, list[str]]]) -> int:
    """How many of ``rows`` have as many cells as the first (the header)."""
    return sum(len(row) == len(rows[0][1]) for _, row in rows) if rows else 0


def render_rows(
    header: list[str], rows: list[tuple[int, list[str]]]
) -> tuple[str, tuple[tuple[int, int], ...], tuple[int, ...]]:
    """Render each row as ``name: value; other: value2`` on its own line.

    Empty cells are skipped and rows with no value at all are dropped. Cells beyond the header are
    named ``column N`` (1-based). ``rows`` are ``(number, cells)``; returned are the text, and the
    ``(start, end)`` span and the number of each rendered row.
    """
    names = column_names(header)
    lines: list[str] = []
    spans: list[tuple[int, int]] = []
    kept: list[int] = []
    offset = 0
    for number, row in rows:
        fields = []
        for column, raw in enumerate(row):
            value = clean_inline(raw)
            if not value:
                continue
            name = names[column] if column < len(names) else _extra(column)
            fields.append(f"{name}: {value}")
        if not fields:
            continue
        line = "; ".join(fields)
        if lines:
            offset += 1  # the newline before this row
        spans.append((offset, offset + len(line)))
        kept.append(number)
        lines.append(line)
        offset += len(line)
    return "\n".join(lines), tuple(spans), tuple(kept)


def column_names(header: list[str]) -> list[str]:
    """The names :func:`render_rows` writes the cells of each column under: the header's, cleaned, and
    ``column N`` (1-based) for a column the header leaves unnamed."""
    return [clean_inline(name) or _extra(column) for column, name in enumerate(header)]


def _extra(column: int) -> str:
    return f"column {column + 1}"


_EXTRA_NAME = re.compile(r"column ([1-9][0-9]*): ")


def read_row(line: str, columns: Sequence[str]) -> list[tuple[str, str]] | None:
    """The ``(name, value)`` fields of ``line``, a row :func:`render_rows` wrote for a table whose
    columns it named ``columns`` (:func:`column_names`, kept as the ``column_names`` metadata); None
    when the names cannot account for the whole line.

    The rendered text does not escape a cell holding "; " or ": " ("take with food; avoid alcohol",
    "ratio: 1:2"), so splitting at each "; " misreads it. Read by the names, in their order (an empty
    cell is left out; a cell beyond the header is ``column N``), a field ends only where "; " and a
    later column's name and ": " follow. A cell that itself holds "; " and a later column's name and
    ": " is ambiguous still: the reading that ends each field earliest is taken.
    """
    known: dict[tuple[int, int], list[tuple[str, str]] | None] = {}

    def starting(at: int, column: int) -> list[tuple[int, str]]:
        """The columns from ``column`` on whose name and ": " begin the line at ``at``."""
        found = [
            (index, name)
            for index, name in enumerate(columns[column:], start=column)
            if line.startswith(f"{name}: ", at)
        ]
        extra = _EXTRA_NAME.match(line, at)
        if extra and int(extra.group(1)) - 1 >= max(column, len(columns)):
            found.append((int(extra.group(1)) - 1, extra.group(0)[:-2]))
        return found

    def fields(at: int, column: int) -> list[tuple[str, str]] | None:
        if (at, column) not in known:
            known[(at, column)] = None
            for index, name in starting(at, column):
                start = at + len(name) + 2
                cut = line.find("; ", start)
                while cut != -1:
                    rest = fields(cut + 2, index + 1) if cut > start else None
                    if rest is not None:
                        known[(at, column)] = [(name, line[start:cut]), *rest]
                        break
                    cut = line.find("; ", cut + 1)
                else:
                    if start < len(line):
                        known[(at, column)] = [(name, line[start:])]
                if known[(at, column)] is not None:
                    break
        return known[(at, column)]

    return fields(0, 0)


def load_csv(path: Path) -> LoadedSource:
    """Load a CSV or TSV file: the header row names the fields, each data row becomes one record.

    The delimiter of a ``.csv`` is sniffed (comma, semicolon, tab or pipe), unless a first line such as
    ``sep=;`` names it, as for Excel. The single page's ``records`` hold each row's span, so no row is
    ever split across chunks or merged with another, and its ``record_rows`` each row's number as a
    spreadsheet shows it: the header is row 1 (the ``sep=`` line, which Excel hides, is no row), and
    blank rows, left out, still count.
    Short rows simply lack the missing fields; long rows name the extra cells ``column N``; either is
    counted in the metadata's ``ragged_rows`` ("2 (rows 5, 9)"), which ``citeline ingest`` shows.
    """
    source = str(path)
    text = read_text_file(path)
    separator = _SEPARATOR_LINE.match(text)
    dialect: type[csv.Dialect]
    if separator:
        text, dialect, delimiter = text[separator.end() :], csv.excel, separator.group(2)
    else:
        dialect = _dialect(text, path.suffix.lower())
        delimiter = dialect.delimiter
    try:
        rows = _rows(text, dialect, delimiter, quotes=True)
        if any("\n" in cell or "\r" in cell for _, row in rows for cell in row):
            # A cell over several lines is a quoted one, or a quote that opens no quoted cell (a TSV's
            # '"unbalanced title', 5" pipe) and runs on to the next quote or the end of the file,
            # taking the rows on its way into one cell. Then the rows read with quotes as plain
            # characters fit the header better, and are those.
            plain = _rows(text, dialect, delimiter, quotes=False)
            if _fitting(plain) > _fitting(rows):
                rows = plain
    except csv.Error as exc:
        raise LoadError(source, f"malformed CSV ({exc})") from exc
    if not rows:
        raise LoadError(source, "empty file")
    (_, header), data = rows[0], rows[1:]
    body, records, numbers = render_rows(header, data)
    if not records:
        raise LoadError(source, "no data rows (header only)")
    page = Page(number=1, text=body, records=records, record_rows=numbers)
    # The names, kept beside the text a search hit holds, read a row back whole (read_row), whatever its
    # cells hold, without changing the text that is embedded and indexed.
    metadata: SourceMetadata = {
        "rows": str(len(records)),
        "columns": str(len(header)),
        "column_names": column_names(header),
    }
    ragged = [number for number, row in data if _ragged(row, len(header))]
    if ragged:
        metadata["ragged_rows"] = _ragged_words(ragged)
    return LoadedSource(content_type="text/csv", title=path.stem, pages=iter([page]), metadata=metadata)


#: Rows a ragged table's metadata names, at most.
_RAGGED_NAMED = 5


def _ragged(row: list[str], columns: int) -> bool:
    """Whether ``row`` has fewer cells than the header, or text in cells beyond it: in a dosing table, a
    row missing its dose or with one cell too many is a mistake its reader should hear of."""
    return len(row) < columns or any(cell.strip() for cell in row[columns:])


def _ragged_words(numbers: list[int]) -> str:
    """``3 (rows 5, 9, 12)``: how many rows are ragged, and the first of them, numbered as a spreadsheet
    numbers them."""
    named = ", ".join(str(n) for n in numbers[:_RAGGED_NAMED])
    more = ", ..." if len(numbers) > _RAGGED_NAMED else ""
    return f"{len(numbers)} (row{'s' if len(numbers) > 1 else ''} {named}{more})"
