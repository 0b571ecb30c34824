"""Ruled tables on a PDF page, written into its text as Markdown tables.

PDFium reads a ruled table as lines of space-separated cells ("Alabama 18,870 23,022 ..."), its header
far above them: a chunk holding later rows could not say what their numbers are. Written as a Markdown
table, as the HTML, Markdown and CSV loaders write theirs, the splitter gives each chunk of it the header
row as context (:func:`citeline.split._header_of`).

Only a table drawn with rules is found: its grid is read from the page's path objects (lines and the
edges of rectangles) with pdfplumber's cell finder, and its cells' text from PDFium's characters, so a
page is parsed once, by PDFium (pdfplumber parsing a page itself costs 200-700 ms). A cheap gate
(:func:`ruled`) spares most pages, which draw at most a few rules, any of that. A table replaces its
text only when that is safe (see :func:`with_tables`): no word is ever lost or repeated.
"""

from __future__ import annotations

import bisect
import ctypes
import itertools
import math
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pypdfium2.raw as pdfium_c

from citeline.load.pdfium_text import IndexedText, aligned

#: Segments this close to level or plumb (points, over their length) are rules.
_SLOPE = 0.5
#: Rules shorter than this (points) are not a table's: the short sides of a thin filled rectangle drawn
#: as a rule, a tick mark.
_MIN_RULE = 3.0
#: A page drawing fewer level or fewer plumb rules than this has no ruled table of two rows and two
#: columns (which takes three of each).
_GATE_RULES = 3
#: Rules this close (points) are one (pdfplumber's default: a cell's two borders drawn a hair apart, the
#: two long sides of a thin rectangle).
_SNAP = 3.0
#: Characters whose angle is read to tell which way a page's text runs.
_ANGLE_SAMPLE = 200
#: A table is kept when at least this share of its cells hold text: boxes around a figure are mostly empty.
_FILLED_SHARE = 0.5
#: Path objects nested deeper in form XObjects than this are not read (a pathological file).
_FORM_DEPTH = 8

_Matrix = tuple[float, float, float, float, float, float]
_IDENTITY: _Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)
#: A rule as (x0, y0, x1, y1) in page space, level or plumb.
_Rule = tuple[float, float, float, float]
#: A cell as (x0, top, x1, bottom) in reading space.
_Box = tuple[float, float, float, float]


def _times(m: _Matrix, n: _Matrix) -> _Matrix:
    """The matrix applying ``m`` then ``n`` (PDF row-vector convention)."""
    a, b, c, d, e, f = m
    p, q, r, s, t, u = n
    return (a * p + b * r, a * q + b * s, c * p + d * r, c * q + d * s, e * p + f * r + t, e * q + f * s + u)


def _matrix(obj: Any) -> _Matrix:
    m = pdfium_c.FS_MATRIX()
    if not pdfium_c.FPDFPageObj_GetMatrix(obj, ctypes.byref(m)):
        return _IDENTITY
    return (m.a, m.b, m.c, m.d, m.e, m.f)


def _paths(page: Any) -> Iterator[tuple[Any, _Matrix]]:
    """The page's path objects (raw handles), those in form XObjects too, each with its matrix to page
    space."""
    count = pdfium_c.FPDFPage_CountObjects(page.raw)
    stack: list[tuple[Any, int, _Matrix, int]] = [(None, count, _IDENTITY, 0)]
    while stack:
        form, count, outer, depth = stack.pop()
        for index in range(count):
            obj = (
                pdfium_c.FPDFPage_GetObject(page.raw, index)
                if form is None
                else pdfium_c.FPDFFormObj_GetObject(form, index)
            )
            kind = pdfium_c.FPDFPageObj_GetType(obj)
            if kind == pdfium_c.FPDF_PAGEOBJ_PATH:
                yield obj, _times(_matrix(obj), outer)
            elif kind == pdfium_c.FPDF_PAGEOBJ_FORM and depth < _FORM_DEPTH:
                inner = pdfium_c.FPDFFormObj_CountObjects(obj)
                if inner > 0:
                    stack.append((obj, inner, _times(_matrix(obj), outer), depth + 1))


