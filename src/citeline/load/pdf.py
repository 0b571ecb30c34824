"""PDF sources, read page by page.

pypdfium2 extracts each page; pypdf is tried on a page when pypdfium2 fails on it or finds no text.
The choice was measured with ``bench/pdf_extractors.py`` on the shared fixtures: pypdfium2 was the
fastest (about 3 ms a page, pypdf 18, pdfplumber 115), the leanest (4 MB peak RSS, 9 and 21), kept
every checked sentence in reading order (10/10; pypdf 7/10, pdfplumber 3/10 as it interleaves
columns) and ran no words together (pypdf 2, pdfplumber 31). pypdf is the second opinion: an
independent parser that also reads columns in order.

A ruled table is written into its page's text as a Markdown table (:mod:`citeline.load.pdf_tables`).

A page with no text layer at all (a scan) is read by OCR (:mod:`citeline.load.ocr`) when Tesseract
is installed; the source's metadata then says which pages were, with what confidence.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from citeline.errors import LoadError
from citeline.load import ocr
from citeline.load.clean import clean_inline, clean_text
from citeline.load.pdf_tables import with_tables
from citeline.load.pdfium_text import IndexedText, aligned_positions, joined, page_text
from citeline.types import LoadedSource, Page, Section, SourceMetadata

if TYPE_CHECKING:
    import pypdf

NO_TEXT_LAYER = "no text layer (scanned?)"
#: Said after :data:`NO_TEXT_LAYER` of a PDF that draws something where ``tesseract`` is missing.
NO_OCR = (
    "Tesseract, which reads scanned pages, is not installed (make install installs it; Debian: apt-get "
    "install tesseract-ocr)"
)

# pypdf logs what it repairs or gives up on in a malformed file ("EOF marker not found") as warnings,
# which reach the user's terminal; what matters is reported here, as an error naming the file. Only
# while citeline's own pypdf calls run is pypdf's logger raised to errors: its level is otherwise the
# application's, which may read PDFs with pypdf itself. (Its module loggers are made at their first
# warning, so a filter on them cannot be set beforehand; they take their level from "pypdf".)
log = logging.getLogger(__name__)
_PYPDF_LOGGER = logging.getLogger("pypdf")
_QUIET_LOCK = threading.Lock()
_quiet_calls = 0
_level_before = logging.NOTSET


@contextlib.contextmanager
def _quiet_pypdf() -> Iterator[None]:
    """Within: pypdf logs errors only (while any thread is within)."""
    global _quiet_calls, _level_before
    with _QUIET_LOCK:
        if _quiet_calls == 0:
            _level_before = _PYPDF_LOGGER.level
            _PYPDF_LOGGER.setLevel(logging.ERROR)
        _quiet_calls += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _quiet_calls -= 1
            if _quiet_calls == 0:
                _PYPDF_LOGGER.setLevel(_level_before)


# PDFium is not thread-safe, not even across documents, and ingestion runs loaders on a thread pool.
# Re-entrant because a generator abandoned mid-document may be finalised by the garbage collector
# while this thread already holds the lock.
_PDFIUM_LOCK = threading.RLock()
# The PDF format allows junk before the header; readers look this far for it.
_HEADER_WINDOW = 1024
# Titles that are really file names ("10811.exe", "Microsoft Word - draft.doc") or an application's
# placeholder ("Untitled", "Document1", "PowerPoint Presentation") say nothing.
_FILE_NAME_TITLE = re.compile(
    r"microsoft \w+ - .*|\S.*\.(?:exe|docx?|pdf|tex|dvi|indd|qxd|rtf|ps|txt)"
    r"|(?:untitled|new|blank)?[\s_-]*(?:document|presentation|template|untitled)?[\s_-]?\d*"
    r"|(?:powerpoint|word|excel) (?:presentation|document|template)|slide \d+|(?:no )?title( here)?"
    r"|insert title here|your title here|none|null|unknown|\(anonymous\)",
    re.IGNORECASE,
)
_FLATTENED = pdfium_c.FLATTEN_SUCCESS
_OPEN_ERRORS = {
    pdfium_c.FPDF_ERR_PASSWORD: "encrypted PDF (password required); save an unprotected copy and load that",
    pdfium_c.FPDF_ERR_SECURITY: "encrypted PDF with an unsupported security handler",
    pdfium_c.FPDF_ERR_FORMAT: "corrupt or truncated PDF (cannot be parsed)",
}


class _PageReader:
    """One open PDF, read a page at a time with pypdfium2 and, where that yields nothing, pypdf."""

    def __init__(self, path: Path) -> None:
        self.source = str(path)
        self._path = path
        with _PDFIUM_LOCK:
            try:
                self._doc: Any = pdfium.PdfDocument(path)
            except FileNotFoundError as exc:
                raise LoadError(self.source, "file not found") from exc
            except OSError as exc:
                raise LoadError(self.source, f"cannot read file ({exc.strerror or exc})") from exc
            except pdfium.PdfiumError as exc:
                code = getattr(exc, "err_code", None)
                if code not in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY) and _no_pages(path):
                    raise LoadError(self.source, "PDF has no pages") from exc
                reason = _OPEN_ERRORS.get(code, f"cannot open PDF ({exc})")
                raise LoadError(self.source, reason) from exc
            try:
                if self._doc.get_formtype() == pdfium_c.FORMTYPE_ACRO_FORM:
                    # Before any page is loaded: the form environment draws fields that the form filler
                    # left without an appearance of their value (see _pdfium_text).
                    self._doc.init_forms()
                self.page_count: int = len(self._doc)
                self.metadata: dict[str, str] = {
                    key: _meta_text(self._doc, key) for key in ("Title", "Author")
                }
            except pdfium.PdfiumError as exc:
                self._doc.close()
                raise LoadError(self.source, f"cannot read PDF structure ({exc})") from exc
        self._file: IO[bytes] | None = None
        self._fallback: pypdf.PdfReader | None = None
        #: Whether to note page 1's large text (:func:`_heading_blocks`) while reading it, for a title.
        self.wants_title = False
        self._headings: list[str] | None = None
        #: Whether to note each page's headings as set in type (:func:`styled_headings`) while reading it:
        #: for a document without an outline. They are kept by page index, until :meth:`headings` is asked.
        self.wants_headings = False
        self._styled: dict[int, list[StyledHeading]] = {}
        #: Whether to write each page's ruled tables as Markdown tables (:func:`with_tables`): not for a
        #: read that only asks whether a page has text, or its title.
        self.wants_tables = True

    def text(self, index: int) -> str:
        """The raw text of page ``index`` (0-based); raises :class:`LoadError` if neither reader can."""
        primary_error: Exception | None = None
        try:
            text = self._pdfium_text(index)
        except pdfium.PdfiumError as exc:
            primary_error, text = exc, ""
        if text.strip():
            return text
        try:
            return self._pypdf_text(index)
        except Exception as exc:  # pypdf raises many types on malformed content; any means "no text"
            if primary_error is None:
                return text
            raise LoadError(
                self.source,
                f"page {index + 1}: text extraction failed (pypdfium2: {primary_error}; pypdf: {exc})",
            ) from exc

    def draws(self, index: int) -> bool:
        """Whether page ``index`` (0-based) draws anything: a blank page has nothing to OCR.

        Not only an image (a scan): words turned into vector outlines (a poster or brochure exported with
        outlined fonts, a CAD drawing) are paths, and glyphs without a Unicode mapping are text objects
        the text layer gives nothing for. What it draws must show, though: a page whose only object is a
        white background (as exporters write blank pages) draws one colour, rendered small, and is blank.
        """
        with _PDFIUM_LOCK:
            page = self._doc[index]
            try:
                if int(pdfium_c.FPDFPage_CountObjects(page.raw)) == 0:
                    return False
                pixels = page.render(scale=_BLANK_CHECK_SCALE, grayscale=True).to_numpy()
                return int(pixels.max()) - int(pixels.min()) > _BLANK_CONTRAST
            finally:
                page.close()

    def is_scan(self, index: int) -> bool:
        """Whether page ``index`` (0-based) is a scan: an image covering at least :data:`SCAN_SHARE` of it."""
        with _PDFIUM_LOCK:
            page = self._doc[index]
            try:
                left, bottom, right, top = page.get_mediabox()
                area = abs((right - left) * (top - bottom)) or 1.0
                for image in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2):
                    left, bottom, right, top = image.get_bounds()
                    if (right - left) * (top - bottom) >= SCAN_SHARE * area:
                        return True
                return False
            finally:
                page.close()

    def ocr(self, index: int) -> ocr.OcrText:
        """Page ``index`` (0-based) read by OCR."""
        with _PDFIUM_LOCK:
            page = self._doc[index]
            try:
                image = page.render(scale=ocr.DPI / 72).to_pil()
            finally:
                page.close()
        return ocr.read(image, f"{self.source} page {index + 1}")

    def _pdfium_text(self, index: int) -> str:
        with _PDFIUM_LOCK:
            page = self._doc[index]
            # A filled form's answers are in its fields, which are not page content: flattened (in memory
            # only), their values are drawn into the page and read with its text. PDFium asks for the
            # page to be loaded again after that.
            if (
                self._doc.formenv
                and pdfium_c.FPDFPage_GetAnnotCount(page.raw)
                and pdfium_c.FPDFPage_Flatten(page.raw, pdfium_c.FLAT_NORMALDISPLAY) == _FLATTENED
            ):
                page.close()
                page = self._doc[index]
            try:
                textpage = page.get_textpage()
                try:
                    # Read from PDFium once for the page, by whichever of these first wants it.
                    indexed = IndexedText(textpage)
                    text = _mark_superscripts(indexed, page_text(textpage))
                    # A ruled table as a Markdown table, so that each chunk of it is read under its header.
                    if self.wants_tables:
                        text = self._with_tables(index, page, indexed, text)
                    if index == 0 and self.wants_title and self._headings is None:
                        # Here rather than in first_page_title: parsing the page again cost more.
                        self._headings = _heading_blocks(indexed)
                    if self.wants_headings:
                        self._styled[index] = styled_headings(indexed, title_page=index == 0)
                finally:
                    textpage.close()
            finally:
                page.close()
        # PDFium drops a hyphen that ends a line and joins the lines, leaving \x02 where it was; putting
        # the break back lets clean_text decide, as for every other source, whether the word rejoins.
        return text.replace("\x02", "-\n")

    def _with_tables(self, index: int, page: Any, indexed: IndexedText, text: str) -> str:
        """``text`` with page ``index``'s ruled tables as Markdown tables (:func:`with_tables`), or as it
        is if finding them fails: the tables are a better reading of text the page already has, and an
        odd drawing must not cost a document that reads well without them."""
        try:
            return with_tables(page, indexed, text)
        except Exception:  # any fault of the table finder; the page's text stands
            log.warning(
                "%s page %d: ruled tables not read, text kept as extracted",
                self.source,
                index + 1,
                exc_info=True,
            )
            return text

    def _pypdf_text(self, index: int) -> str:
        if self._fallback is None:
            # Imported on first use: most documents never need the fallback.
            import pypdf

            # A file handle, not the path: given a path pypdf reads the whole file into memory.
            self._file = self._path.open("rb")
            with _quiet_pypdf():
                self._fallback = pypdf.PdfReader(self._file)
        with _quiet_pypdf():
            return self._fallback.pages[index].extract_text()

    def first_page_title(self) -> str:
        """The text set largest on page 1 that reads as a title (``""`` if none does); needs
        :attr:`wants_title` set before page 1 is read.

        A candidate is dropped when it is a page number or a date alone, longer than
        :data:`TITLE_MAX_CHARS`, a section heading ("Abstract"), or a running line: a journal's masthead
        ("Proposed Rules" on the Federal Register's first page) is repeated at the top of the pages after.
        Then the next-largest text is tried, down to :data:`TITLE_MIN_SCALE` times the body text's size.
        """
        running: set[str] | None = None
        for block in self._headings or []:
            if not _reads_as_title(block):
                continue
            if running is None:
                running = self._running_keys()
            # Whole words: "Notes" is not the running head "Footnotes".
            key = f" {_line_key(block)} "
            if not any(key in f" {line} " for line in running):
                return block
        return ""

    def _running_keys(self) -> set[str]:
        """The keys of the lines at the edges of page 2, where a masthead or running head is repeated.

        Page 2 alone, to keep this cheap: the pages are read again for their text later.
        """
        if self.page_count < 2:
            return set()
        try:
            text = clean_text(self.text(1))
        except LoadError:
            return set()  # reported when the page itself is read
        return {_line_key(line) for line in _edges(text)}

    def headings(self, index: int) -> list[StyledHeading]:
        """The headings set in type on page ``index`` (0-based), once it has been read with
        :attr:`wants_headings` set (none for a page read by pypdf or OCR)."""
        return self._styled.pop(index, [])

    def outline(self) -> dict[int, list[str]]:
        """The document outline (its bookmarks), as the titles that point into each page (0-based), in
        outline order; empty for a PDF without one.

        A bookmark leads to its page by a destination or by a go-to action (Word's exports use the
        latter); one that leads nowhere in this document (a web link, another file) is left out, as is
        one without a title.
        """
        by_page: dict[int, list[str]] = {}
        with _PDFIUM_LOCK:
            try:
                for count, bookmark in enumerate(self._doc.get_toc(max_depth=_OUTLINE_DEPTH)):
                    if count == _OUTLINE_MOST:
                        break
                    title = clean_inline(bookmark.get_title())
                    page = _bookmark_page(self._doc, bookmark)
                    if title and page is not None and 0 <= page < self.page_count:
                        by_page.setdefault(page, []).append(title)
            except pdfium.PdfiumError:
                # A damaged outline costs the document its sections, never its text.
                return {}
        return by_page

    def close(self) -> None:
        """Release both readers."""
        with _PDFIUM_LOCK:
            self._doc.close()
        if self._file is not None:
            self._file.close()
            self._file, self._fallback = None, None


#: A run of digits (with commas or dashes between them: "3,4", "5-7") written straight after a letter or a
#: closing mark: where a footnote or reference marker, or an exponent, sits when it is set superscript.
#: In the character-indexed text a character outside the Basic Multilingual Plane ends in its low half
#: (:data:`_LOW_HALF`), counted a letter: most often a mathematical one, an italic x squared.
_SUPERSCRIPT_CANDIDATE = re.compile(
    r"(?<=[^\W\d_]|[,.;:)\]\u201d\u2019\"'\udc00-\udfff])\d+(?:[,\u2013-]\d+)*"
)
_LOW_HALF = re.compile("[\udc00-\udfff]")
#: A digit, or a minus sign and a digit, straight after a digit: where an exponent sits ("10^5", "10^-3"),
#: or a footnote marker after a number ("in 2019^4"), when it is set superscript.
_AFTER_DIGIT = re.compile(r"(?<=\d)(?:\d|[-\u2212]\d)")
#: A footnote's own number at the start of a line, straight before its first word ("1Preliminary"),
#: where it sits when it is set superscript.
_FOOTNOTE_NUMBER = re.compile(r"(?:^|(?<=\n))\d{1,3}(?=[^\W\d_])")
#: Superscript: at most this share of the size of the letter before it...
_SUPERSCRIPT_SIZE = 0.85
#: ... and its baseline raised by at least this share of that letter's size.
_SUPERSCRIPT_RISE = 0.15


def _mark_superscripts(page_chars: IndexedText, text: str) -> str:
    """``text`` (the text of the page ``page_chars`` indexes) with ``^`` before each run of superscript
    digits that follows a word or a number.

    PDF text carries no superscript: a footnote marker set small and raised after "alert," comes out as
    "alert,5", and one after a word ("pathway12", "cells3") as part of that word, which the keyword
    index then never matches as "pathway" or "cells". PDFium knows each character's size and baseline,
    so a digit run smaller than the letter before it and raised above its baseline is marked: "alert,^5",
    "pathway^12", "km^2". So is an exponent raised above the digit before it, which would otherwise read
    as one number ("10^5", not "105"). A footnote's own number, raised and smaller than the letter after
    it at the start of a line, is marked and kept apart from its first word: "^1 Preliminary", not
    "1Preliminary". Only horizontal text is judged, and a subscript ("H2O") is lowered, not raised, so
    it stays. The citation viewer matches passages on letters and digits only, so neither the mark nor
    the space ever stops it from finding one.
    """
    if not (
        _SUPERSCRIPT_CANDIDATE.search(text) or _AFTER_DIGIT.search(text) or _FOOTNOTE_NUMBER.search(text)
    ):
        return text
    textpage = page_chars.textpage
    # The character-indexed text: the same characters as the page's text, with PDFium's soft-hyphen mark
    # spelt otherwise and a line break more here and there; they are aligned below.
    indexed = page_chars.text.replace("\ufffe", "\x02")
    if len(indexed) != page_chars.count:
        return text  # PDFium's text did not come whole
    marks: list[int] = []
    for match in _SUPERSCRIPT_CANDIDATE.finditer(indexed):
        start = match.start()
        letter = start - 1
        while letter >= 0 and not (indexed[letter].isalpha() or _LOW_HALF.match(indexed[letter])):
            letter -= 1
        if letter >= 0 and start - letter <= 3 and _raised_and_smaller(textpage, start, letter):
            marks.append(start)
    # After a digit the digit before is the reference: "10" then a small raised "5" is 10^5, where the
    # text has "105". Digits of one size on one baseline, however many, are never marked. A page of
    # figures has thousands of digit pairs: only those whose second character's baseline is above the
    # first's (one PDFium call a character) are judged in full.
    baselines = _Baselines(textpage)
    for match in _AFTER_DIGIT.finditer(indexed):
        start = match.start()
        if baselines[start] > baselines[start - 1] and _raised_and_smaller(textpage, start, start - 1):
            marks.append(start)
    # A footnote's own number is judged against the letter after it, and kept apart from that word too.
    spaces: list[int] = []
    for match in _FOOTNOTE_NUMBER.finditer(indexed):
        if _raised_and_smaller(textpage, match.start(), match.end()):
            marks.append(match.start())
            spaces.append(match.end())
    if not marks:
        return text
    inserts = sorted([(position, "^") for position in marks] + [(position, " ") for position in spaces])
    at = aligned_positions(indexed, text, [position for position, _ in inserts])
    if at is None:
        return text
    for position, (_, insert) in reversed(list(zip(at, inserts, strict=True))):
        text = text[:position] + insert + text[position:]
    return text


def _raised_and_smaller(textpage: Any, index: int, letter: int) -> bool:
    """Whether character ``index`` is set smaller than character ``letter`` and above its baseline, both
    on a horizontal line."""
    raw = textpage.raw
    if (
        abs(pdfium_c.FPDFText_GetCharAngle(raw, index)) > 0.05
        or abs(pdfium_c.FPDFText_GetCharAngle(raw, letter)) > 0.05
    ):
        return False
    sizes: list[float] = []
    baselines: list[float] = []
    for i in (index, letter):
        sizes.append(_rendered_size(raw, i, pdfium_c.FS_MATRIX()))
        x, y = ctypes.c_double(), ctypes.c_double()
        pdfium_c.FPDFText_GetCharOrigin(raw, i, ctypes.byref(x), ctypes.byref(y))
        baselines.append(float(y.value))
    size, reference = sizes
    if reference <= 0:
        return False
    return (
        size <= _SUPERSCRIPT_SIZE * reference and baselines[0] - baselines[1] >= _SUPERSCRIPT_RISE * reference
    )


class _Baselines:
    """The page height of each character's origin, each asked of PDFium once; the two doubles it is
    read into are made once a page, not once a character (most of the cost of a call on a page of
    figures)."""

    def __init__(self, textpage: Any) -> None:
        self._raw = textpage.raw
        self._x, self._y = ctypes.c_double(), ctypes.c_double()
        self._at = (ctypes.pointer(self._x), ctypes.pointer(self._y))
        self._known: dict[int, float] = {}

    def __getitem__(self, index: int) -> float:
        known = self._known.get(index)
        if known is None:
            pdfium_c.FPDFText_GetCharOrigin(self._raw, index, *self._at)
            known = self._known[index] = self._y.value
        return known


#: Text is a title candidate only when set at least this many times the size of most of page 1's text.
TITLE_MIN_SCALE = 1.15
#: A longer "title" is a paragraph set large (a cover's blurb), not a title.
TITLE_MAX_CHARS = 200
#: Characters whose sizes differ by less than this share are set in one size (rounding in the PDF).
_SAME_SIZE = 0.03
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sept?|oct|nov|dec)[a-z]*\.?"
# A date alone ("Thursday, August 6, 2020", "6 August 2020", "November - 2015").
_DATE = (
    rf"(?:[a-z]+day,?\s+)?(?:{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?(?:\s+\d{{4}})?"
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH},?(?:\s+\d{{4}})?|{_MONTH}\s*[-\u2013,]?\s*\d{{4}})"
)
_DATE_LINE = re.compile(_DATE, re.IGNORECASE)
# A page number, in any of its usual forms ("7", "- 7 -", "Page 7 of 9", "xii"), or a date.
_PAGE_OR_DATE = (
    r"[-\u2013\u2014\s]*(?:page\s+)?(?:\d+|m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3}))"
    rf"(?:\s*(?:of|/)\s*\d+)?[-\u2013\u2014\s]*|{_DATE}"
)
_NOT_A_TITLE = re.compile(
    _PAGE_OR_DATE
    # A section heading.
    + r"|(?:\d+\.?\s*)?(?:abstract|(?:table of )?contents|introduction|summary|preface|foreword|references)"
    r"|(?:chapter|appendix|section|part)\s+\w{1,4}",
    re.IGNORECASE,
)


def _heading_blocks(indexed: IndexedText) -> list[str]:
    """The page's runs of text set distinctly larger than its body text, largest first, each as one line.

    A run is the characters of one size that follow each other in the page's text, whatever lines they
    are on: a title wrapped onto two lines is one run. Sizes are the sizes rendered (font size times the
    scale of the character's matrix), as a PDF may set every font at 1 point and scale it.
    """
    text = indexed.text
    raw = indexed.textpage.raw
    text_object = _text_object_function()
    matrix = pdfium_c.FS_MATRIX()
    runs: list[list[Any]] = []  # [size, start, end] in the page's text
    weights: dict[float, int] = {}
    last_object, size = None, 0.0
    for index, char in enumerate(text):
        if char.isspace() or char == "\ufffe":
            continue
        # The characters of one text object share its size and matrix: asked of PDFium once an object,
        # the loop over a page of 6,500 characters takes 2 ms rather than 8.
        current = text_object(raw, index)
        if current is None or current != last_object:
            last_object = current
            size = round(_rendered_size(raw, index, matrix), 1)
        weights[size] = weights.get(size, 0) + 1
        if runs and abs(runs[-1][0] - size) <= _SAME_SIZE * runs[-1][0]:
            runs[-1][2] = index + 1
        else:
            runs.append([size, index, index + 1])
    if not weights:
        return []
    body = max(weights, key=weights.__getitem__)
    large: list[list[Any]] = []
    joins_last = False
    for size, start, end in runs:
        if size < TITLE_MIN_SCALE * body:
            joins_last = False
            continue
        # Large text of two sizes on one line is one heading: a title in small capitals ("P" "UMP")
        # would otherwise come apart into its capitals and the rest.
        if joins_last and not any(char in "\r\n" for char in text[large[-1][2] : start]):
            large[-1][0], large[-1][2] = max(large[-1][0], size), end
        else:
            large.append([size, start, end])
        joins_last = True
    large.sort(key=lambda run: -run[0])  # stable: runs of one size stay in page order
    return [_one_line(joined(text[start:end]).replace("\ufffe", "")) for _, start, end in large]


#: A heading set in type is at most this long, in characters and in words, and wraps onto at most this
#: many lines: longer, it is a sentence or a paragraph set in bold or italics.
_HEADING_MAX_CHARS = 120
_HEADING_MAX_WORDS = 16
_HEADING_MAX_LINES = 4
#: A page with more headings than this sets something else in type (a table's bold cells): it gets none.
_HEADINGS_PER_PAGE = 15
#: Characters of a line whose type is asked (its first, its last and evenly between).
_SAMPLES = 5
#: Bold, as a font's weight says it; and as its name does, when the weight is not given.
_BOLD_WEIGHT = 600
_STYLED_NAME = re.compile(r"bold|black|heavy|semibold|demi|italic|oblique", re.IGNORECASE)
#: Font descriptor flags: italic (bit 7) and force-bold (bit 19).
_STYLED_FLAGS = (1 << 6) | (1 << 18)
#: What a heading is not: a line ending as a sentence or a cut word does, a caption ("Figure 3"), a link,
#: a path or one word of code, a page number or date alone.
_NOT_A_HEADING = re.compile(
    rf".*[.,;:/-]|(?:fig(?:ure)?|table|source|note)s?\b.*|.*(?:://|www\.).*|[^\s]*[/_%=][^\s]*|{_PAGE_OR_DATE}",
    re.IGNORECASE,
)


class StyledHeading(NamedTuple):
    """A heading found in a page's type (:func:`styled_headings`)."""

    text: str
    #: The lines it is set on, as the page's text has them.
    lines: tuple[str, ...]
    #: The height of its first line's top above the foot of the page, in points: where on the page it is.
    top: float


def styled_headings(indexed: IndexedText, *, title_page: bool = False) -> list[StyledHeading]:
    """The page's headings as its type sets them apart, in page order.

    A heading is a line (or up to :data:`_HEADING_MAX_LINES` lines in a row, a wrapped heading) whose
    characters are all in a font other than the body text's (the font most of the page's characters are
    in) and bold or italic, at the body text's size or larger; or all distinctly larger than the body
    text (:data:`TITLE_MIN_SCALE`) in another font. Left out: lines ending like sentences, captions
    ("Figure 3"), links, dates and page numbers alone; lines in a font alike to the body's but larger (on
    a page of footnotes, the body text itself); smaller type (figure labels); a byline: authors (names
    with initials or footnote marks), affiliations and e-mail addresses (:func:`_a_byline`). A page with
    more than :data:`_HEADINGS_PER_PAGE` gets none: what it sets apart is not headings.

    On the ``title_page`` (a document's first), what is set apart straight under the title (the first
    heading set distinctly larger), with no text between, is its byline too, up to a heading that reads
    as a section's (:data:`_SECTION_START`): LaTeX's title sets the author's name and the date larger than
    the text, and only their place tells a name from a heading.

    Running heads are left to the caller, which sees more than one page (:func:`running_headings`).
    ``indexed`` is the page's character-indexed text, its text page with it.
    """
    text = indexed.text
    if not text:
        return []
    raw = indexed.textpage.raw
    text_object = _text_object_function()
    matrix = pdfium_c.FS_MATRIX()
    flags = ctypes.c_int()
    name = ctypes.create_string_buffer(128)
    by_object: dict[int | None, tuple[bytes, float, bool]] = {}

    def style(index: int) -> tuple[bytes, float, bool]:
        """Character ``index``'s font name, size (as rendered) and whether it is bold or italic; asked
        of PDFium once per text object."""
        current = text_object(raw, index)
        known = by_object.get(current) if current is not None else None
        if known is not None:
            return known
        size = round(_rendered_size(raw, index, matrix), 1)
        pdfium_c.FPDFText_GetFontInfo(raw, index, name, len(name), ctypes.byref(flags))
        weight = int(pdfium_c.FPDFText_GetFontWeight(raw, index))
        styled = (
            weight >= _BOLD_WEIGHT
            or bool(flags.value & _STYLED_FLAGS)
            or _STYLED_NAME.search(name.value.decode("latin-1")) is not None
        )
        found = (name.value, size, styled)
        by_object[current] = found
        return found

    # Each line with text, the type of a few of its characters and its first character: asking every
    # character cost 6.5 ms a page of the Federal Register (against 0.1 ms for its text), five a line
    # 0.5 ms; a line set in one type is seen as such either way, and one mixing types (a run-in heading)
    # is seen mixed at its ends.
    lines: list[tuple[str, list[tuple[bytes, float, bool]], int, int]] = []
    start = 0
    for end in [*(i for i, char in enumerate(text) if char in "\r\n"), len(text)]:
        letters = [i for i in range(start, end) if not text[i].isspace() and text[i] != "\ufffe"]
        if letters:
            picks = sorted({letters[round(k * (len(letters) - 1) / (_SAMPLES - 1))] for k in range(_SAMPLES)})
            line = " ".join(joined(text[start:end]).replace("\ufffe", "").split())
            lines.append((line, [style(i) for i in picks], len(letters), letters[0]))
        start = end + 1
    fonts: dict[tuple[bytes, float], float] = {}
    for _, styles, chars, _ in lines:
        for font, size, _ in styles:
            fonts[(font, size)] = fonts.get((font, size), 0.0) + chars / len(styles)
    if not fonts:
        return []
    body_font, body_size = max(fonts, key=fonts.__getitem__)

    def sets_apart(line: list[tuple[bytes, float, bool]]) -> bool:
        if any(font == body_font for font, _, _ in line):
            return False
        if all(size >= TITLE_MIN_SCALE * body_size for _, size, _ in line):
            return True
        return all(styled and size >= (1 - _SAME_SIZE) * body_size for _, size, styled in line)

    blocks: list[_Block] = []
    # The type of the line before when it was set apart: a line set alike continues its heading (wrapped);
    # one set otherwise starts another (a title, then its author's name).
    joins: tuple[bytes, float] | None = None
    text_between = True  # whether a line of text (not set apart) came since the last block
    for line, styles, _, first in lines:
        if sets_apart(styles):
            kind = Counter((font, size) for font, size, _ in styles).most_common(1)[0][0]
            if kind == joins:
                blocks[-1].lines.append(line)
            else:
                blocks.append(_Block([line], kind[1], first, text_between))
                text_between = False
            joins = kind
        else:
            joins = None
            text_between = True
    byline = set(_under_the_title(blocks, TITLE_MIN_SCALE * body_size)) if title_page else set()
    headings = []
    for number, block in enumerate(blocks):
        heading = clean_inline(" ".join(block.lines))
        if (
            number not in byline
            and len(block.lines) <= _HEADING_MAX_LINES
            and len(heading) <= _HEADING_MAX_CHARS
            and len(heading.split()) <= _HEADING_MAX_WORDS
            and re.search(r"[^\W\d_]{2}", heading) is not None
            and not _NOT_A_HEADING.fullmatch(heading)
            and not _a_byline(heading)
        ):
            headings.append(StyledHeading(heading, tuple(block.lines), _top(raw, block.first)))
    return headings if len(headings) <= _HEADINGS_PER_PAGE else []


class _Block(NamedTuple):
    """Lines in a row set apart in one type: a heading, if it reads as one."""

    lines: list[str]
    size: float
    #: The index of its first character in the page's text.
    first: int
    #: Whether a line of the page's text (not set apart) comes between it and the block before.
    after_text: bool


def _under_the_title(blocks: list[_Block], large: float) -> Iterator[int]:
    """The indices of the blocks straight under the title (the first block of size ``large`` or more),
    with no text between them, up to one that reads as a section's heading."""
    title = next((number for number, block in enumerate(blocks) if block.size >= large), None)
    if title is None:
        return
    for number in range(title + 1, len(blocks)):
        block = blocks[number]
        if block.after_text or _SECTION_START.fullmatch(clean_inline(" ".join(block.lines))):
            return
        yield number


def _top(raw: Any, index: int) -> float:
    """The top of character ``index``'s box, in points above the foot of the page."""
    left, right, bottom, top = (ctypes.c_double() for _ in range(4))
    pdfium_c.FPDFText_GetCharBox(
        raw, index, ctypes.byref(left), ctypes.byref(right), ctypes.byref(bottom), ctypes.byref(top)
    )
    return float(top.value)


#: What reads as a section's heading where a byline could stand: a numbered heading ("1 Introduction",
#: "2.1 Data", "IV. RESULTS") or a part of a paper's front matter.
_SECTION_START = re.compile(
    r"(?:\d+(?:\.\d+)*\.?|[IVX]+\.)\s+\S.*"
    r"|(?:abstract|summary|executive summary|introduction|(?:table of )?contents|preface|foreword|overview"
    r"|background|key ?words|highlights)\b.*",
    re.IGNORECASE,
)
#: An e-mail address.
_E_MAIL = re.compile(r"[\w.+-]@[\w-]+(?:\.[\w-]+)+")
#: A word naming where an author works.
_INSTITUTION = re.compile(
    r"\b(?:universit|department|dept\b|institut|laborator|college|faculty|school of|hospital"
    r"|cent(?:er|re) for|academy)",
    re.IGNORECASE,
)
#: A footnote mark set on an author's name or an affiliation (superscript is not told apart here: the
#: heading's text is the page's own): digits after a name ("Smith1", "Lee1,2"), before an affiliation's
#: first word ("1Department"), or a symbol.
_AUTHOR_MARK = re.compile(
    r"(?<=[^\W\d_])\d{1,2}(?:,\d{1,2})*\b|(?:^|(?<=\s))\d{1,2}(?=[^\W\d_])|[*\u2020\u2021]"
)
#: What separates authors: a comma, a semicolon, an ampersand or "and".
_AUTHORS_SEPARATOR = re.compile(r"\s*(?:[,;&]|\band\b)\s*", re.IGNORECASE)
#: An initial ("J.", "J.-P."), and the particles of a family name ("van", "de").
_INITIAL = re.compile(r"(?:[^\W\d_]\.-?)+")
_PARTICLES = frozenset(
    {"van", "von", "de", "der", "den", "da", "di", "du", "la", "le", "del", "della", "dos", "ter"}
)


def _a_byline(heading: str) -> bool:
    """Whether ``heading`` is an author line, an affiliation or an e-mail address rather than a heading.

    An affiliation names an institution (a university, department, institute, ...) and has a comma or a
    footnote mark. An author line is names alone, separated by commas or "and", with a footnote mark after
    a name or an initial in each: "J. Smith, A. Jones and B. Lee", "Anne Jones1,2*". Names alone, without
    either, are set like a heading ("Study Design and Data Sources"): they are not told apart here.
    """
    if _E_MAIL.search(heading):
        return True
    marked = _AUTHOR_MARK.sub("^", heading)
    if _INSTITUTION.search(heading) and ("^" in marked or "," in heading):
        return True
    names = [
        words for part in _AUTHORS_SEPARATOR.split(marked) if (words := part.replace("^", " ^ ").split())
    ]
    if not names:
        return False
    initials = all(any(_INITIAL.fullmatch(word) for word in words) for words in names)
    if "^" not in marked and not (len(names) > 1 and initials):
        return False
    return all(_a_name(words) for words in names)


def _a_name(words: list[str]) -> bool:
    """Whether ``words`` read as a person's name, footnote marks (``^``) after it: two to five
    capitalised words (not in capitals: "CO2"), initials or particles, a capitalised word among them."""
    while words and words[-1] == "^":
        words = words[:-1]
    if not 2 <= len(words) <= 5:
        return False
    named = False
    for word in words:
        if word in _PARTICLES or (_INITIAL.fullmatch(word) and word[0].isupper()):
            continue
        letters = word.replace("-", "").replace("'", "").replace("\u2019", "")
        if not (letters.isalpha() and word[0].isupper() and not letters.isupper()):
            return False
        named = True
    return named


def _rendered_size(raw: Any, index: int, matrix: Any) -> float:
    """Character ``index``'s size as rendered: its font size times the scale of its matrix (a PDF may
    set every font at 1 point and scale it); ``matrix`` is a ``FS_MATRIX`` to fill."""
    pdfium_c.FPDFText_GetMatrix(raw, index, ctypes.byref(matrix))
    scale = abs(matrix.a * matrix.d - matrix.b * matrix.c) ** 0.5 or 1.0
    return float(pdfium_c.FPDFText_GetFontSize(raw, index)) * scale


def _one_line(text: str) -> str:
    """A title set on several lines as one: joined by spaces, but a line that is a date alone, as under
    a table's or report's title ("NICS Firearm Background Checks" / "November - 2015"), after a colon."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    title = ""
    for line in filter(None, lines):
        separator = ": " if title and _DATE_LINE.fullmatch(line) else " "
        title = f"{title}{separator}{line}" if title else line
    return clean_inline(title)


_TEXT_OBJECT: list[Any] = []


def _text_object_function() -> Any:
    """``FPDFText_GetTextObject`` returning the object's address as a plain int (or None), which compares
    cheaply; pypdfium2's binding returns a new pointer object each call."""
    if not _TEXT_OBJECT:
        address = ctypes.cast(pdfium_c.FPDFText_GetTextObject, ctypes.c_void_p).value
        assert address, "pypdfium2 binds FPDFText_GetTextObject"
        prototype = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
        _TEXT_OBJECT.append(prototype(address))
    return _TEXT_OBJECT[0]


def _reads_as_title(text: str) -> bool:
    """Whether ``text`` could be a title: a word or more, not too long, not a page number, date or section
    heading alone."""
    return (
        len(text) <= TITLE_MAX_CHARS
        and re.search(r"[^\W\d_]{2}", text) is not None
        and not _NOT_A_TITLE.fullmatch(text)
    )


def _meta_text(doc: Any, key: str) -> str:
    """The document information entry ``key`` (``Title``, ``Author``) as one clean line.

    Read here rather than by pypdfium2's ``get_metadata_value``, which decodes strictly: an entry holding
    half a UTF-16 surrogate pair made the whole PDF unreadable. A NUL or other control character in it
    is dropped, as from any text: PostgreSQL cannot store a NUL, and failed the batch it came in.
    """
    name = (key + "\x00").encode()
    size = int(pdfium_c.FPDF_GetMetaText(doc.raw, name, None, 0))
    if size <= 2:
        return ""
    buffer = ctypes.create_string_buffer(size)
    pdfium_c.FPDF_GetMetaText(doc.raw, name, buffer, size)
    return clean_inline(buffer.raw[: size - 2].decode("utf-16-le", errors="replace"))


def _no_pages(path: Path) -> bool:
    """Whether pypdf reads ``path`` as a document without pages.

    PDFium refuses to open one at all, with the error code of success (or, its last error being shared,
    another thread's), which says nothing of why.
    """
    import pypdf

    try:
        with path.open("rb") as file, _quiet_pypdf():
            return len(pypdf.PdfReader(file).pages) == 0
    except Exception:  # pypdf raises many types on malformed files; then it is not an empty document
        return False


def _check_header(path: Path) -> None:
    source = str(path)
    try:
        with path.open("rb") as file:
            head = file.read(_HEADER_WINDOW)
    except OSError as exc:
        raise LoadError(source, f"cannot read file ({exc.strerror or exc})") from exc
    if b"%PDF-" not in head:
        raise LoadError(source, "not a PDF file (no %PDF header)")


def _name_key(name: str) -> str:
    return re.sub(r"[\W_]+", "", name).casefold()


def _placeholder_title(title: str, path: Path) -> bool:
    """Whether the metadata ``title`` says nothing: missing, a placeholder or a file name."""
    return (
        not title
        or _FILE_NAME_TITLE.fullmatch(title) is not None
        or _name_key(title) in (_name_key(path.name), _name_key(path.stem))
    )


def _title(reader: _PageReader, path: Path) -> str:
    if reader.wants_title:
        return reader.first_page_title() or path.stem
    return reader.metadata.get("Title", "")


def pdf_page_count(path: Path) -> int | None:
    """How many pages the PDF at ``path`` has, from its page tree alone: no page is read. None when it
    cannot be opened (:func:`load_pdf` says why)."""
    with _PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(path)
        except (OSError, pdfium.PdfiumError):
            return None
        try:
            return len(doc)
        finally:
            doc.close()


def load_pdf(path: Path) -> LoadedSource:
    """Open a PDF and check that it can be read; its pages come lazily, one per physical page.

    Raises :class:`LoadError` now for a file that is not a PDF, corrupt, encrypted, has no pages or
    has no text on any page (``no text layer (scanned?)``). The title is the document's metadata title
    unless that is missing, a placeholder or just a file name; then the text set largest on page 1 when
    that is distinctly larger than the body text and reads as a title (see :func:`_heading_blocks`),
    else the file stem. Page numbers are 1-based physical pages; a page without text still comes out,
    with empty text, so numbering never shifts.
    """
    _check_header(path)
    reader = _PageReader(path)
    reader.wants_title = _placeholder_title(reader.metadata.get("Title", ""), path)
    # This reader only finds the first page with text and the title: _pages reads the tables.
    reader.wants_tables = False
    scans = _Scans()
    try:
        if reader.page_count == 0:
            raise LoadError(reader.source, "PDF has no pages")
        # Finding the first page with text up front fails a scanned PDF from load() itself, and costs
        # one page's extraction for any other (and, for a scan, one page's OCR, kept for _pages).
        if not any(clean_text(reader.text(i)) for i in range(reader.page_count)) and not any(
            scans.read(reader, i) for i in range(reader.page_count) if ocr.available()
        ):
            if not ocr.available() and any(reader.draws(i) for i in range(reader.page_count)):
                raise LoadError(reader.source, f"{NO_TEXT_LAYER}; {NO_OCR}")
            raise LoadError(reader.source, NO_TEXT_LAYER)
        metadata: SourceMetadata = {"pages": str(reader.page_count)}
        if author := reader.metadata.get("Author", ""):
            metadata["author"] = author
        title = _title(reader, path)
    finally:
        reader.close()
    return LoadedSource(
        content_type="application/pdf", title=title, pages=_pages(path, scans, metadata), metadata=metadata
    )


class _Scans:
    """OCR of the pages without a text layer, each read once; page confidences for the metadata."""

    def __init__(self) -> None:
        self.done: dict[int, ocr.OcrText] = {}

    def read(self, reader: _PageReader, index: int) -> str:
        """The OCR text of page ``index``; empty for a blank page (nothing drawn: nothing to read)."""
        if not reader.draws(index):
            return ""
        if index not in self.done:
            self.done[index] = reader.ocr(index)
        return clean_text(self.done[index].text)

    def describe(self, metadata: SourceMetadata) -> None:
        """``ocr_confidence``: ``page=confidence`` for each page read by OCR; ``ocr_rotated``:
        ``page=degrees`` for those turned upright first."""
        pages = sorted(self.done)
        if not pages:  # only blank pages so far: nothing was read by OCR
            return
        metadata["ocr_confidence"] = " ".join(f"{i + 1}={self.done[i].confidence:g}" for i in pages)
        if rotated := " ".join(f"{i + 1}={self.done[i].rotated}" for i in pages if self.done[i].rotated):
            metadata["ocr_rotated"] = rotated


def _pages(path: Path, scans: _Scans, metadata: SourceMetadata) -> Iterator[Page]:
    # The document is opened again here rather than kept open from load_pdf(), so a LoadedSource
    # whose pages are never read holds no file handle or PDFium memory.
    reader = _PageReader(path)
    try:

        def read(index: int) -> str:
            text = without_line_numbers(clean_text(reader.text(index)))
            if not text and ocr.available():
                text = scans.read(reader, index)
                # The metadata is stored once every page is read: it is complete by then.
                scans.describe(metadata)
            elif not text and reader.draws(index):
                _unread(metadata, index + 1)
            return text

        outline = reader.outline()
        # Without an outline, the headings are read from the type: bold or italic lines, larger text.
        reader.wants_headings = not outline
        texts = (read(index) for index in range(reader.page_count))
        # The first pages are read ahead to learn the running heads and feet, then given out with
        # the rest; only that window is held at once.
        window = list(itertools.islice(texts, RUNNING_WINDOW))
        running = running_lines(window)
        # And the window's headings, to learn the running heads set apart in type.
        styled = [reader.headings(index) for index in range(len(window))]
        repeated = running_headings(styled, sum(1 for text in window if text.strip()))
        # A head set apart in type at the same place on every other page is a running line too, where
        # the text alone cannot tell: a document of 2 pages is too short to learn running lines from.
        running |= {_line_key(clean_inline(line)) for heading in repeated for line in heading.lines}
        for number, text in enumerate(itertools.chain(window, texts), start=1):
            kept, cut = _cut_running_lines(text, running)
            # A scan stamped in a text layer (a Bates number, "Page 2 of 9") has text, so it was not read
            # by OCR above; once the stamp goes as a running line, nothing of the scan is left. In a PDF
            # too short to learn running lines, the stamp is all its text layer holds.
            stamped = (not kept and bool(text)) or (reader.page_count < _FEWEST_RUNNING and _a_stamp(kept))
            if stamped and reader.is_scan(number - 1):
                if not ocr.available():
                    _unread(metadata, number)
                elif seen := without_running_lines(scans.read(reader, number - 1), running):
                    kept = seen
                    scans.describe(metadata)
            if outline:
                sections = placed_headings(kept, outline.get(number - 1, []))
            else:
                found = styled[number - 1] if number <= len(styled) else reader.headings(number - 1)
                cut_keys = {_line_key(line) for line in cut}
                titles = [
                    heading.text for heading in found if not _a_running_heading(heading, cut_keys, repeated)
                ]
                sections = placed_headings(kept, titles, unfound_at_top=False)
            yield Page(number=number, text=kept, sections=sections)
    finally:
        reader.close()


#: Outline levels read: deeper bookmarks (a rare table of contents nests below a few levels) are left out.
_OUTLINE_DEPTH = 6
#: Bookmarks read at most: an outline of every paragraph says nothing more about sections.
_OUTLINE_MOST = 5_000
#: A word of a heading, as it is matched in the page's text: case, spacing and punctuation may differ.
_WORD = re.compile(r"[^\W_]+")
#: What may precede a heading on its line: a number or mark ("3.2", "IV.", "A)", "§").
_HEADING_LEAD = re.compile(r"[\W\d_]*|[A-Za-z][.)]\s*|[IVXLCivxlc]+[.)]\s*")


def _bookmark_page(doc: Any, bookmark: Any) -> int | None:
    """The 0-based page ``bookmark`` leads to, by its destination or its go-to action; None if neither."""
    dest = pdfium_c.FPDFBookmark_GetDest(doc.raw, bookmark.raw)
    if not dest:
        action = pdfium_c.FPDFBookmark_GetAction(bookmark.raw)
        if not action or pdfium_c.FPDFAction_GetType(action) != pdfium_c.PDFACTION_GOTO:
            return None
        dest = pdfium_c.FPDFAction_GetDest(doc.raw, action)
        if not dest:
            return None
    index = int(pdfium_c.FPDFDest_GetDestPageIndex(doc.raw, dest))
    return index if index >= 0 else None


def placed_headings(text: str, titles: list[str], *, unfound_at_top: bool = True) -> tuple[Section, ...]:
    """``titles`` (the headings of one page, in order) as sections of the page's ``text``.

    Each starts at the line where its words appear, in order, after the previous heading's; case, spacing,
    line breaks and punctuation may differ from the title's. An appearance at the start of a line (after
    a number such as "3.2" at most) is preferred to one within a sentence. A heading whose words are not
    on the page (an outline entry worded otherwise than the text) starts where the previous one does, or
    at the top of the page: its destination is this page, so no earlier text is put under it; without
    ``unfound_at_top`` it is left out (a heading found in the page's type whose line the page's text
    lost, as a running line).
    """
    words = [(match.group().casefold(), match.start()) for match in _WORD.finditer(text)]
    keys = [word for word, _ in words]
    sections: list[Section] = []
    after = 0  # the first word the next heading may start at
    for title in titles:
        wanted = [word.casefold() for word in _WORD.findall(title)]
        start = sections[-1].start if sections else 0
        found = _heading_at(text, words, keys, wanted, after) if wanted else None
        if found is not None:
            start, after = text.rfind("\n", 0, words[found][1]) + 1, found + len(wanted)
        elif not unfound_at_top:
            continue
        sections.append(Section(start, title))
    return tuple(sections)


def _heading_at(
    text: str, words: list[tuple[str, int]], keys: list[str], wanted: list[str], after: int
) -> int | None:
    """The index in ``words`` where ``wanted`` first appears from ``after`` on, at a line's start if it
    does there anywhere, else within a line; None if nowhere."""
    within: int | None = None
    first = wanted[0]
    for index in range(after, len(keys) - len(wanted) + 1):
        if keys[index] != first or keys[index : index + len(wanted)] != wanted:
            continue
        offset = words[index][1]
        line_start = text.rfind("\n", 0, offset) + 1
        if _HEADING_LEAD.fullmatch(text[line_start:offset]):
            return index
        if within is None:
            within = index
    return within


#: A stamp on a scan is one short line.
_STAMP_CHARS = 60


def _a_stamp(text: str) -> bool:
    """Whether ``text``, all of a page's text layer, could be a stamp on a scan: one short line."""
    return bool(text) and "\n" not in text and len(text) <= _STAMP_CHARS


def _unread(metadata: SourceMetadata, number: int) -> None:
    """Name page ``number`` in ``ocr_unread``: a scanned page left empty because Tesseract is missing,
    which nothing else would say."""
    unread = metadata.get("ocr_unread")
    metadata["ocr_unread"] = f"{unread} {number}" if isinstance(unread, str) else str(number)


#: A page is rendered at this scale (36 DPI) to see whether what it draws shows: words at that size
#: still make dark pixels.
_BLANK_CHECK_SCALE = 0.5
#: Grey levels between the darkest and lightest pixel under which a rendered page is one colour: blank.
_BLANK_CONTRAST = 16

#: An image covering this share of a page makes it a scan (:meth:`_PageReader.is_scan`); a figure on a page
#: of text covers less.
SCAN_SHARE = 0.8

#: The fewest lines a margin column of line numbers counts: transcripts and pleadings number 25 or 28,
#: while a short run "1 2 3 4 5" on lines of their own is as likely a table's column.
LINE_NUMBERS_MIN = 10
# A line holding only "1", then "2", "3", ...: where a margin column of line numbers may start.
_LINE_NUMBERS_START = re.compile(r"^[ \t]*1\n[ \t]*2\n[ \t]*3\n", re.MULTILINE)


def without_line_numbers(text: str) -> str:
    """``text`` without a margin column of line numbers (a transcript's ``1`` to ``25``), which PDFium
    reads as one block of lines ``1``, ``2``, ... ``N`` apart from the lines they number.

    Only a run counting up from 1 by one, each number on a line of its own, of at least
    :data:`LINE_NUMBERS_MIN` lines is taken for one.
    """
    if "\n2\n" not in text:  # nearly every page: no run to look for
        return text
    for found in _LINE_NUMBERS_START.finditer(text):
        lines = text[found.start() :].split("\n")
        count = 0
        while count < len(lines) and lines[count].strip() == str(count + 1):
            count += 1
        if count >= LINE_NUMBERS_MIN:
            end = found.start() + sum(len(line) + 1 for line in lines[:count])
            return (text[: found.start()] + text[end:]).strip("\n")
    return text


# -- running heads and feet -------------------------------------------------------------------------
# The journal line, document code or page number printed at the top or bottom of every page
# ("Federal Register / Vol. 85, No. 152 / ... / Proposed Rules 47700", "VerDate Sep<11>2014 ...") is
# no part of the text: left in, it is glued to the sentence it interrupts, takes a chunk's keyword
# terms and is quoted as evidence.

#: Pages read ahead to learn a document's running lines.
RUNNING_WINDOW = 8
#: The fewest pages with text a running line is learned from.
_FEWEST_RUNNING = 3
#: Lines at each edge of a page that may be running lines.
_EDGE_LINES = 2
#: A running line must be at an edge of this share of the window's pages with text, and of 3 at least.
_RUNNING_SHARE = 0.5
#: A running line this long also matches the start of a line it was run together with.
_PREFIX_CHARS = 16
# A page number before or after a running head ("47700 Federal Register ...", "... Rules 47701").
_EDGE_NUMBER = re.compile(r"^\d+\s+|\s+\d+$")
_DIGITS = re.compile(r"\d+")


def _line_key(line: str) -> str:
    """A line as running lines compare: any case and spacing, page and other numbers as ``#``."""
    key = " ".join(line.split()).lower()
    return _DIGITS.sub("#", _EDGE_NUMBER.sub("", key))


def _edges(text: str) -> list[str]:
    lines = [line for line in text.split("\n") if line.strip()]
    # A short page's inner lines are its body, not a second head or foot line.
    edge = _EDGE_LINES if len(lines) > 2 * _EDGE_LINES else 1
    return lines[:edge] + lines[-edge:]


def _is_running(key: str, running: frozenset[str]) -> bool:
    return key in running or any(len(r) >= _PREFIX_CHARS and key.startswith(r) for r in running)


def running_lines(pages: list[str]) -> frozenset[str]:
    """The keys of the lines at an edge of at least half of ``pages`` (3 at least) that hold text."""
    keyed = [{_line_key(line) for line in _edges(text)} for text in pages if text.strip()]
    need = max(_FEWEST_RUNNING, math.ceil(len(keyed) * _RUNNING_SHARE))
    if len(keyed) < need:
        return frozenset()
    counts = Counter(key for keys in keyed for key in keys)
    exact = {key for key, n in counts.items() if n >= need}
    # A running line run together with what follows it on some pages still counts on those.
    candidates = {key for key in counts if len(key) >= _PREFIX_CHARS} - exact
    loose = {key for key in candidates if sum(any(k.startswith(key) for k in keys) for keys in keyed) >= need}
    return frozenset(exact | loose)


def without_running_lines(text: str, running: frozenset[str]) -> str:
    """``text`` without the running lines among its first and last :data:`_EDGE_LINES` lines with
    text; a line is dropped only while every line before it (from that edge) was."""
    return _cut_running_lines(text, running)[0]


def _cut_running_lines(text: str, running: frozenset[str]) -> tuple[str, list[str]]:
    """``text`` as :func:`without_running_lines` leaves it, and the running lines it cut."""
    if not running:
        return text, []
    lines = text.split("\n")
    start, end = 0, len(lines)
    for _ in range(_EDGE_LINES):
        while start < end and not lines[start].strip():
            start += 1
        if start < end and _is_running(_line_key(lines[start]), running):
            start += 1
        else:
            break
    for _ in range(_EDGE_LINES):
        while end > start and not lines[end - 1].strip():
            end -= 1
        if end > start and _is_running(_line_key(lines[end - 1]), running):
            end -= 1
        else:
            break
    cut = [line for line in lines[:start] + lines[end:] if line.strip()]
    return "\n".join(lines[start:end]).strip("\n"), cut


#: Headings this close in height (points) on two pages are at the same place.
_SAME_PLACE = 2.0


def running_headings(pages: list[list[StyledHeading]], with_text: int) -> list[StyledHeading]:
    """The headings of ``pages`` (the headings of the first pages of a document, of which ``with_text``
    hold text) repeated at the same place on half of those pages, and two at least: running heads set
    apart in type, as a journal's name and volume atop each page.

    Half, not most: a journal's name and its authors' often run on alternate pages. A page number in the
    head, or any number, may differ (see :func:`_line_key`).
    """
    need = max(2, with_text // 2)
    by_key: dict[str, list[tuple[int, StyledHeading]]] = {}
    for number, page in enumerate(pages):
        for heading in page:
            by_key.setdefault(_line_key(heading.text), []).append((number, heading))
    return [
        heading
        for alike in by_key.values()
        for _, heading in alike
        if len({number for number, other in alike if abs(other.top - heading.top) <= _SAME_PLACE}) >= need
    ]


def _a_running_heading(heading: StyledHeading, cut: set[str], repeated: list[StyledHeading]) -> bool:
    """Whether ``heading`` is a running head: a line of it was cut from its page's text as a running line
    (the keys of those lines are ``cut``), or it is one of the ``repeated`` headings, at the same place."""
    if any(_line_key(clean_inline(line)) in cut for line in heading.lines):
        return True
    key = _line_key(heading.text)
    return any(
        _line_key(other.text) == key and abs(other.top - heading.top) <= _SAME_PLACE for other in repeated
    )
