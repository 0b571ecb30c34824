"""Split pages into chunks with a recursive character splitter that streams page by page.

Each region of a page (the whole text, or each CSV record) is cut into *pieces*: a region that fits
in ``chunk_size`` is one piece; a larger one is cut at blank lines, then line breaks, then sentence
ends, then whitespace, then every few characters, going one level finer only for the parts that
still do not fit. Neighbouring pieces are then merged greedily into chunks of at most ``chunk_size``
characters, each chunk after the first reaching back up to ``chunk_overlap`` characters into the
previous one.

Pieces and chunks are ``(start, end)`` offsets into the page text with surrounding whitespace moved
outside them, so a chunk's text is always ``page.text[start:end]`` and never blank.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence

from citeline.errors import InvalidRequestError
from citeline.types import ChunkDraft, Page

__all__ = [
    "CHUNK_OVERLAP_MAX",
    "CHUNK_SIZE_MAX",
    "CHUNK_SIZE_MIN",
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "rebuild_page_text",
    "sentence_ends",
    "split",
]

DEFAULT_CHUNK_SIZE = 800
"""Characters per chunk unless the caller asks otherwise."""

DEFAULT_CHUNK_OVERLAP = 120
"""Characters each chunk repeats from the end of the one before it, unless the caller asks otherwise."""

CHUNK_SIZE_MIN = 50
"""The smallest chunk size a document may be ingested with: smaller chunks hold a few words each,
too little to embed or to cite, and multiply the rows stored."""

CHUNK_SIZE_MAX = 20_000
"""The largest chunk size a document may be ingested with: far past the embedder's window, whose
excess would be embedded by nothing."""

CHUNK_OVERLAP_MAX = 10_000
"""The largest chunk overlap a document may be ingested with (it must also stay below the size)."""

_Span = tuple[int, int]
_Cuts = Callable[[str, int, int], Iterator[int]]

_PARAGRAPH = re.compile(r"\n[^\S\n]*\n")
_LINE = re.compile(r"\n")
# A terminator, with any closing quotes or brackets (escaped to keep this file ASCII-readable),
# that whitespace follows; or a CJK full stop, which needs none since those scripts put no space
# between sentences.
_CLOSERS = r"\"'\u201d\u2019)\]\u300d\u300f\uff09"
_SENTENCE = re.compile(rf"[.?!][{_CLOSERS}]*(?=\s)|[\u3002\uff01\uff1f]+[{_CLOSERS}]*")
_WHITESPACE = re.compile(r"\s+")
_NON_SPACE = re.compile(r"\S")

# Lower-case words that a period follows without ending the sentence ("et al." ends in "al").
_ABBREVIATIONS = frozenset(
    {
        "al", "approx", "ca", "cf", "ch", "co", "corp", "dept", "dr", "eq", "eqs", "fig", "figs",
        "inc", "jr", "ltd", "mr", "mrs", "ms", "p", "pp", "prof", "ref", "refs", "sec", "sr", "st",
        "tab", "vol", "vs",
    }
)  # fmt: skip
# Words that abbreviate only before a number: "ranges in size from No. 6 up to 1/4 inch" goes on, while
# "The answer is no. Then ..." ends.
_BEFORE_NUMBER = frozenset({"no", "nos", "art", "arts", "para", "paras", "sect", "pt", "pts"})
_NUMBERED = re.compile(r"\s+\d")
# "e.g", "i.e", "U.S", "Ph.D": letters with inner periods; or one capital letter, an initial.
_DOTTED_OR_INITIAL = re.compile(r"(?:[^\W\d_]{1,2}\.)+[^\W\d_]{1,2}|[A-Z]")
_OPENING_PUNCTUATION = "([{\"'\u201c\u2018"
# An abbreviation is never longer than this, so only this much text before a period is examined.
_ABBREVIATION_WINDOW = 12


def split(pages: Iterable[Page], *, chunk_size: int, chunk_overlap: int) -> Iterator[ChunkDraft]:
    """Cut ``pages`` into chunks of at most ``chunk_size`` characters, lazily, in page order.

    Pages are consumed one at a time and chunks are yielded as soon as they are known, so a long
    document never sits in memory whole. Chunks never cross a page, nor a section's heading (see
    :func:`_section_regions`); ``index`` runs from 0 across all pages. Each chunk after the first of a
    section (or of a CSV record) starts up to ``chunk_overlap`` characters before the end of the
    previous one, at the first paragraph, line, sentence or else word start in reach (see
    :func:`_overlap_start`); the overlap is shorter, or none, when no word starts in it or the chunk's
    first new piece leaves no room. When a page has
    ``records``, each record becomes one chunk (several if it is longer than ``chunk_size``) and text
    outside the records is ignored; with ``record_rows`` too, each chunk's ``rows`` is its record's.

    Raises :class:`InvalidRequestError` at once if ``chunk_size`` or ``chunk_overlap`` is out of
    range, and :class:`ValueError` while iterating if a page's record lies outside its text, or its
    ``record_rows`` are not one per record.
    """
    if chunk_size < 1:
        raise InvalidRequestError(f"chunk_size must be at least 1 character, got {chunk_size}")
    if not 0 <= chunk_overlap < chunk_size:
        raise InvalidRequestError(
            f"chunk_overlap must be at least 0 and less than chunk_size ({chunk_size}), got {chunk_overlap}"
        )
    return _split(pages, chunk_size, chunk_overlap)


def _split(pages: Iterable[Page], size: int, overlap: int) -> Iterator[ChunkDraft]:
    index = 0
    carried: str | None = None
    for page in pages:
        text = page.text
        sections = sorted(page.sections, key=lambda section: section.start)
        section_starts = [section.start for section in sections]
        regions: Sequence[tuple[int, int, int]]
        if page.records is not None:
            regions = [(start, end, start) for start, end in page.records]
        else:
            regions = _section_regions(text, section_starts)
        if page.record_rows is not None and len(page.record_rows) != len(regions):
            raise ValueError(
                f"page {page.number}: {len(page.record_rows)} record rows for {len(regions)} records"
            )
        tables = _tables(text) if page.records is None else []
        table_starts = [body_start for body_start, _, _ in tables]
        for at, (region_start, region_end, anchor) in enumerate(regions):
            # Each record is chunked on its own: every chunk of it holds its one row of the file.
            row = None if page.record_rows is None else page.record_rows[at]
            if not 0 <= region_start <= region_end <= len(text):
                raise ValueError(
                    f"page {page.number}: record ({region_start}, {region_end}) is not a span of its "
                    f"{len(text)}-character text"
                )
            for start, end in _chunk_spans(text, region_start, region_end, size, overlap):
                # A chunk reaching past the headings its region starts with is cited under the last: a
                # note's title over "## When to use" heads nothing of its own, and the chunk's text is
                # under "When to use" (a title is shown as the document's anyway).
                in_force = bisect_right(section_starts, anchor if start < anchor < end else start)
                in_table = bisect_right(table_starts, start)
                yield ChunkDraft(
                    index=index,
                    text=text[start:end],
                    page=page.number,
                    start=start,
                    end=end,
                    section=sections[in_force - 1].heading if in_force else carried,
                    context=_header_of(tables[in_table - 1], start) if in_table else None,
                    rows=None if row is None else (row, row),
                )
                index += 1
        if sections:
            carried = sections[-1].heading


def rebuild_page_text(chunks: Iterable[tuple[int, int, str]]) -> str:
    """A page's text rebuilt from its chunks' ``(start, end, text)``, as long as their last end: each
    chunk's text at its offsets, so they index the result exactly.

    What no chunk covers is whitespace the splitter trimmed between chunks (or, on a page of records,
    text outside them), which is not stored: read as spaces, a heading ran on from the sentence before
    it. Page text is cleaned (no trailing spaces, at most one blank line in a row) and chunks end where
    pieces do, at blank lines first, then line breaks, so a gap between chunks is put back as a line
    break when it is one character and as a blank line when it is two; a longer one as a line break
    and an even indent, else a blank line and the rest as indent (on this repository's docs and PDF
    fixtures at the default chunk size 334 of 348 gaps come back exactly, against 14 as spaces; the
    rest were spaces in lines longer than a chunk). Characters before the first chunk read as spaces.
    """
    text: list[str] = []
    for start, end, chunk in sorted(chunks, key=lambda c: c[0]):
        gap = start - len(text)
        if gap > 0:
            text.extend(_gap(gap) if text else " " * gap)
        text[start:end] = chunk
    return "".join(text)


def _gap(length: int) -> str:
    if length == 1:
        return "\n"
    if length > 2 and (length - 1) % 2 == 0:
        return "\n" + " " * (length - 1)
    return "\n\n" + " " * (length - 2)


def _section_regions(text: str, section_starts: Sequence[int]) -> list[tuple[int, int, int]]:
    """``text`` cut at its headings into ``(start, end, anchor)`` regions that no chunk crosses: a chunk
    that ran on from one section into the next was cited under the first heading for text under the
    second. A heading with nothing under it before the next one ("## Ingesting" over "### Folders")
    goes with the next region, and ``anchor`` is where that region's own heading starts: a chunk that
    reaches past it is cited under it (see :func:`_split`)."""
    regions: list[tuple[int, int, int]] = []
    start = anchor = 0
    heading = 0 if 0 in section_starts else None  # the section being looked at (None: text before any)
    for cut in sorted({cut for cut in section_starts if 0 < cut < len(text)}):
        if heading is not None and _only_heading(text[heading:cut]):
            anchor = cut
        else:
            regions.append((start, cut, anchor))
            start = anchor = cut
        heading = cut
    regions.append((start, len(text), anchor))
    return regions


def _only_heading(region: str) -> bool:
    """Whether ``region`` (from a heading to the next) holds its heading line and nothing else (a
    setext heading's underline aside)."""
    _, _, rest = region.strip().partition("\n")
    return not rest.strip() or bool(_SETEXT_UNDERLINE.fullmatch(rest.strip()))


_SETEXT_UNDERLINE = re.compile(r"=+|-+")


# A Markdown (GFM) table: a header row with at least one pipe, then its delimiter row of dashes with
# optional alignment colons and at least one pipe (a line of dashes alone underlines a heading), then
# the body, one row a line up to a blank line or a line without a pipe.
_TABLE = re.compile(
    r"^[^\S\n]{0,3}(?P<header>(?=[^\n]*\|)[^\n]*+)\n"
    # Possessive: a long line of dashes and pipes that turns out not to be a delimiter row ("|---|---
    # ... x") is given up at once, not tried every way of cutting it (quadratic: 27 s at 128 KB).
    r"[^\S\n]{0,3}(?=[^\n]*\|)\|?+[^\S\n]*+:?+-++:?+[^\S\n]*+(?:\|[^\S\n]*+:?+-++:?+[^\S\n]*+)*+\|?+[^\S\n]*+$"
    r"(?P<body>(?:\n(?=[^\n]*\|)[^\n]*+)*+)",
    re.MULTILINE,
)
_Table = tuple[int, int, str]


def _tables(text: str) -> list[_Table]:
    """The Markdown tables of ``text`` as ``(body start, body end, header row)``, in order."""
    if "|" not in text or "-" not in text:
        return []
    return [
        (match.start("body"), match.end("body"), match["header"].strip())
        for match in _TABLE.finditer(text)
        if match["body"]
    ]


def _header_of(table: _Table, start: int) -> str | None:
    """The header row a chunk starting at ``start`` is read with: its table's, when the chunk starts
    among the table's rows (and so does not hold the header itself)."""
    body_start, body_end, header = table
    return header if body_start <= start < body_end else None


def _chunk_spans(text: str, start: int, end: int, size: int, overlap: int) -> Iterator[_Span]:
    """Merge the pieces of ``text[start:end]`` greedily into overlapping chunks of at most ``size``."""
    chunk: _Span | None = None
    previous_end: int | None = None
    line_starts = _LineStarts(text)
    for piece_start, piece_end in _pieces(text, start, end, 0, size, size - overlap):
        if chunk is not None:
            if piece_end - chunk[0] <= size:
                chunk = (chunk[0], piece_end)
                continue
            yield chunk
            previous_end = chunk[1]
        chunk_start = piece_start
        if previous_end is not None:
            chunk_start = _overlap_start(
                text, previous_end, piece_start, piece_end, size, overlap, line_starts
            )
        chunk = (chunk_start, piece_end)
    if chunk is not None:
        yield chunk


class _LineStarts:
    """Where the line holding an offset of ``text`` starts, for offsets asked in increasing order.

    Each answer searches back only to the offset asked before it: a line break searched for back to the
    line's start from every chunk scanned a single-line text once per chunk (quadratic: a 50 MB line
    took minutes to split, its later chunks ever slower).
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._asked = 0
        self._start = 0

    def of(self, offset: int) -> int:
        if offset < self._asked:  # out of order: searched for alone
            return self._text.rfind("\n", 0, offset) + 1
        newline = self._text.rfind("\n", self._asked, offset)
        if newline >= 0:
            self._start = newline + 1
        self._asked = offset
        return self._start


def _overlap_start(
    text: str,
    previous_end: int,
    piece_start: int,
    piece_end: int,
    size: int,
    overlap: int,
    line_starts: _LineStarts,
) -> int:
    """Where a chunk whose first new piece is ``text[piece_start:piece_end]`` should start.

    As far back as ``overlap`` allows but no further than leaves room for the piece, then forward to
    the first start of a paragraph, else of a line, else of a sentence, else of a word: the splitter's
    own cuts, coarsest first, so a chunk of table rows or PDF lines starts with a whole row or line
    rather than the tail of one. The piece did not fit in the previous chunk, so leaving room for it
    also keeps the new chunk starting after the previous one.
    """
    earliest = max(previous_end - overlap, piece_end - size)
    if earliest >= previous_end:
        return piece_start
    # From a little before: the separator (a line break, a full stop) may end just before ``earliest``.
    look_from = max(0, earliest - _ABBREVIATION_WINDOW)
    for depth, cuts in enumerate(_CUTTERS):
        for cut in cuts(text, look_from, previous_end):
            first = _NON_SPACE.search(text, cut, previous_end)
            if first is None:
                break
            if first.start() >= earliest:
                if depth > _LINE_DEPTH and _TABLE_ROW.match(text, line_starts.of(first.start())):
                    # Half a Markdown table row is cells under no header, in no row: no overlap instead.
                    return piece_start
                return first.start()
    # No word starts in the overlap: only if the previous chunk already had to cut through a word
    # (text without whitespace) may the overlap start inside that word; otherwise there is none.
    cut_through_word = not text[previous_end - 1].isspace() and not text[previous_end].isspace()
    return earliest if cut_through_word else piece_start


def _pieces(text: str, start: int, end: int, level: int, size: int, stride: int) -> Iterator[_Span]:
    """Yield whitespace-trimmed spans, each at most ``size`` long, covering all non-blank text.

    Separators are tried from ``level`` on; a part that fits in ``size`` is never cut further. Text
    without whitespace is cut every ``stride`` characters, which leaves the merge room for overlap.
    """
    start, end = _strip(text, start, end)
    if end - start <= size:
        if start < end:
            yield start, end
        return
    for depth in range(level, len(_CUTTERS)):
        cuts = _CUTTERS[depth](text, start, end)
        first = next(cuts, None)
        if first is None:
            continue
        yield from _pieces(text, start, first, depth + 1, size, stride)
        previous = first
        for cut in cuts:
            yield from _pieces(text, previous, cut, depth + 1, size, stride)
            previous = cut
        yield from _pieces(text, previous, end, depth + 1, size, stride)
        return
    for offset in range(start, end, stride):
        yield offset, min(offset + stride, end)


def _strip(text: str, start: int, end: int) -> _Span:
    """Shrink ``(start, end)`` past leading and trailing whitespace; empty if it is all whitespace."""
    first = _NON_SPACE.search(text, start, end)
    if first is None:
        return end, end
    while text[end - 1].isspace():
        end -= 1
    return first.start(), end


def _separator_cuts(pattern: re.Pattern[str]) -> _Cuts:
    def cuts(text: str, start: int, end: int) -> Iterator[int]:
        for match in pattern.finditer(text, start, end):
            yield match.end()

    return cuts


def _line_cuts(text: str, start: int, end: int) -> Iterator[int]:
    """Just past each line break in ``text[start:end]`` that ends a line of its own, not a wrap."""
    for match in _LINE.finditer(text, start, end):
        if not _wraps(text, match.start()):
            yield match.end()


def _wraps(text: str, newline: int) -> bool:
    """Whether the line break at ``newline`` only wraps a sentence onto the next line.

    PDF columns and hard-wrapped Markdown or text break prose every 40 to 100 characters, mid-sentence;
    cut there, a chunk ends "... in the same direction as a" and the next starts "force ...", a
    fragment to embed and to quote. A break is a wrap when its line is long enough to be prose (a row,
    a heading or a line of code is seldom that long and ends otherwise), ends in a word, a number, a
    comma or a hyphen rather than a stop, a colon or a bracket, and the next line carries on in a
    small letter. Anything else (a table row, a list item, a heading, a line after a full stop)
    ends a line of its own.
    """
    line_start = text.rfind("\n", 0, newline) + 1
    line = text[line_start:newline].rstrip()
    if len(line.strip()) < _WRAP_MIN or not (line[-1].isalnum() or line[-1] in _WRAP_ENDS):
        return False
    following = _NEXT_LINE.match(text, newline + 1)
    return following is not None and following.group(1).islower()


def sentence_ends(text: str) -> Iterator[int]:
    """Offsets just past each sentence end in ``text``, as the splitter cuts them (abbreviations skipped).

    The answer stage cuts answers and passages into sentences with it, so both agree with the chunks.
    """
    return _sentence_cuts(text, 0, len(text))


def _sentence_cuts(text: str, start: int, end: int) -> Iterator[int]:
    for match in _SENTENCE.finditer(text, start, end):
        period = match.start()
        if text[period] == "." and _is_abbreviation(
            text[max(start, period - _ABBREVIATION_WINDOW) : period],
            numbered=_NUMBERED.match(text, match.end()) is not None,
        ):
            continue
        yield match.end()


def _is_abbreviation(before_period: str, *, numbered: bool = False) -> bool:
    """Whether the word ending ``before_period`` is one a period follows mid-sentence; ``numbered``: a
    number follows the period, after which "No.", "Art." and the like abbreviate too ("No. 6")."""
    if not before_period or before_period[-1].isspace():
        return False
    word = before_period.split()[-1].lstrip(_OPENING_PUNCTUATION)
    lowered = word.lower()
    return (
        lowered in _ABBREVIATIONS
        or (numbered and lowered in _BEFORE_NUMBER)
        or _DOTTED_OR_INITIAL.fullmatch(word) is not None
    )


#: The depth of the line-break cut in :data:`_CUTTERS`: finer cuts start inside a line.
_LINE_DEPTH = 1
_TABLE_ROW = re.compile(r"[^\S\n]{0,3}\|")
# A wrapped line is at least this long without its indent: prose columns run 40 characters and more.
_WRAP_MIN = 30
# Besides a letter or a digit, what a line may end in and its sentence carry on: a comma, a hyphen or
# dash (a word or a range split over the break).
_WRAP_ENDS = ",-\u2010\u2011\u2013"
# The first character of the next line, past its indent (and not past another line break).
_NEXT_LINE = re.compile(r"[^\S\n]*(\S)")

_CUTTERS: tuple[_Cuts, ...] = (
    _separator_cuts(_PARAGRAPH),
    _line_cuts,
    _sentence_cuts,
    _separator_cuts(_WHITESPACE),
)