def _rules(obj: Any, matrix: _Matrix) -> Iterator[_Rule]:
    """The level and plumb straight segments of path ``obj``, in page space; a closed subpath's closing
    side too (a rectangle's fourth)."""
    a, b, c, d, e, f = matrix
    x, y = ctypes.c_float(), ctypes.c_float()
    at = (ctypes.byref(x), ctypes.byref(y))
    start = last = None
    for index in range(pdfium_c.FPDFPath_CountSegments(obj)):
        segment = pdfium_c.FPDFPath_GetPathSegment(obj, index)
        pdfium_c.FPDFPathSegment_GetPoint(segment, *at)
        point = (x.value * a + y.value * c + e, x.value * b + y.value * d + f)
        kind = pdfium_c.FPDFPathSegment_GetType(segment)
        if kind == pdfium_c.FPDF_SEGMENT_MOVETO:
            start = point
        elif kind == pdfium_c.FPDF_SEGMENT_LINETO and last is not None:
            yield from _straight(last, point)
        if pdfium_c.FPDFPathSegment_GetClose(segment) and start is not None:
            yield from _straight(point, start)
        last = point


def _straight(p: tuple[float, float], q: tuple[float, float]) -> Iterator[_Rule]:
    dx, dy = abs(q[0] - p[0]), abs(q[1] - p[1])
    if max(dx, dy) >= _MIN_RULE and min(dx, dy) <= _SLOPE:
        yield (min(p[0], q[0]), min(p[1], q[1]), max(p[0], q[0]), max(p[1], q[1]))


def ruled(page: Any) -> bool:
    """Whether the pypdfium2 ``page`` draws three level and three plumb rules at least, as a ruled table
    of two rows and two columns does; it stops counting there. Most pages draw none or a few (a column
    rule, a line under a running head) and cost a walk over their objects."""
    level = plumb = 0
    for obj, matrix in _paths(page):
        for x0, y0, x1, y1 in _rules(obj, matrix):
            if x1 - x0 > y1 - y0:
                level += 1
            else:
                plumb += 1
            if level >= _GATE_RULES and plumb >= _GATE_RULES:
                return True
    return False


@dataclass(frozen=True)
class RuledTable:
    """A ruled table found on a page: its rows of cell texts (a column a spanning cell's text was not
    spread over is ``""``), the lines of text inside its frame above and below its rows (a title, a
    note: a row with one cell of text), and the span of the page's text it was read from (``start``,
    ``end``)."""

    rows: list[list[str]]
    start: int
    end: int
    above: list[str] = field(default_factory=list)
    below: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        """The table as a Markdown (GFM) table: its first row the header, then the ``| --- |`` row."""
        lines = [_pipe_row(self.rows[0]), _pipe_row(["---"] * len(self.rows[0]))]
        lines.extend(_pipe_row(row) for row in self.rows[1:])
        return "\n".join(lines)

    def text(self) -> str:
        """What replaces the table's span of the page's text: the lines above, the Markdown table and
        the lines below, each apart from the next by a blank line."""
        return "\n\n".join(
            part for part in ("\n".join(self.above), self.markdown(), "\n".join(self.below)) if part
        )


