"""A PDF page's text as PDFium gives it, for the PDF loader (:mod:`citeline.load.pdf`) and its table
finder (:mod:`citeline.load.pdf_tables`).

PDFium gives a page's text two ways: the text inside the page's box (:func:`page_text`), which the
loader keeps, and its characters in the order of its character list (:class:`IndexedText`), by whose
indices PDFium is asked each character's box, size and font. The two hold the same characters but for
line breaks; :func:`aligned` and :func:`aligned_positions` say where
the one's characters are in the other.

PDFium lists a character outside the Basic Multilingual Plane (a mathematical italic, an emoji) as its
two UTF-16 halves, at two indices. The character-indexed text keeps them apart, as two surrogates, so
that each of its characters is at PDFium's index; the alignments count such a character of the page's
text as its two halves too, and the page's text never holds a surrogate (:func:`joined` puts a pair
back together where the indexed text's own characters are wanted, as a heading's).

Nothing here takes ``_PDFIUM_LOCK`` (:mod:`citeline.load.pdf`): every function is called with it held,
as every PDFium call is, and so is the kept buffer (:data:`_TEXT_BUFFER`) used.
"""

from __future__ import annotations

import ctypes
import functools
import re
from typing import Any

import pypdfium2.raw as pdfium_c

#: The buffer pages' text is read into (:func:`page_text`, :func:`indexed_text`), grown to the longest
#: page read. pypdfium2's helpers make a ctypes array of each page's length, a new ctypes type each
#: time, which only the cyclic garbage collector frees, and a process with many long-lived objects runs
#: it seldom.
_TEXT_BUFFER: list[Any] = []
#: Pages longer than this (in UTF-16 units) get a buffer of their own rather than growing the kept one.
_TEXT_BUFFER_MAX = 1 << 18


def _text_buffer(units: int) -> Any:
    """A ctypes buffer of at least ``units`` UTF-16 units: the kept one, grown if need be."""
    if _TEXT_BUFFER and len(_TEXT_BUFFER[0]) >= units:
        return _TEXT_BUFFER[0]
    buffer = (ctypes.c_ushort * max(units, 4096))()
    if units <= _TEXT_BUFFER_MAX:
        _TEXT_BUFFER[:] = [buffer]
    return buffer


def page_text(textpage: Any) -> str:
    """The text inside the page's box, as pypdfium2's ``get_text_bounded()`` reads it, into the kept
    buffer (see :data:`_TEXT_BUFFER`)."""
    left, bottom, right, top = textpage.page.get_bbox()
    args = (textpage.raw, left, top, right, bottom)
    units = int(pdfium_c.FPDFText_GetBoundedText(*args, None, 0))
    if units <= 0:
        return ""
    buffer = _text_buffer(units)
    pdfium_c.FPDFText_GetBoundedText(*args, buffer, units)
    return ctypes.string_at(buffer, 2 * units).decode("utf-16-le", errors="ignore")


def indexed_text(textpage: Any, count: int) -> str:
    """The text of the page's ``count`` characters in character order, one UTF-16 unit each, a
    character outside the Basic Multilingual Plane as its two halves (surrogates), so that each is at
    its index in PDFium's character list (``""`` when PDFium writes another number of units)."""
    if not count:
        return ""
    units = count + 1  # and the NUL
    buffer = _text_buffer(units)
    if int(pdfium_c.FPDFText_GetText(textpage.raw, 0, count, buffer)) != units:
        return ""
    text = ctypes.string_at(buffer, 2 * count).decode("utf-16-le", errors="replace")
    # Decoding joins a pair of halves into one character (errors="surrogatepass" passes only a half
    # alone): parted again, each character is at its index.
    return _ASTRAL.sub(_halves, text)


