"""Text cleaning shared by every loader.

Chunk offsets are character positions in the cleaned text, so each loader cleans a page's text once,
before it builds the :class:`~citeline.types.Page`, and never changes it afterwards.
"""

from __future__ import annotations

import re
import unicodedata

# Typographic ligatures (common in PDFs set with TeX or InDesign) break word matching: "ﬁlled" is not
# "filled" to a keyword index. Only these are expanded; full NFKC would also rewrite superscripts,
# fractions and full-width forms, which carry meaning.
_LIGATURES = str.maketrans(
    {
        "\ufb00": "ff",
        "\ufb01": "fi",
        "\ufb02": "fl",
        "\ufb03": "ffi",
        "\ufb04": "ffl",
        "\ufb05": "st",
        "\ufb06": "st",
    }
)
_LINE_BREAKS = re.compile(r"\r\n|[\r\v\f\x85\u2028\u2029]")
# C0 and C1 controls except tab and newline, plus invisible characters that only get in the way of
# matching: byte-order marks, zero-width spaces and noncharacters (pdfium marks some glyphs with U+FFFE).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\ufeff\ufffe\uffff]")
# A str can hold a UTF-16 surrogate on its own (a file name or bytes decoded with "surrogateescape", a
# "\\ud800" escape in JSON, a PDF string cut between the halves of a pair); UTF-8 cannot, so PostgreSQL
# refuses any text that holds one. What the character was is lost: U+FFFD says so where it stood.
LONE_SURROGATES = re.compile(r"[\ud800-\udfff]")
# What PostgreSQL cannot store in a text value at all: NUL and lone surrogates.
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
_SOFT_HYPHEN_AT_BREAK = re.compile(r"\u00ad[ \t]*\n[ \t]*")
_LETTER = r"[^\W\d_]"
# A word broken across a line break: letter, hyphen (or soft hyphen), newline, letter.
_BROKEN_WORD = re.compile(rf"({_LETTER})-[ \t]*\n[ \t]*({_LETTER}\S*)[ \t]*(\n?)")
# Tried only where a run of spaces starts, and the run taken whole: a run that does not end its line
# ("start" + 100,000 spaces + "end", or a deep list's indents) was tried again from each of its spaces,
# every try scanning to the run's end (quadratic: 20 s for 40,000 spaces, the server stalled meanwhile).
_TRAILING_SPACE = re.compile(r"(?<![^\S\n])[^\S\n]++$", re.MULTILINE)
_BLANK_RUNS = re.compile(r"\n{3,}")
_SPACE_RUNS = re.compile(r"\s+")


def _join_broken_word(match: re.Match[str]) -> str:
    before, rest, newline = match.group(1), match.group(2), match.group(3)
    # Only lower-case on both sides is a word split by the typesetter; "LDL-\nC" or "COVID-\n19" is a
    # compound that happens to meet the margin. The line break moves after the rejoined word so the
    # line structure (table rows, numbered transcript lines) survives.
    if before.islower() and rest[0].islower():
        more_follows = bool(newline) or match.end() < len(match.string)
        return f"{before}{rest}" + ("\n" if more_follows else "")
    return match.group(0)


def clean_text(text: str) -> str:
    """Return ``text`` cleaned for indexing.

    Normalises line endings to ``\\n`` and Unicode to NFC, expands ligatures, removes NULs and other
    control characters, replaces lone surrogates with U+FFFD, rejoins words hyphenated across a line
    break (``exam-\\nple`` becomes ``example``, ``LDL-C`` stays), strips trailing spaces, collapses runs
    of blank lines to one and drops blank lines at both ends.
    """
    text = _LINE_BREAKS.sub("\n", LONE_SURROGATES.sub("\ufffd", text))
    text = unicodedata.normalize("NFC", text).translate(_LIGATURES)
    text = _CONTROLS.sub("", text)
    text = _SOFT_HYPHEN_AT_BREAK.sub("-\n", text).replace("\u00ad", "")
    text = _TRAILING_SPACE.sub("", text)
    text = _BROKEN_WORD.sub(_join_broken_word, text)
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip("\n")


def clean_inline(text: str) -> str:
    """Return ``text`` cleaned as :func:`clean_text` does, then folded onto one line.

    For values that are rendered inside a larger line, such as CSV cells: every run of whitespace,
    line breaks included, becomes one space.
    """
    text = unicodedata.normalize("NFC", LONE_SURROGATES.sub("\ufffd", text)).translate(_LIGATURES)
    text = _CONTROLS.sub("", _LINE_BREAKS.sub("\n", text)).replace("\u00ad", "")
    return _SPACE_RUNS.sub(" ", text).strip()


def storable(text: str) -> str:
    """Return ``text`` with each character PostgreSQL cannot store (NUL, a lone surrogate) replaced by
    U+FFFD, one for one, so offsets into it still hold.

    For text no loader cleaned: pages, titles and names a caller built in memory, and file names.
    """
    if text.isascii():  # known without a scan (CPython keeps the flag): no surrogate, only NUL to find
        return text.replace("\x00", "\ufffd") if "\x00" in text else text
    return _UNSTORABLE.sub("\ufffd", text) if _UNSTORABLE.search(text) else text