def _pipe_row(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def with_tables(page: Any, indexed: IndexedText, text: str) -> str:
    """``text`` (the page's text as PDFium reads it) with each ruled table on ``page`` written as a
    Markdown table, on lines of its own between blank lines.

    A table replaces its text only when that text is one run (the characters inside the table's box
    follow one another in the page's text, nothing else between them) and holds the same words as the
    Markdown table's cells, each as often (a word PDFium ran across a rule, "00" for two cells "0" and
    "0", counts as the two); otherwise the page keeps its text as it was. A page that is not
    :func:`ruled` is returned at once. ``indexed`` is the page's character-indexed text (its text page
    with it), read from PDFium only if the page is ruled.
    """
    if not ruled(page):
        return text
    for table in sorted(find_tables(page, indexed, text), key=lambda found: -found.start):
        before, after = text[: table.start].rstrip(), text[table.end :].lstrip()
        text = "\n\n".join(part for part in (before, table.text(), after) if part)
    return text


def find_tables(page: Any, indexed: IndexedText, text: str) -> list[RuledTable]:
    """The ruled tables of ``page`` whose text is safely one run of ``text`` (see :func:`with_tables`),
    of two rows and two columns at least and mostly filled, in the order of ``text``."""
    if len(indexed.text) != indexed.count:
        # PDFium's text did not come whole (see indexed_text): no character's box can be looked up.
        return []
    chars = _Chars(indexed, text)
    if chars.places is None:
        return []
    turn = chars.turn()
    level, plumb = [], []
    for obj, matrix in _paths(page):
        for rule in _rules(obj, matrix):
            x0, top, x1, bottom = _turned(rule, turn)
            edge = {
                "x0": x0,
                "x1": x1,
                "top": top,
                "bottom": bottom,
                "width": x1 - x0,
                "height": bottom - top,
            }
            if x1 - x0 > bottom - top:
                edge["top"] = edge["bottom"] = (top + bottom) / 2
                level.append(edge | {"orientation": "h"})
            else:
                edge["x0"] = edge["x1"] = (x0 + x1) / 2
                plumb.append(edge | {"orientation": "v"})
    if len(level) < _GATE_RULES or len(plumb) < _GATE_RULES:
        return []
    # Imported on first use: most documents have no ruled page, and pdfplumber pulls in pdfminer.
    from pdfplumber.table import (
        cells_to_tables,
        edges_to_intersections,
        intersections_to_cells,
        merge_edges,
    )

    edges = merge_edges(level + plumb, _SNAP, _SNAP, _SNAP, _SNAP)
    cells = intersections_to_cells(edges_to_intersections(edges, 1, 1))
    found = []
    for grid in cells_to_tables(cells):
        table = chars.table([_box(cell) for cell in grid], turn)
        if table is not None:
            found.append(table)
    found.sort(key=lambda table: table.start)
    # Tables whose runs overlap would replace each other's text: neither is kept.
    return [
        table
        for index, table in enumerate(found)
        if (index == 0 or found[index - 1].end <= table.start)
        and (index == len(found) - 1 or table.end <= found[index + 1].start)
    ]


def _box(cell: Any) -> _Box:
    x0, top, x1, bottom = cell
    return float(x0), float(top), float(x1), float(bottom)


def _turned(rule: _Rule, turn: int) -> tuple[float, float, float, float]:
    """``rule`` (page space, y up) as ``(x0, top, x1, bottom)`` in reading space: turned by ``turn``
    quarter turns so that the text runs left to right, y down."""
    x0, y0, x1, y1 = rule
    ax, atop = _reading((x0, y0), turn)
    bx, btop = _reading((x1, y1), turn)
    return min(ax, bx), min(atop, btop), max(ax, bx), max(atop, btop)


def _reading(point: tuple[float, float], turn: int) -> tuple[float, float]:
    """A page-space point in reading space (x right, y down along lines of text turned ``turn`` quarter
    turns anticlockwise)."""
    x, y = point
    for _ in range(turn % 4):
        x, y = y, -x
    return x, -y


class _Chars:
    """The characters of a PDFium text page: their boxes' centres and heights, and where each falls in
    the page's text (``places``, None when PDFium's character list and the text cannot be aligned)."""

    def __init__(self, indexed: IndexedText, text: str) -> None:
        raw = indexed.textpage.raw
        self.text = text
        count = indexed.count
        self.chars = indexed.text
        self.centres: list[tuple[float, float]] = []
        self.heights: list[float] = []
        # The loose box spans the font's ascent and descent: the characters of one line share its middle,
        # a comma's and an "x"'s alike.
        rect = pdfium_c.FS_RECTF()
        at = ctypes.byref(rect)
        for i in range(count):
            pdfium_c.FPDFText_GetLooseCharBox(raw, i, at)
            self.centres.append(((rect.left + rect.right) / 2, (rect.top + rect.bottom) / 2))
            self.heights.append(max(abs(rect.top - rect.bottom), abs(rect.right - rect.left)))
        # Which way the text runs, from a sample of its characters.
        self.angles: Counter[int] = Counter()
        for i in range(0, count, max(1, count // _ANGLE_SAMPLE)):
            if not self.chars[i].isspace():
                angle = float(pdfium_c.FPDFText_GetCharAngle(raw, i))
                # PDFium measures the angle clockwise; -1 when it has none.
                self.angles[-round(angle / (math.pi / 2)) % 4 if angle >= 0 else 0] += 1
        self.places = aligned(self.chars, text)

    def turn(self) -> int:
        """The quarter turns most of the page's text is set at (0: level, read left to right)."""
        return self.angles.most_common(1)[0][0] if self.angles else 0

    def table(self, grid: list[_Box], turn: int) -> RuledTable | None:
        """The table whose cells (reading-space boxes) are ``grid``, if it is kept (see
        :func:`find_tables`)."""
        assert self.places is not None
        lefts = sorted({cell[0] for cell in grid})
        tops = sorted({cell[1] for cell in grid})
        if len(lefts) < 2 or len(tops) < 2:
            return None
        right, bottom = max(c[2] for c in grid), max(c[3] for c in grid)
        # Each place of the grid (a column and a row between rules) to the cell covering it.
        covering: dict[tuple[int, int], _Box] = {}
        for cell in grid:
            for row in range(tops.index(cell[1]), bisect.bisect_left(tops, cell[3])):
                for col in range(lefts.index(cell[0]), bisect.bisect_left(lefts, cell[2])):
                    covering[row, col] = cell
        where: dict[int, tuple[_Box, float, float]] = {}
        for i, ch in enumerate(self.chars):
            if ch.isspace():
                continue
            x, y = _reading(self.centres[i], turn)
            if not (lefts[0] <= x <= right and tops[0] <= y <= bottom):
                continue
            found = covering.get((bisect.bisect_right(tops, y) - 1, bisect.bisect_right(lefts, x) - 1))
            if found is None:
                return None  # text in a hole of the grid: it is not what it seems
            where[i] = (found, x, y)
        if not where:
            return None
        inside = sorted(where)
        first, last = inside[0], inside[-1]
        if any(not self.chars[i].isspace() and i not in where for i in range(first, last + 1)):
            return None  # other text runs between the table's: it is not one run of the page's text
        column, groups = self._columns(where, lefts)
        slots = self._rows(where, column, groups, tops)
        if slots is None:
            return None
        above, rows, below, spread = slots
        start, end = self._lead(first), self.places[last] + 1
        table = RuledTable(rows, start, end, above, below)
        # A word PDFium ran across a rule ("0 00 0" for the cells "0", "0", "0", "0"; the last word of a row
        # and the first of the next, in text set sideways) is two words; nothing else may part a word.
        cuts = {
            self.places[i]
            for h, i in itertools.pairwise(inside)
            if where[h][0] != where[i][0] and self.places[i] == self.places[h] + 1
        }
        run = "".join(f" {ch}" if at in cuts else ch for at, ch in enumerate(self.text[start:end], start))
        return table if _same_words(table, run, spread) else None

    def _columns(
        self, where: dict[int, tuple[_Box, float, float]], lefts: list[float]
    ) -> tuple[dict[int, int], dict[int, range]]:
        """The column of each character: its cell's, or, in a cell spanning columns whose vertical rules
        stop short of it (a header over columns ruled below it), the column it stands over, when no word
        of the cell crosses from one column to the next.

        And the group names: in such a cell, a line above the names of its columns (a line of the cell
        spread over two columns at least) that stands in one column only and is centred over the cell's
        columns or crosses from one to the next ("Pre-Pawn" over "Handgun", "Long Gun" and "*Other")
        names all of them; its characters map to the columns of the cell (a name left in one column,
        in line with that column's, stays that column's alone)."""
        by_cell: dict[_Box, list[int]] = {}
        for i, (cell, _, _) in where.items():
            by_cell.setdefault(cell, []).append(i)
        column: dict[int, int] = {}
        groups: dict[int, range] = {}
        for cell, in_cell in by_cell.items():
            home = lefts.index(cell[0])
            span = range(home, max(home + 1, bisect.bisect_left(lefts, cell[2])))
            # Line by line: a group's name too wide for one column stays in the first, the names of the
            # columns under it are spread.
            # The lines standing in one column above the first spread over several (None past it), and
            # whether each crosses from one column to the next.
            single: list[tuple[list[int], bool]] | None = []
            for indices in self._lines(in_cell, where):
                over = [max(bisect.bisect_right(lefts, where[i][1]) - 1, home) for i in indices]
                pairs = zip(indices, indices[1:], over, over[1:], strict=False)
                crossing = any(j == i + 1 and a != b for i, j, a, b in pairs)
                if crossing or any(lefts[c] >= cell[2] for c in over):
                    over = [home] * len(indices)
                column.update(zip(indices, over, strict=True))
                if single is None:
                    continue
                if len(set(over)) > 1:
                    # The names of the columns: the lines above them in one column may be groups' names.
                    for line, wide in single:
                        if wide or self._centred(line, where, cell, lefts, span):
                            groups.update(dict.fromkeys(line, span))
                    single = None
                else:
                    single.append((indices, crossing))
        return column, groups

    @staticmethod
    def _centred(
        line: list[int],
        where: dict[int, tuple[_Box, float, float]],
        cell: _Box,
        lefts: list[float],
        span: range,
    ) -> bool:
        """Whether the characters ``line`` stand centred over the columns ``span`` of ``cell``: the middle
        of their run within a quarter of the narrowest of those columns of the cell's middle."""
        if len(span) < 2:
            return False
        edges = [*lefts[span.start + 1 : span.stop], cell[2]]
        narrowest = min(right - left for left, right in zip([cell[0], *edges], edges, strict=False))
        xs = [where[i][1] for i in line]
        return abs((min(xs) + max(xs)) / 2 - (cell[0] + cell[2]) / 2) <= narrowest / 4

    def _rows(
        self,
        where: dict[int, tuple[_Box, float, float]],
        column: dict[int, int],
        groups: dict[int, range],
        tops: list[float],
    ) -> tuple[list[str], list[list[str]], list[str], Counter[str]] | None:
        """The lines above the table, its rows of cell texts, the lines below and the words the header
        repeats (a group's name spread over its columns, each copy after the first), from each
        character's ``column`` and the row (between two level rules) it stands in; None if fewer than two
        rows are left or they are mostly empty.

        A row holding several lines of text across its cells is a band of rows with no rules between
        them (ruled every fifth row, say): each line is a row. The first row under the title is the header
        and, when rows follow it, kept whole, its lines read as one header. A row whose text stands in
        one column at the top or foot of the frame is a title or a note: a line of text. In the header,
        a group's name (``groups``) follows the name of each column it spans ("Handgun Pre-Pawn").
        """
        bands: dict[int, list[int]] = {}
        for i, (cell, _, _) in where.items():
            bands.setdefault(tops.index(cell[1]), []).append(i)
        order = [bands[band] for band in sorted(bands)]
        above: list[list[int]] = []
        below: list[list[int]] = []
        while order and len({column[i] for i in order[0]}) <= 1:
            above.append(order.pop(0))
        while order and len({column[i] for i in order[-1]}) <= 1:
            below.insert(0, order.pop())
        lines: list[list[int]] = []
        for number, band in enumerate(order):
            split = self._lines(band, where)
            banded = len(split) > 1 and all(len({column[i] for i in line}) >= 2 for line in split)
            if banded and not (number == 0 and len(order) > 1):
                lines.extend(split)
            else:
                lines.append(band)
        width = max(column.values()) + 1
        rows = [
            [self._cell_text([i for i in line if column[i] == c]) for c in range(width)] for line in lines
        ]
        spread: Counter[str] = Counter()
        header = [i for i in lines[0] if i in groups] if len(order) > 1 else []
        if header:
            own = [i for i in lines[0] if i not in groups]
            for c in range(width):
                named = [i for i in header if c in groups[i]]
                rows[0][c] = " ".join(
                    text
                    for text in (self._cell_text([i for i in own if column[i] == c]), self._cell_text(named))
                    if text
                )
            for span in set(groups[i] for i in header):
                copies = self._cell_text([i for i in header if groups[i] == span]).split()
                spread.update({word: n * (len(span) - 1) for word, n in Counter(copies).items()})
        used = [c for c in range(width) if any(row[c] for row in rows)]
        rows = [[row[c] for c in used] for row in rows]
        filled = sum(1 for row in rows for text in row if text)
        if len(rows) < 2 or len(used) < 2 or filled < _FILLED_SHARE * len(rows) * len(used):
            return None
        above_text, below_text = (
            [self._cell_text(line) for line in above],
            [self._cell_text(line) for line in below],
        )
        return above_text, rows, below_text, spread

    def _lines(self, band: list[int], where: dict[int, tuple[_Box, float, float]]) -> list[list[int]]:
        """The characters of ``band`` by the line of text they stand on, top down, each in text order."""
        tolerance = max(1.0, 0.5 * statistics.median(self.heights[i] for i in band))
        lines: list[tuple[float, list[int]]] = []
        for i in sorted(band, key=lambda i: where[i][2]):
            y = where[i][2]
            if lines and y - lines[-1][0] <= tolerance:
                lines[-1][1].append(i)
            else:
                lines.append((y, [i]))
        return [sorted(line) for _, line in lines]

    def _cell_text(self, indices: list[int]) -> str:
        """The text of the characters ``indices`` (in text order) on one line: as the page's text has
        them (with any mark put in before one, as a superscript's ``^``), apart where others come
        between."""
        assert self.places is not None
        parts: list[str] = []
        for n, i in enumerate(indices):
            if n and indices[n - 1] != i - 1:
                parts.append(" ")
            parts.append(self.text[self._lead(i) : self.places[i] + 1])
        return " ".join("".join(parts).split())

    def _lead(self, index: int) -> int:
        """Where character ``index``'s text starts: at the mark put in the page's text before it since
        PDFium read it, if any (a superscript's ``^``), else at the character."""
        assert self.places is not None
        return self.places[index - 1] + 1 if index else 0


def _same_words(table: RuledTable, run: str, spread: Counter[str]) -> bool:
    """Whether ``table``, read back as citeline reads a Markdown table's cells, holds the words of
    ``run`` (its text on the page), each as often (but for the copies ``spread`` of a group's name over
    its columns), and PDFium marked no hyphen it dropped at a line's end in ``run`` (which the loader
    turns back into a line break)."""
    from citeline.types import table_cells

    rows = table.markdown().split("\n")
    words = [word for row in rows[:1] + rows[2:] for cell in table_cells(row) for word in cell.split()]
    words.extend(word for line in table.above + table.below for word in line.split())
    return "\x02" not in run and Counter(words) == Counter(run.split()) + spread