#: A character outside the Basic Multilingual Plane: two UTF-16 units, two of PDFium's indices.
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _halves(found: re.Match[str]) -> str:
    """The character ``found`` (outside the Basic Multilingual Plane) as its two UTF-16 halves."""
    code = ord(found[0]) - 0x10000
    return chr(0xD800 + (code >> 10)) + chr(0xDC00 + (code & 0x3FF))


def joined(units: str) -> str:
    """``units`` (of a character-indexed text) with each pair of halves as the one character it spells,
    and a half alone (a pair cut in two) as U+FFFD: text fit to be kept, as a heading's."""
    return units.encode("utf-16-le", errors="surrogatepass").decode("utf-16-le", errors="replace")


def _as_units(text: str) -> tuple[str, list[int]] | None:
    """``text`` spelt as a character-indexed text is (each character outside the Basic Multilingual
    Plane as its two halves), and the index in ``text`` of each of its units' character; None when
    ``text`` has no such character, the two then the same."""
    if _ASTRAL.search(text) is None:
        return None
    back = [i for i, ch in enumerate(text) for _ in range(2 if ch > "\uffff" else 1)]
    return _ASTRAL.sub(_halves, text), back


class IndexedText:
    """One text page's character count and character-indexed text (:func:`indexed_text`), each asked of
    PDFium when first wanted and then kept: the superscript marks, the table finder and the headings of
    a page all read them, in one pass over the page."""

    def __init__(self, textpage: Any) -> None:
        self.textpage = textpage

    @functools.cached_property
    def count(self) -> int:
        """The number of characters in the page's character list."""
        return int(self.textpage.count_chars())

    @functools.cached_property
    def text(self) -> str:
        """The :attr:`count` characters as text (see :func:`indexed_text`)."""
        return indexed_text(self.textpage, self.count)


def aligned(chars: str, text: str) -> list[int] | None:
    """Where each of PDFium's characters ``chars`` falls in ``text`` (the page's text, which lacks
    some of the line breaks the list has, and may hold marks put in since, as ``^`` before a
    superscript), a line break missing from the text at the place of the character before; None if the
    two differ otherwise. Both halves of a character outside the Basic Multilingual Plane fall at its
    place in ``text``."""
    spelt = _as_units(text)
    if spelt is None:
        return _aligned(chars, text)
    units, back = spelt
    places = _aligned(chars, units)
    return None if places is None else [back[place] if place >= 0 else place for place in places]


def _aligned(chars: str, text: str) -> list[int] | None:
    places: list[int] = []
    j = 0
    for ch in chars.replace("\ufffe", "\x02"):
        while j < len(text) and text[j] != ch and text[j] in "^ " and ch not in "\r\n":
            j += 1
        if j < len(text) and text[j] == ch:
            places.append(j)
            j += 1
        elif ch in "\r\n":
            places.append(j - 1)
        else:
            return None
    return places


def aligned_positions(indexed: str, text: str, positions: list[int]) -> list[int] | None:
    """Where ``positions`` (ascending) of ``indexed`` fall in ``text``, which holds the same characters
    but for line breaks ``indexed`` has more of; None if the two differ otherwise, or a position is at a
    line break ``text`` lacks.

    Stricter than :func:`aligned`, for text no mark was put in yet, and it stops at the last position.
    A position at either half of a character outside the Basic Multilingual Plane falls before it.
    """
    spelt = _as_units(text)
    if spelt is None:
        return _aligned_positions(indexed, text, positions)
    units, back = spelt
    out = _aligned_positions(indexed, units, positions)
    return None if out is None else [back[position] for position in out]


def _aligned_positions(indexed: str, text: str, positions: list[int]) -> list[int] | None:
    out: list[int] = []
    wanted = iter(positions)
    target = next(wanted, None)
    j = 0
    for i, ch in enumerate(indexed):
        if target is None:
            break
        if j < len(text) and text[j] == ch:
            if i == target:
                out.append(j)
                target = next(wanted, None)
            j += 1
        elif ch in "\r\n":
            if i == target:
                return None
        else:
            return None
    return out if target is None else None
