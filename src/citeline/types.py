"""The values that flow between pipeline stages: load -> pages -> split -> chunks.

Plain frozen dataclasses so every stage can be used and tested on its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

#: What a loader found in a source itself (a PDF's author, a Markdown file's front matter): strings, and
#: lists of them (front-matter ``tags: [a, b]``).
SourceMetadata = dict[str, str | list[str]]


@dataclass(frozen=True, slots=True)
class Section:
    """A heading that starts at character ``start`` of its page's text."""

    start: int
    heading: str


@dataclass(frozen=True, slots=True)
class Page:
    """The cleaned text of one page (1-based ``number``) of a source.

    ``sections`` lists the headings that start on this page, in order. ``records``, when set, marks
    spans of ``text`` that must each become exactly one chunk (CSV rows), as ``(start, end)`` pairs.
    ``record_rows``, when set, gives each record's row in the source file, as a spreadsheet numbers it
    (one per record, in the same order): a character span on page 1 finds nothing in a spreadsheet.
    """

    number: int
    text: str
    sections: tuple[Section, ...] = ()
    records: tuple[tuple[int, int], ...] | None = None
    record_rows: tuple[int, ...] | None = None


@dataclass(slots=True)
class LoadedSource:
    """A source being loaded: its type and title now, its pages lazily.

    ``pages`` is an iterator so a long PDF is never held in memory whole; it may raise
    :class:`citeline.errors.LoadError` while being consumed.
    """

    content_type: str
    title: str
    pages: Iterator[Page]
    metadata: SourceMetadata = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChunkDraft:
    """A chunk before it is embedded: its text and where it came from.

    ``start`` and ``end`` are character offsets into the text of page ``page``, so
    ``page.text[start:end] == text`` always holds. ``section`` is the heading its text is under: the last
    heading started at or before ``start`` (carried over from earlier pages), or, for a chunk that
    starts with headings that have nothing under them, the last of those. ``context`` is text
    the chunk is read with but does not hold: the header row of a Markdown table whose rows it
    continues, without which its cells are values under no names. It is embedded and indexed with
    the chunk (:func:`embedding_text`) and never shown as part of its text. ``rows`` is the first and
    last row of the source file the chunk's text comes from (a CSV's, :attr:`Page.record_rows`), None
    for a source without rows.
    """

    index: int
    text: str
    page: int
    start: int
    end: int
    section: str | None = None
    context: str | None = None
    rows: tuple[int, int] | None = None


def counted(n: int, noun: str) -> str:
    """``1 page``, ``2 pages``: a count with its noun (a regular plural), as messages say them."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


#: The characters that do not print as themselves: C0 and C1 controls (a newline, ESC that starts a
#: terminal's colour codes), the line and paragraph separators, and the marks that reorder text from
#: right to left (a name ending "\u202etxt.exe" reads as "exe.txt").
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with the characters that do not print as themselves shown as escapes (``\\n``,
    ``\\x1b``, ``\\u202e``), as Python writes them: a name in a line of output stays on that line, and
    cannot recolour the terminal or reverse what follows it. The text output of every command shows
    names and messages through this; their JSON keeps the characters."""
    return _UNPRINTABLE.sub(lambda m: _ESCAPES.get(m[0]) or repr(m[0])[1:-1], text)


def embedding_text(text: str, context: str | None) -> str:
    """What is embedded and indexed for a chunk: its ``context`` (when it has one) on a line before
    its text. Every path that embeds a stored chunk (ingest, vector repair) goes through this, so a
    chunk's vector is the same whichever made it."""
    return f"{context}\n{text}" if context else text


#: A pipe that parts two cells of a Markdown table's row: one no backslash escapes.
CELL_BORDER = re.compile(r"(?<!\\)\|")


def table_cells(row: str) -> list[str]:
    """The cells of a Markdown table's row, stripped: ``| a | b |`` gives ``["a", "b"]``, and so does
    ``a | b`` (outer pipes left out); a pipe escaped in a cell (``\\|``, as the loaders write one) is the
    cell's own: ``| a \\| b | c |`` gives ``["a | b", "c"]``. The loaders and the answer read rows alike."""
    inner = row.strip().removeprefix("|")
    if inner.endswith("|") and not inner.endswith("\\|"):
        inner = inner[:-1]
    return [cell.strip().replace("\\|", "|") for cell in CELL_BORDER.split(inner)]
