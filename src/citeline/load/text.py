"""Plain text (.txt) and Markdown (.md, .markdown) sources, and the text decoding other loaders share."""

from __future__ import annotations

import codecs
import datetime
import html
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import charset_normalizer
import yaml

from citeline.errors import LoadError
from citeline.load.clean import clean_inline, clean_text
from citeline.types import CELL_BORDER, LoadedSource, Page, Section, SourceMetadata, table_cells

_BOMS = (
    # UTF-32 first: its little-endian mark begins with UTF-16's.
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Text may carry a stray control character or two; binary data decoded as text is full of them.
_MAX_CONTROL_RATIO = 0.01
_STRAY_CONTROLS = 2
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
#: What a file refused as binary is by its first bytes, when they say it: a PDF, an Office file or an
#: image saved under a text extension is named, with what to do, rather than "binary content".
_IMAGE = "citeline reads an image only as a page of a PDF (by OCR)"
_OFFICE = "save it as PDF, text or CSV"
_KINDS_BY_START: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "a PDF (it starts with %PDF); rename it to .pdf"),
    (
        b"PK\x03\x04",
        "a ZIP archive, as .docx, .xlsx and .pptx files are, not text; citeline reads none of them: "
        + _OFFICE,
    ),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", f"an old Office file (.doc, .xls, .ppt), not text; {_OFFICE}"),
    (b"\x89PNG\r\n\x1a\n", f"a PNG image, not text; {_IMAGE}"),
    (b"\xff\xd8\xff", f"a JPEG image, not text; {_IMAGE}"),
    (b"GIF87a", f"a GIF image, not text; {_IMAGE}"),
    (b"GIF89a", f"a GIF image, not text; {_IMAGE}"),
    (b"II*\x00", f"a TIFF image, not text; {_IMAGE}"),
    (b"MM\x00*", f"a TIFF image, not text; {_IMAGE}"),
)
# A PDF may have bytes before its header (a mail gateway's, a printer's): readers look this far for it.
_PDF_HEADER_WITHIN = 1024
# UTF-16 puts the NUL of each ASCII character on one side of the pair: this many times as many there
# as on the other says which byte order it is.
_UTF16_NUL_SIDE = 10
# Bytes that are not UTF-8, as the "surrogateescape" error handler gives them.
_ESCAPED_BYTES = re.compile("[\udc80-\udcff]")
# How far (in charset-normalizer's "chaos" percentage points) cp1252 may trail the best guess and
# still win; see _decode.
_CP1252_SLACK = 10.0


def _decode(data: bytes) -> str | None:
    """Decode ``data``, or return ``None`` when no text encoding fits."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                return None
    if (utf16 := _utf16_without_bom(data)) is not None:
        return utf16
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if (mixed := _mostly_utf8(data)) is not None:
        return mixed
    matches = charset_normalizer.from_bytes(data)
    best = matches.best()
    if best is None:
        return None
    # On short Western text charset-normalizer ranks the single-byte Latin code pages almost at
    # random (café comes back as UTF-16, "Le cœur" as mac_latin2). cp1252 is what such files nearly
    # always are, so it wins whenever it is a plausible reading at all.
    for match in matches:
        plausible = match.percent_chaos <= best.percent_chaos + _CP1252_SLACK
        if plausible and "cp1252" in match.could_be_from_charset:
            try:
                return data.decode("cp1252")
            except UnicodeDecodeError:
                break
    return str(best)


def _utf16_without_bom(data: bytes) -> str | None:
    """``data`` decoded as UTF-16 without a byte-order mark, when its NULs say it is one.

    Some Windows tools write UTF-16 with no mark. Its ASCII text has a NUL beside every character, on
    the odd bytes (little-endian) or the even ones (big-endian), and is valid UTF-8 byte for byte: read
    as UTF-8 it is half control characters, and refused as binary.
    """
    if len(data) % 2 or data.count(0) < len(data) // 4:
        return None
    odd, even = data[1::2].count(0), data[0::2].count(0)
    if odd > _UTF16_NUL_SIDE * even:
        encoding = "utf-16-le"
    elif even > _UTF16_NUL_SIDE * odd:
        encoding = "utf-16-be"
    else:
        return None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        return None


def _mostly_utf8(data: bytes) -> str | None:
    """``data`` read as UTF-8 with its few bytes that are not UTF-8 read as Windows-1252, when it holds
    more UTF-8 characters beyond ASCII than such bytes.

    A UTF-8 file with a line pasted or appended from a Windows-1252 one fails strict UTF-8, and no single
    encoding reads the whole: it was refused as binary. A Windows-1252 file hardly ever holds a valid
    UTF-8 sequence ("Ã©"), so it still goes to the detection after this.
    """
    text = data.decode("utf-8", errors="surrogateescape")
    # Counted by what removing them leaves, which holds no object per character of a long file.
    foreign = len(text) - len(_ESCAPED_BYTES.sub("", text))
    beyond_ascii = len(text) - len(text.encode("ascii", "ignore"))
    if beyond_ascii - foreign <= foreign:
        return None
    return _ESCAPED_BYTES.sub(_windows_1252, text)


def _windows_1252(escaped: re.Match[str]) -> str:
    byte = bytes([ord(escaped.group()) - 0xDC00])
    try:
        return byte.decode("cp1252")
    except UnicodeDecodeError:  # the five bytes cp1252 leaves undefined: control characters in Latin-1
        return byte.decode("latin-1")


def read_text_file(path: Path) -> str:
    """Read ``path`` and decode it to text, detecting the encoding.

    Raises :class:`LoadError` for unreadable files, binary content and files with no visible text.
    """
    source = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LoadError(source, f"cannot read file ({exc.strerror or exc})") from exc
    if not data.strip():
        raise LoadError(source, "empty file")
    text = _decode(data)
    if text is None or len(_CONTROL.findall(text)) > max(_STRAY_CONTROLS, _MAX_CONTROL_RATIO * len(text)):
        raise LoadError(source, _binary(data))
    if not text.strip():
        raise LoadError(source, "empty file")
    return text


def _binary(data: bytes) -> str:
    """Why binary ``data`` is refused: what its first bytes say it is, when they say."""
    for start, kind in _KINDS_BY_START:
        if data.startswith(start):
            return f"looks like {kind}"
    if b"%PDF-" in data[:_PDF_HEADER_WITHIN]:
        return "looks like a PDF (%PDF- is in its first bytes); rename it to .pdf"
    return "binary content, not text"


def load_text(path: Path) -> LoadedSource:
    """Load a plain-text file: one page, or one page per form feed (``\\f``) as printers paginate.

    The title is the file stem.
    """
    text = read_text_file(path)
    parts = text.split("\f")
    # A final form feed ends the last page; it does not start an empty one.
    if len(parts) > 1 and not parts[-1].strip():
        parts.pop()
    return LoadedSource(content_type="text/plain", title=path.stem, pages=_text_pages(parts))


def _text_pages(parts: list[str]) -> Iterator[Page]:
    for number, part in enumerate(parts, start=1):
        yield Page(number=number, text=clean_text(part))


class Heading(NamedTuple):
    """A Markdown heading found in a text: its level (1-6) and where it starts."""

    level: int
    section: Section


# The closing "#"s are taken off in _atx_text: matched here by a lazy text then optional spaces, a run
# of spaces in a heading was tried from each of its spaces to its end (quadratic).
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*))?")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
# Lines that cannot be the text of a setext heading, so a "---" under them is a rule or list syntax.
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-+*>]|\d+[.)])(?:[ \t]|$)| {4}|\t")
# Emphasis and code spans hold no character of their own delimiter, and a code span's backticks are a
# whole run: the lazy "anything up to the delimiter again" these were scanned a heading to its end from
# each opening "_", "*", "`" or "[" that none closed (quadratic), and a run of backticks every way of
# cutting it (cubic: minutes for 20,000). Nested emphasis ("**a *b* c**") goes one level a pass.
_INLINE_MARKUP = re.compile(
    r"(\*{1,3})([^\s*](?:[^*]*[^\s*])?)\1"
    r"|(_{1,3})([^\s_](?:[^_]*[^\s_])?)\3"
    r"|(?<!`)(`+)(?!`)([^\s`](?:[^`]*[^\s`])?)\5(?!`)"
)
_LINK = re.compile(r"!?\[([^\[\]]*)\]\([^)\[]*\)")
_EMPHASIS_LEVELS = 3


def _atx_text(raw: str) -> str:
    """An ATX heading's text: ``raw`` without its closing sequence of "#"s (``## Usage ##``), which
    needs a space before it (``# C#`` keeps its "#")."""
    text = raw.rstrip(" \t")
    bare = text.rstrip("#")
    if bare != text and (not bare or bare[-1] in " \t"):
        return bare.rstrip(" \t")
    return text


def _unmarked(match: re.Match[str]) -> str:
    return match.group(2) or match.group(4) or match.group(6)


def _heading_text(raw: str) -> str:
    text = _LINK.sub(r"\1", raw)
    for _ in range(_EMPHASIS_LEVELS):
        text, found = _INLINE_MARKUP.subn(_unmarked, text)
        if not found:
            break
    return " ".join(text.split())


def find_headings(text: str) -> list[Heading]:
    """Return the ATX (``# Title``) and setext (``Title`` over ``===``) headings of Markdown ``text``.

    Each section starts at the first character of its heading's line, so
    ``text[section.start:]`` begins with that line. Headings inside fenced code blocks are ignored.
    """
    headings: list[Heading] = []
    fence: str | None = None
    # Start offset and lines of the paragraph being read, which a setext underline turns into a heading.
    paragraph_start: int | None = None
    paragraph: list[str] = []
    offset = 0
    for line in text.split("\n"):
        start, offset = offset, offset + len(line) + 1
        if fence is not None:
            closing = _FENCE_CLOSE.fullmatch(line)
            if closing and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(fence):
                fence = None
            continue
        fence_match = _FENCE.match(line)
        if fence_match:
            fence, paragraph_start, paragraph = fence_match.group(1), None, []
            continue
        atx = _ATX.fullmatch(line)
        setext = _SETEXT.fullmatch(line)
        if atx:
            heading = _heading_text(_atx_text(atx.group(2) or ""))
            if heading:
                headings.append(Heading(len(atx.group(1)), Section(start, heading)))
            paragraph_start, paragraph = None, []
        elif setext and paragraph_start is not None:
            heading = _heading_text(" ".join(paragraph))
            level = 1 if setext.group(1)[0] == "=" else 2
            headings.append(Heading(level, Section(paragraph_start, heading)))
            paragraph_start, paragraph = None, []
        elif setext or not line.strip() or (paragraph_start is None and _NOT_PARAGRAPH.match(line)):
            # Blank lines end a paragraph; so do an underline with no paragraph above it (a thematic
            # break) and a list item, quote or indented code line where a paragraph would start.
            paragraph_start, paragraph = None, []
        else:
            if paragraph_start is None:
                paragraph_start = start
            paragraph.append(line)
    return headings


_FRONT_MATTER = re.compile(r"---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|$)", re.DOTALL)
# Hugo's and Zola's TOML front matter, between "+++" lines.
_TOML_FRONT_MATTER = re.compile(r"\+\+\+[ \t]*\n(.*?\n)?\+\+\+[ \t]*(?:\n|$)", re.DOTALL)
_TOML_KEY = re.compile(r"\s*(?:[\w\"'.-]+[ \t]*=|\[)")
_FRONT_MATTER_KEY = re.compile(r"[A-Za-z_][\w-]*[ \t]*:(?:[ \t]|$)")
# What YAML refuses to read (control characters but tab and line breaks), cleaned out before it reads.
_UNREADABLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def split_front_matter(text: str) -> tuple[SourceMetadata, str]:
    """Split a leading YAML front-matter block (``---`` ... ``---``) off Markdown ``text``, or a TOML one
    (``+++`` ... ``+++``, read as :func:`_toml_values` says).

    Returns its top-level keys whose values are scalars, as their text (``version: 2`` as ``"2"``,
    ``draft: yes`` as ``"yes"``: YAML's base schema, which resolves nothing), or lists of scalars
    (``tags: [a, b]``, or ``- a`` lines under the key), and the body after it. Other values (nested
    mappings, lists of mappings, block scalars) are skipped, as are empty ones; so is a block YAML
    cannot read. Text that does not open with such a block, whose first line is a ``key:`` pair, comes
    back whole.
    """
    toml = _TOML_FRONT_MATTER.match(text)
    if toml and _TOML_KEY.match(toml.group(1) or ""):
        return _toml_values(toml.group(1) or ""), text[toml.end() :]
    match = _FRONT_MATTER.match(text)
    if match is None:
        return {}, text
    block = _UNREADABLE.sub("", match.group(1) or "")
    if not _FRONT_MATTER_KEY.match(block):
        return {}, text
    try:
        # The base loader reads every scalar as the string written: a title "No" stays "No", not False.
        data = yaml.load(block, Loader=yaml.BaseLoader)
    except yaml.YAMLError:
        data = None
    body = text[match.end() :]
    if not isinstance(data, dict):
        return {}, body
    pairs: SourceMetadata = {}
    for key, raw in data.items():
        value: str | list[str] | None = None
        if isinstance(raw, str) and not _block_scalar(block, key):
            value = clean_inline(raw) or None
        elif isinstance(raw, list) and all(isinstance(item, str) for item in raw):
            value = [item for item in (clean_inline(i) for i in raw) if item] or None
        if value:
            pairs[str(key)] = value
    return pairs, body


def _toml_values(block: str) -> SourceMetadata:
    """The top-level scalars and lists of scalars of a TOML front-matter block, as text as TOML writes
    them (``draft = false`` as ``"false"``, a date as ``2024-05-01``); nothing if TOML cannot read it."""
    try:
        data = tomllib.loads(block)
    except tomllib.TOMLDecodeError:
        return {}
    pairs: SourceMetadata = {}
    for key, raw in data.items():
        value: str | list[str] | None = None
        if isinstance(raw, list) and not any(isinstance(item, dict | list) for item in raw):
            value = [item for item in (clean_inline(_toml_text(i)) for i in raw) if item] or None
        elif not isinstance(raw, dict | list):
            value = clean_inline(_toml_text(raw)) or None
        if value:
            pairs[key] = value
    return pairs


def _toml_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def _block_scalar(block: str, key: str) -> bool:
    """Whether ``key``'s value is a block scalar (``|`` or ``>``): a text of its own, not a label."""
    return re.search(rf"^{re.escape(key)}[ \t]*:[ \t]*[|>]", block, re.MULTILINE) is not None


# A comment, or a code span that may show one ("`<!-- -->`"), matched first to be kept.
# A code span is a whole run of backticks up to the next run as long (CommonMark's backtick strings):
# matched from any backtick, a run of them was tried every way of cutting it (cubic: 20,000 backticks
# took minutes). Spaces before a comment are taken from the start of their run only (from each space of
# a long run, each try scanned to its end).
_CODE_SPAN = r"(?<!`)(`+)(?!`)(?:(?!\n[ \t]*\n).)+?(?<!`)\1(?!`)"
_COMMENT = re.compile(rf"{_CODE_SPAN}|(?<![ \t])[ \t]*+<!--.*?-->", re.DOTALL)
_INDENTED_CODE = re.compile(r" {4}|\t")
# The HTML elements a Markdown author writes: a tag of another name ("<unit>", "<claim>") is a
# placeholder the reader is meant to see.
_BLOCK_TAGS = frozenset(
    (
        *("address", "article", "aside", "blockquote", "br", "caption", "center", "details", "dd", "div"),
        *("dl", "dt", "figcaption", "figure", "footer", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr"),
        *("li", "main", "nav", "ol", "p", "picture", "pre", "section", "summary", "table", "tbody"),
        *("tfoot", "thead", "tr", "ul"),
    )
)
_CELL_TAGS = frozenset(("td", "th"))
_INLINE_TAGS = frozenset(
    (
        *("a", "abbr", "b", "bdi", "bdo", "big", "cite", "code", "del", "dfn", "em", "font", "i", "img"),
        *("input", "ins", "kbd", "label", "mark", "q", "s", "samp", "small", "source", "span", "strike"),
        *("strong", "sub", "sup", "tt", "u", "var", "video", "wbr"),
    )
)
# A code span (kept as written, so it is matched first: "`<b>`" shows the tag) or a tag. A span may run
# over lines, not over a blank line.
_TAG = re.compile(rf"{_CODE_SPAN}|<(/?)([A-Za-z][A-Za-z0-9]*)(?:\s[^<>]*)?/?>", re.DOTALL | re.IGNORECASE)
_HTML_HEADING = re.compile(
    r"^ {0,3}<h([1-6])(?:\s[^<>]*)?>(.*?)</h\1\s*>[ \t]*$", re.IGNORECASE | re.MULTILINE
)
# A line opening with the tag of an HTML element starts an HTML block, which runs to a blank line (as
# CommonMark has it); an element inside a paragraph's text is left as written.
_HTML_BLOCK_START = re.compile(r" {0,3}</?([A-Za-z][A-Za-z0-9]*)(?:\s|/?>|$)")
# What each tag left out becomes while the lines are put back together (see _rendered).
_BREAK, _SPACE, _NOTHING = "\x00\x01", "\x00\x02", "\x00\x03"


def without_html(text: str) -> str:
    """Markdown ``text`` as a reader of it rendered sees it: HTML comments (``<!-- ... -->``) left out,
    an HTML heading (``<h2>Usage</h2>``) written as a Markdown one, an HTML table as a Markdown one (see
    :func:`_markdown_table`), the tags of other HTML elements left out, their text kept, and entity
    references (``&amp;``) decoded. Code (fenced, indented, or a span in backticks) is the code's own and
    stays as written.

    A README opening with a centred logo, an HTML ``<h1>`` and badges otherwise gives a first chunk of
    image addresses and links, quoted as evidence, and no title.
    """
    if "<" not in text and "&" not in text:
        return text
    if "<!--" in text:
        # Comments first, over all but fenced code: one may hold blank and indented lines.
        text = _outside_code(text, _without_comments, indented=False)
    return _outside_code(text, _rendered, indented=True)


def _without_comments(prose: str) -> str:
    """``prose`` without its HTML comments, code spans kept as written.

    Only the text up to the last ``-->`` is looked at: no comment opened after it can close, and each
    ``<!--`` of a run of them that none closes was scanned to the end (quadratic).
    """
    end = prose.rfind("-->") + len("-->")
    return _COMMENT.sub(_code_span_or_nothing, prose[:end]) + prose[end:] if end >= len("-->") else prose


def _outside_code(text: str, render: Callable[[str], str], *, indented: bool) -> str:
    """``text`` with each run of lines outside fenced code (and, if ``indented``, indented code) given
    to ``render``."""
    parts: list[str] = []
    fence: str | None = None
    prose: list[str] = []
    code = False  # in an indented code block
    for line in text.split("\n"):
        if fence is None:
            opening = _FENCE.match(line)
            # An indented code block starts after a blank line (or at the start) and runs on through
            # indented and blank lines; an indented line inside a paragraph or HTML block is neither.
            blank_before = not prose or not prose[-1].strip()
            code = indented and (
                bool(_INDENTED_CODE.match(line) and (code or blank_before)) or (code and not line.strip())
            )
            if opening is None and not code:
                prose.append(line)
                continue
            if prose:
                parts.append(render("\n".join(prose)))
                prose = []
            if opening is not None:
                fence, code = opening.group(1), False
            parts.append(line)
        else:
            closing = _FENCE_CLOSE.fullmatch(line)
            if closing and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(fence):
                fence = None
            parts.append(line)
    if prose:
        parts.append(render("\n".join(prose)))
    return "\n".join(parts)


def _rendered(prose: str) -> str:
    """Markdown ``prose`` (no code blocks) with its HTML blocks read as text and its entity references
    decoded; see :func:`without_html`."""
    lines = prose.split("\n")
    table_ends = _table_ends(lines) if "<" in prose else {}
    out: list[str] = []
    plain: list[str] = []  # the lines since the last HTML block, decoded together: a code span may span them
    at = 0
    while at < len(lines):
        if _starts_html_block(lines[at]):
            out.extend(_entities_decoded("\n".join(plain)).split("\n") if plain else [])
            plain = []
            end = _html_block_end(lines, at, table_ends)
            out.extend(_block_text("\n".join(lines[at:end])).split("\n"))
            at = end
        else:
            plain.append(lines[at])
            at += 1
    out.extend(_entities_decoded("\n".join(plain)).split("\n") if plain else [])
    return "\n".join(out)


# An entity or character reference as CommonMark reads one, its semicolon required ("?a=1&copy=2" in a
# link is no "©"), or a code span, matched first to be kept as written.
_REFERENCE = re.compile(
    rf"{_CODE_SPAN}|&(?:#[0-9]{{1,7}}|#[xX][0-9a-fA-F]{{1,6}}|[A-Za-z][A-Za-z0-9]{{1,31}});",
    re.DOTALL,
)


def _entities_decoded(text: str) -> str:
    """``text`` with its entity and character references (``&amp;``, ``&nbsp;``, ``&#169;``) written as
    the characters a reader sees, outside code spans."""
    return _REFERENCE.sub(_reference_text, text) if "&" in text else text


def _reference_text(reference: re.Match[str]) -> str:
    if reference.group(1):  # a code span
        return reference.group(0)
    character = html.unescape(reference.group(0))
    # A line break so written is no line break of the Markdown (it would end a row or a paragraph), and a
    # pipe no cell's end.
    return " " if character in ("\n", "\r") else "\\|" if character == "|" else character


def _html_block_end(lines: list[str], start: int, table_ends: dict[int, int | None]) -> int:
    """Where the HTML block opening at ``lines[start]`` ends: at its first blank line, or, while a
    ``<table>`` in it is open, at the first blank line after the table closes (``table_ends``: see
    :func:`_table_ends`). A table written with blank lines between its rows is one table to its reader
    (each of its lines opens an HTML block of its own, and the browser reads them together); one never
    closed ends at the first blank line as any block."""
    reach = start  # the last line a table opened in the block runs to
    for at in range(start, len(lines)):
        if at in table_ends:
            end = table_ends[at]
            if end is None:
                return next((b for b in range(start, len(lines)) if not lines[b].strip()), len(lines))
            reach = max(reach, end)
        if at > reach and not lines[at].strip():
            return at
    return len(lines)


def _table_ends(lines: list[str]) -> dict[int, int | None]:
    """For each line of ``lines`` opening a ``<table>``, the last line closing a table it opens, or
    ``None`` when one it opens is never closed. Found once for all the blocks of a text: looked for from
    each block, a file of many tables never closed took minutes."""
    ends: dict[int, int | None] = {}
    opened: list[int] = []
    for number, line in enumerate(lines):
        if "table" not in line.lower():
            continue
        for tag in _TAG.finditer(line):
            if tag.group(1) or tag.group(3).lower() != "table":
                continue
            if not tag.group(2):
                opened.append(number)
                ends.setdefault(number, number)
            elif opened:
                first = opened.pop()
                end = ends[first]
                ends[first] = None if end is None else max(end, number)
    for number in opened:
        ends[number] = None
    return ends


def _starts_html_block(line: str) -> bool:
    """Whether ``line`` opens an HTML block: with the tag of a block element (``<p align="center">``,
    ``<table>``), or with nothing but tags of other elements (a line of badges, a lone ``<img>``)."""
    start = _HTML_BLOCK_START.match(line)
    if start is None:
        return False
    name = start.group(1).lower()
    if name in _BLOCK_TAGS or name in _CELL_TAGS:
        return True
    return name in _INLINE_TAGS and not _text_left(_TAG.sub(_tag_text, line)).strip()


def _block_text(block: str) -> str:
    """The text of an HTML block: its tables as Markdown tables (see :func:`_markdown_table`), its
    heading lines as Markdown headings, its tags left out."""
    tables: list[str] = []
    block = _tables_set_aside(block, tables)
    lines = []
    for line in _TAG.sub(_tag_text, _HTML_HEADING.sub(_heading_line, block)).split("\n"):
        # What tags left of a line: the text between them, spaced once; a line of tags alone is blank.
        lines.append(_text_left(line) if "\x00" in line else line)
    text = _entities_decoded("\n".join(lines))
    # Blank lines around each table, so no line of text around it is read as one of its rows.
    return _TABLE_MARK.sub(lambda mark: f"\n{tables[int(mark.group(1))]}\n", text) if tables else text


# Where a table set aside stands in its block while the block's tags are left out (see _block_text).
_TABLE_MARK = re.compile("\x00\x04([0-9]+)\x00\x04")


def _tables_set_aside(block: str, tables: list[str]) -> str:
    """``block`` with each outermost ``<table>`` ... ``</table>`` in it rendered into ``tables`` and
    replaced by a mark on a line of its own; a table never closed is left in place."""
    parts: list[str] = []
    depth = start = done = 0
    for tag in _TAG.finditer(block):
        if tag.group(1) or tag.group(3).lower() != "table":
            continue
        if not tag.group(2):
            start = tag.start() if depth == 0 else start
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                parts.append(f"{block[done:start]}{_BREAK}\x00\x04{len(tables)}\x00\x04{_BREAK}")
                tables.append(_markdown_table(block[start : tag.end()]))
                done = tag.end()
    return "".join(parts) + block[done:]


class TableCell(NamedTuple):
    """A cell of an HTML table: its text, whether it is a ``<th>``, and the columns and rows it spans."""

    text: str
    header: bool
    columns: int = 1
    rows: int = 1
    #: Whether it shows a picture (``<img>``).
    picture: bool = False


class TableRow(NamedTuple):
    """A row of an HTML table: whether it is in the table's ``<thead>``, and its cells."""

    head: bool
    cells: list[TableCell]


class Placed(NamedTuple):
    """The cell filling one column of a row of a :class:`TableGrid`: ``cells[row].cells[cell]``;
    ``beside`` when it is there as the second or a later column of a cell spanning columns."""

    row: int
    cell: int
    beside: bool


class TableGrid(NamedTuple):
    """Where each cell of an HTML table stands: ``rows`` by column, cells spanning rows and columns
    placed in each they span, rows with no text (spacers) left out."""

    cells: list[TableRow]
    rows: list[list[Placed]]
    #: The row of ``cells`` each of ``rows`` is.
    sources: list[int]
    #: How many leading rows name the columns: the ``<thead>`` rows, else the leading rows of ``<th>``
    #: cells alone; 0 when none does.
    header_rows: int
    #: Whether each row opens with a ``<th>`` naming the row (with no header row: "Version | 2.1"), rows
    #: of one cell across the table aside.
    row_names: bool
    #: The texts of leading header rows of one cell across the table, which title it (not in ``rows``).
    titles: list[str]

    @property
    def pictures(self) -> bool:
        """Whether the table is a grid of pictures, not of data: no header rows, no row named by a
        ``<th>``, and a first row showing pictures (a README's grid of contributors' or sponsors' pictures
        and names), which names no columns."""
        if self.header_rows or self.row_names or not self.rows:
            return False
        return any(self.cells[placed.row].cells[placed.cell].picture for placed in self.rows[0])

    def text(self, placed: Placed) -> str:
        """The text ``placed`` stands for in a row: a cell's in the first column it spans (a row "Group
        A" across the table says it once); a cell spanning rows is written in each row, which is read
        alone."""
        return "" if placed.beside else self.cells[placed.row].cells[placed.cell].text

    def names(self) -> list[str]:
        """The column names: the header rows' texts down each column, a header cell's in each column it
        spans (two rows' joined: "Torque Dry"), else the first row's."""
        header = self.rows[: max(self.header_rows, 1)]
        width = max(len(row) for row in self.rows)
        return [
            " ".join(
                dict.fromkeys(
                    text
                    for row in header
                    if column < len(row)
                    and (text := self.cells[row[column].row].cells[row[column].cell].text)
                )
            )
            for column in range(width)
        ]


# Past this a colspan is a mistake or a trick ("colspan=1000" to fill a row): it spans the columns
# there are, not a thousand empty ones.
_MAX_COLSPAN = 50


def table_grid(rows: list[TableRow]) -> TableGrid:
    """Lay the cells of ``rows`` out in a grid, as a browser does (see :class:`TableGrid`)."""
    grid: list[list[Placed]] = []
    sources: list[int] = []
    header_rows = 0
    spanned: dict[int, tuple[Placed, int]] = {}  # column -> the cell above spanning it, rows left
    for number, row in enumerate(rows):
        line: list[Placed] = []
        for index in [*range(len(row.cells)), None]:
            while len(line) in spanned:
                placed, left = spanned.pop(len(line))
                if left > 1:
                    spanned[len(line)] = (placed, left - 1)
                line.append(placed)
            if index is None:
                break
            cell = row.cells[index]
            for column in range(min(max(cell.columns, 1), _MAX_COLSPAN)):
                placed = Placed(number, index, column > 0)
                if cell.rows > 1:
                    spanned[len(line)] = (placed, cell.rows - 1)
                line.append(placed)
        if not any(rows[p.row].cells[p.cell].text for p in line):
            continue  # a spacer row
        if len(grid) == header_rows and (row.head or all(cell.header for cell in row.cells)):
            header_rows += 1
        grid.append(line)
        sources.append(number)
    titles: list[str] = []
    while header_rows and len(grid) > 1 and max(map(len, grid)) > 1 and len({p[:2] for p in grid[0]}) == 1:
        # A header cell across the whole table (an infobox's "Albert Einstein") titles it: it names
        # no column.
        titles.append(rows[sources[0]].cells[0].text)
        header_rows, grid, sources = header_rows - 1, grid[1:], sources[1:]
    if header_rows == len(grid) > 1:
        header_rows -= 1  # a table of <th> alone: its last row holds values
    # A row of one cell across the table (an infobox's picture, or "Personal details") names nothing.
    named = [number for number, line in zip(sources, grid, strict=True) if len({p[:2] for p in line}) > 1]
    row_names = bool(named) and all(rows[number].cells[0].header for number in named)
    return TableGrid(rows, grid, sources, header_rows, row_names, titles)


_SPAN = re.compile(r"\b(colspan|rowspan)\s*=\s*[\"']?\s*([0-9]+)", re.IGNORECASE)
# Items in a cell (list items, a nested table's rows) are parted by "; ", as HTML pages' cells are.
_ITEM = "\x00\x05"


def _markdown_table(table: str) -> str:
    """An HTML ``<table>`` as a Markdown (GFM) table, so it is read as one: a header row, the
    ``| --- |`` delimiter row, then one line per row, its cells' text on one line, pipes escaped.

    The header row is as :class:`TableGrid` names the columns, and its cells as it places them. A table
    of one row (logos side by side, a callout) has no rows of data: its cells are one line. A table whose
    rows each open with a ``<th>`` and have no header row names its rows: one line each, "Version: 2.1".
    """
    caption, rows = _read_table(table)
    grid = table_grid(rows)
    texts = [[grid.text(placed) for placed in row] for row in grid.rows]
    lines = [title for title in (caption, *grid.titles) if title]
    caption = "\n".join(lines)
    if len(texts) < 2 or grid.pictures:
        lines.extend(" ".join(text for text in row if text) for row in texts)
    elif grid.header_rows == 0 and grid.row_names:
        lines.extend(f"{row[0]}: {'; '.join(text for text in row[1:] if text)}".strip(": ") for row in texts)
    else:
        names = grid.names()
        body = [row + [""] * (len(names) - len(row)) for row in texts[max(grid.header_rows, 1) :]]
        if caption:
            lines.append("")
        lines.append(_pipe_row(names))
        lines.append(_pipe_row(["---"] * len(names)))
        lines.extend(_pipe_row(row) for row in body)
    return "\n".join(lines)


def _pipe_row(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _read_table(table: str) -> tuple[str, list[TableRow]]:
    """The caption and rows of an HTML ``<table>``, read leniently as browsers do (a ``<td>`` or ``<tr>``
    may go unclosed). A table inside a cell is that cell's text: its rows parted by "; "."""
    caption: list[str] = []
    rows: list[TableRow] = []
    text: list[str] | None = None  # where the text read goes: a cell's, the caption's, or nowhere
    cell: tuple[list[str], str] | None = None  # the cell being read: its text and opening tag
    picture = False  # whether the cell being read shows one
    depth = 0  # 1 in the table itself, more in a table inside one of its cells
    head = False
    at = 0

    def end_cell() -> None:
        nonlocal cell, text, picture
        if cell is not None:
            spans = {name.lower(): int(value) for name, value in _SPAN.findall(cell[1])}
            rows[-1].cells.append(
                TableCell(
                    _cell_text(cell[0]),
                    cell[1][1:3].lower() == "th",
                    spans.get("colspan", 1),
                    spans.get("rowspan", 1),
                    picture,
                )
            )
        cell, text, picture = None, None, False

    for tag in _TAG.finditer(table):
        if text is not None:
            text.append(table[at : tag.start()])
        at = tag.end()
        closing, name = bool(tag.group(2)), (tag.group(3) or "").lower()
        if tag.group(1):  # a code span, kept as written
            if text is not None:
                text.append(tag.group(0))
        elif name == "table":
            depth += -1 if closing else 1
            if depth >= 1 and text is not None:
                text.append(_ITEM)
        elif depth > 1:  # in a table inside a cell
            if text is not None:
                text.append(_ITEM if name == "tr" else " " if name in _CELL_TAGS else _tag_text(tag))
        elif name in ("thead", "tbody", "tfoot"):
            end_cell()
            head = name == "thead" and not closing
        elif name == "tr":
            end_cell()
            if not closing:
                rows.append(TableRow(head, []))
        elif name in _CELL_TAGS:
            end_cell()
            if not closing:
                if not rows:
                    rows.append(TableRow(head, []))
                cell = ([], tag.group(0))
                text = cell[0]
        elif name == "caption":
            end_cell()
            text = None if closing else caption
        elif text is not None:
            picture = picture or (cell is not None and name == "img")
            text.append(_ITEM if name == "li" else _tag_text(tag))
    end_cell()
    return _cell_text(caption), rows


def _cell_text(parts: list[str]) -> str:
    """The text of a table cell read from ``parts``: entities decoded, its items parted by "; " (or a
    space after a colon: "Dry: 49 Nm"), on one line."""
    text = html.unescape("".join(parts)).replace(_BREAK, " ").replace(_SPACE, " ").replace(_NOTHING, "")
    joined = ""
    for item in text.split(_ITEM):
        item = " ".join(item.split())
        if item:
            joined += ("" if not joined else " " if joined.endswith(":") else "; ") + item
    return joined


def _heading_line(heading: re.Match[str]) -> str:
    text = " ".join(_text_left(_TAG.sub(_tag_text, heading.group(2))).split())
    return f"{'#' * int(heading.group(1))} {text}" if text else ""


def _text_left(line: str) -> str:
    rendered = line.replace(_BREAK, "\n").replace(_SPACE, " ").replace(_NOTHING, "")
    return "\n".join(filter(None, (" ".join(part.split()) for part in rendered.split("\n"))))


def _code_span_or_nothing(match: re.Match[str]) -> str:
    return match.group(0) if match.group(1) else ""


def _tag_text(match: re.Match[str]) -> str:
    if match.group(1):  # a code span
        return match.group(0)
    name = match.group(3).lower()
    if name in _BLOCK_TAGS:
        return _BREAK
    if name in _CELL_TAGS:
        return _SPACE
    return _NOTHING if name in _INLINE_TAGS else match.group(0)


#: A table's delimiter row: cells of dashes (colons at their ends say the alignment) parted by pipes.
_DELIMITER_CELL = re.compile(r"[ \t]*:?-+:?[ \t]*")


def _bordered_row(line: str) -> str:
    """``line``, a table's row, with a pipe at each end: ``a | b`` is ``| a | b |``."""
    row = line.strip()
    if not row.startswith("|"):
        row = "| " + row
    if not row.endswith("|") or row.endswith("\\|") or row == "|":
        row += " |"
    return row


def bordered_tables(text: str) -> str:
    """``text`` with each Markdown table written with a pipe at both ends of its rows.

    GitHub's tables may leave out the outer pipes (``Bolt | Torque`` over ``--- | ---``); the splitter
    knows a table's rows (to give its later chunks the header row) and the answer reads them under their
    headers only by their leading pipe. A table is a row of cells over a delimiter row of as many
    (``:---``, ``---:``), then every following line holding a pipe, up to a blank line; in fenced or
    indented code nothing is changed.
    """
    return _outside_code(text, _bordered_prose, indented=True)


def _bordered_prose(prose: str) -> str:
    """:func:`bordered_tables` for Markdown without code blocks."""
    lines = prose.split("\n")
    in_table = False
    for i, line in enumerate(lines):
        if in_table and line.strip() and CELL_BORDER.search(line) and not _INDENTED_CODE.match(line):
            lines[i] = _bordered_row(line)
            continue
        in_table = False
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if (
            CELL_BORDER.search(following)
            and not _INDENTED_CODE.match(line)
            and not _INDENTED_CODE.match(following)
            and all(_DELIMITER_CELL.fullmatch(cell) for cell in table_cells(following))
            and len(table_cells(following)) == len(table_cells(line))
            and line.strip()
        ):
            lines[i], lines[i + 1] = _bordered_row(line), _bordered_row(following)
            in_table = True
    return "\n".join(lines)


def markdown_page(text: str) -> tuple[Page, str | None]:
    """Clean Markdown ``text`` into page 1 with its headings as sections.

    Returns the page and the text of its first level-1 heading, if any. The Markdown is kept as
    written (cleaning aside) so the sections point at the heading lines themselves.
    """
    cleaned = clean_text(text)
    headings = find_headings(cleaned)
    title = next((h.section.heading for h in headings if h.level == 1), None)
    return Page(number=1, text=cleaned, sections=tuple(h.section for h in headings)), title


def load_markdown(path: Path) -> LoadedSource:
    """Load a Markdown file as one page whose headings are its sections.

    Front matter is not body text: its values (see :func:`split_front_matter`) become ``metadata``.
    Nor are HTML comments and tags (see :func:`without_html`). The title is the front matter's ``title``,
    else the first level-1 heading, else the file stem.
    """
    metadata, body = split_front_matter(read_text_file(path).replace("\r\n", "\n"))
    body = bordered_tables(without_html(body))
    if not body.strip():
        raise LoadError(str(path), "empty file (front matter only)" if metadata else "empty file")
    page, heading = markdown_page(body)
    front_title = metadata.get("title")
    title = (front_title if isinstance(front_title, str) else None) or heading or path.stem
    return LoadedSource(content_type="text/markdown", title=title, pages=iter([page]), metadata=metadata)
