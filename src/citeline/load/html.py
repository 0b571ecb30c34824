"""HTML sources, from a file or a URL: the main text only, with its headings as sections.

trafilatura finds the main content (dropping scripts, styles, navigation, footers) and renders it as
Markdown, so headings are found by the same code as in Markdown files.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from configparser import ConfigParser
from copy import deepcopy
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from citeline.errors import LoadError
from citeline.load.text import TableCell, TableRow, markdown_page, table_grid
from citeline.load.url import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT, fetch
from citeline.types import LoadedSource, SourceMetadata

_HTML_MEDIA_TYPES = ("text/html", "application/xhtml+xml")

# trafilatura's extractors log what they discard ("discarding data: None") as warnings, which reach
# the user's terminal; the outcome is reported here, as an error naming the source when nothing is left.
logging.getLogger("trafilatura").setLevel(logging.ERROR)

_BOILERPLATE = ("head", "nav", "header", "footer", "aside", "script", "style", "noscript", "template")
#: The page's non-blank text outside its boilerplate elements (XPath over the parsed tree).
_MAIN_TEXT = "//text()[normalize-space() and not({})]".format(
    " or ".join(f"ancestor::{tag}" for tag in _BOILERPLATE)
)


#: The page's tables and paragraphs outside its boilerplate elements (XPath over the parsed tree).
_MAIN_TABLES, _MAIN_PARAGRAPHS = (
    "count(//{}[not({})])".format(tag, " or ".join(f"ancestor::{b}" for b in _BOILERPLATE))
    for tag in ("table", "p")
)


def _mostly_tables(tree: Any) -> bool:
    """Whether the page's main text holds more tables than paragraphs, as a data sheet does.

    trafilatura compares its own extraction of such a page with readability's, and prefers
    readability's once that is longer than twice MIN_EXTRACTED_SIZE: 500 characters by default, but
    any text at all with the 1 of :func:`_config`. Readability drops small tables: a data sheet of a
    heading, a paragraph and two tables under headings lost its first table. Such a page keeps
    trafilatura's own extraction (``fast``: no comparison with other extractors).
    """
    return bool(tree.xpath(_MAIN_TABLES) > tree.xpath(_MAIN_PARAGRAPHS))


@functools.cache
def _config() -> ConfigParser:
    """trafilatura's settings, except that its own extraction is kept however short the page.

    By default a main text under 250 characters is handed to a fallback extractor (jusText) whenever
    that finds more, and on a short page it finds more by keeping the menu ("Home About") and
    flattening headings and tables into bare lines: no sections, navigation indexed.
    """
    from trafilatura.settings import use_config

    config = use_config()
    config.set("DEFAULT", "MIN_EXTRACTED_SIZE", "1")
    return config


def _extract(source: str, html: str | bytes, fallback_title: str) -> LoadedSource:
    # Imported on first use: trafilatura and lxml take a noticeable time to import.
    import trafilatura

    # Parsed once, then shared by the title lookup, the metadata and the main-text extraction.
    tree = trafilatura.load_html(html)
    if tree is None:
        raise LoadError(source, "not HTML (no markup could be parsed)")
    _join_broken_lines(tree)
    _unwrap_layout_tables(tree)
    _lists_in_cells_as_text(tree)
    _definitions_as_items(tree)
    _tables_as_grids(tree)
    _frame_the_body(tree)
    title = " ".join((tree.findtext(".//title") or "").split())
    document = trafilatura.extract_metadata(tree)
    meta_title = " ".join((getattr(document, "title", None) or "").split())
    if (date := getattr(document, "date", None)) and date.endswith("-01-01"):
        # With nothing better, trafilatura's extensive search reads a year alone (the footer's
        # "Copyright 2024") as 1 January: a day the page never names. Only a date the page's markup
        # gives is kept then.
        document.date = trafilatura.extract_metadata(tree, extensive=False).date
    metadata: SourceMetadata = {}
    for key in ("author", "date", "sitename", "url"):
        value = getattr(document, key, None)
        if isinstance(value, str) and value.strip():
            metadata[key] = " ".join(value.split())
    markdown = trafilatura.extract(
        tree,
        output_format="markdown",
        include_comments=False,
        include_tables=True,
        include_images=False,
        fast=_mostly_tables(tree),
        config=_config(),
    )
    # Given a page with nothing but navigation, trafilatura's fallback extractors return the menu
    # ("Home About"): a page whose text all sits in navigation, headers, footers or asides has none.
    if not markdown or not markdown.strip() or not tree.xpath(_MAIN_TEXT):
        raise LoadError(
            source, "no main text found in the HTML (empty, only navigation, or built by JavaScript)"
        )
    page, heading = markdown_page(markdown)
    return LoadedSource(
        content_type="text/html",
        title=_without_site_name(title, heading, metadata.get("sitename"))
        or meta_title
        or heading
        or fallback_title,
        pages=iter([page]),
        metadata=metadata,
    )


# Between a page's title and its site's name (escaped to keep this file ASCII-readable): a bar, a middle
# dot or a guillemet; a hyphen, an en or em dash or a colon, which also open a subtitle.
_SITE_SEPARATORS = ("|", "\u00b7", "\u00bb")
_SUBTITLE_SEPARATORS = ("-", "\u2013", "\u2014", ":")
_TITLE_SEPARATORS = " " + "".join(_SITE_SEPARATORS + _SUBTITLE_SEPARATORS)
_WORD = re.compile(r"\w+")


#: What groups a table's cells: its row groups and rows.
_ROW_PARTS = ("thead", "tbody", "tfoot", "tr")
#: What a cell of a table of data does not hold, and one of a table laying out the page does: a heading or
#: a table; in a table of one column (parts one under another), also a paragraph, list or block; in one of
#: one row (columns side by side), several.
_HEADINGS_AND_TABLES = ("h1", "h2", "h3", "h4", "h5", "h6", "table")
_BLOCKS = ("p", "ul", "ol", "div", "blockquote", "pre")
#: A table laying out a page has a row or a few (a head, the columns, a foot); one of more rows is taken for
#: layout only when each of its rows is a part of a page (see :func:`_is_layout_table`).
_LAYOUT_ROWS = 3
#: The roles that say a table lays the page out (WAI-ARIA), as e-mail templates mark every table they nest.
_LAYOUT_ROLES = ("presentation", "none")
#: The most words a link of a menu has ("Home", "Pumps and valves", "Contact the service desk").
_MENU_LINK_WORDS = 5


def _unwrap_layout_tables(tree: Any) -> None:
    """Turn each table that lays out the page into plain blocks, in place, its menus into ``<nav>``s.

    Older sites, HTML exports and e-mails put a page's menu and text in the cells of a table, which
    trafilatura renders as a table like any other: the whole page came out as one Markdown row ("| Home
    Pumps | Pump manual The pump is ... |"), with no headings and no paragraphs. Which tables are layout
    is told by :func:`_is_layout_table`. Their cells become ``<div>``s, or ``<p>``s where they hold text
    alone, and their table and rows are taken away, so what the cells hold is read as any page's text
    is. A table inside one is a table of its own: one of data stays a table, one of layout is unwrapped
    in turn.

    The rows go, not just their tags: trafilatura deletes a short block holding several short links
    (taken for a menu) with everything in it, and a row holding the menu's cell beside the page's cell
    was such a block, the page's text lost with the menu. Now each cell is a block of its own.

    A cell that is the site's menu (see :func:`_is_menu`) becomes a ``<nav>``, which trafilatura drops
    and :data:`_MAIN_TEXT` does not count, when another cell of its table holds the page's content. Left
    a block, it was indexed with the page whenever trafilatura preferred readability's extraction, as it
    does when its own is a table of data alone. Cells of links with no content beside them (two columns
    of links in a page's text) are left to trafilatura.
    """
    for table in list(tree.iter("table")):
        rows = [row for row in table.iter("tr") if _table_of(row) is table]
        cells = [cell for row in rows for cell in row if cell.tag in ("td", "th")]
        # A spacer row (an empty cell of a set height) lays out nothing and counts for no row.
        rows = [row for row in rows if _filled(row)]
        if not _is_layout_table(table, rows):
            continue
        # This table's own rows, found before any is dropped. A table inside a cell has this one for its
        # nearest table too, but is no part of it: made a <div>, its rows were left loose, and were
        # written as no Markdown table or as one with the text around it.
        parts = [part for part in table.iter(*_ROW_PARTS) if _table_of(part) is table]
        menus = [cell for cell in cells if _is_menu(cell)]
        content = any(cell not in menus and cell.text_content().strip() for cell in cells)
        for cell in cells:
            cell.tag = "nav" if content and cell in menus else "div" if _own_blocks(cell) else "p"
            cell.attrib.clear()
        for part in [*parts, table]:
            part.drop_tag()


def _is_layout_table(table: Any, rows: list[Any]) -> bool:
    """Whether ``table``, of the non-blank ``rows``, lays out a page rather than holding data.

    A table marked ``role="presentation"`` or ``role="none"`` is layout by definition, and so is a
    table of one cell (a box: no value beside a name). Otherwise a table is layout when a cell holds a
    table, or a heading with text under it; or, in a table of one column (parts one under another), a
    paragraph, list or block; or, in a table of one row (columns side by side), several
    (:func:`_is_layout_cell`). A table of data has cells that hold neither, or many rows: one of more
    than :data:`_LAYOUT_ROWS` rows is layout only when it has no header row and each of its rows is a
    part of a page (a band across it: a banner, a greeting, a footer; or a row holding a layout cell or
    blocks), none a row of short values.
    """
    if (table.get("role") or "").strip().lower() in _LAYOUT_ROLES:
        return True
    filled = [_filled(row) for row in rows]
    if not filled or (len(filled) == 1 and len(filled[0]) == 1):
        return bool(filled)
    # The site's menu in a cell beside the page's text, set as plain text ("| Home Pumps Valves | The
    # pump is primed ... |"): nothing in the text's cell says layout, the menu beside it does.
    if len(rows) <= _LAYOUT_ROWS and any(_menu_beside_text(cells) for cells in filled):
        return True
    one_column = all(len(cells) == 1 for cells in filled)
    blocks = 1 if one_column else 2 if len(rows) == 1 else None
    layout = [cell for cells in filled for cell in cells if _is_layout_cell(cell, blocks=blocks)]
    if not layout:
        return False
    if len(rows) <= _LAYOUT_ROWS:
        return True
    header = rows[0].getparent().tag == "thead" or all(cell.tag == "th" for cell in filled[0])
    return not header and all(
        len(cells) == 1 or any(cell in layout or _own_blocks(cell) for cell in cells) for cells in filled
    )


def _menu_beside_text(cells: list[Any]) -> bool:
    """Whether a row's ``cells`` hold a menu (:func:`_is_menu`) and, in another cell, text."""
    menus = [cell for cell in cells if _is_menu(cell)]
    return bool(menus) and any(cell not in menus and cell.text_content().strip() for cell in cells)


def _filled(row: Any) -> list[Any]:
    """The cells of ``row`` that show something: text or a picture."""
    return [
        cell
        for cell in row
        if cell.tag in ("td", "th") and (cell.text_content().strip() or cell.find(".//img") is not None)
    ]


def _table_of(part: Any) -> Any:
    """The nearest table around ``part``."""
    return next(part.iterancestors("table"), None)


def _own_blocks(cell: Any) -> list[Any]:
    """The headings, tables and blocks in ``cell``, but those of a table inside it."""
    table = _table_of(cell)
    return [
        child for child in cell.iterdescendants(*_HEADINGS_AND_TABLES, *_BLOCKS) if _table_of(child) is table
    ]


def _is_layout_cell(cell: Any, *, blocks: int | None) -> bool:
    """Whether ``cell`` lays out part of a page: it holds a table, or a heading with text under it (a
    cell of data may hold a heading alone, "<th><h4>Bolt</h4></th>"), or, where ``blocks`` is given,
    that many paragraphs, lists or blocks or more."""
    own = _own_blocks(cell)
    if any(child.tag == "table" for child in own):
        return True
    headings = [child for child in own if child.tag in _HEADINGS_AND_TABLES]
    under = " ".join(cell.text_content().split()) != " ".join(
        " ".join(h.text_content().split()) for h in headings
    )
    return (bool(headings) and under) or (blocks is not None and len(own) >= blocks)


def _is_menu(cell: Any) -> bool:
    """Whether ``cell`` of a layout table is a menu: several short links and no word besides theirs (a
    separator, a bar or a middle dot, is no word), no heading and no table. A "See also" list under a
    paragraph shares its cell with the paragraph, or has words of its own ("See also:"), and a table of
    data whose cells are links is no layout table: none is a menu."""
    if any(child.tag in _HEADINGS_AND_TABLES for child in _own_blocks(cell)):
        return False
    links = [_WORD.findall(link.text_content()) for link in cell.iter("a")]
    links = [words for words in links if words]
    return (
        len(links) >= 2
        and all(len(words) <= _MENU_LINK_WORDS for words in links)
        and sum(map(len, links)) == len(_WORD.findall(cell.text_content()))
    )


def _lists_in_cells_as_text(tree: Any) -> None:
    """Write each list inside a table cell as its items' text, parted by semicolons, in place.

    trafilatura drops a list that sits in a table cell: a row of torques read "| M10 |  |".
    """
    for cell in list(tree.iter("td", "th")):
        for found in list(cell.iter("ul", "ol")):
            if _within_a_list(found, cell):
                continue  # written out with the list around it
            text = _list_text(found, "; ")
            span = found.makeelement("span", {})
            span.text, span.tail = f" {text} ", found.tail
            found.getparent().replace(found, span)


def _list_text(found: Any, separator: str) -> str:
    """A list's items as text parted by ``separator``, each with its nested lists after a colon, their
    items parted by commas: "Dry: 49 Nm, 52 Nm max; Oiled 44 Nm" (an item's text_content() ran its
    nested items together, "Dry49 Nm52 Nm max", and iterating every "li" gave them twice)."""
    items = []
    for item in found.iterchildren("li"):
        own = [item.text or ""]
        nested = []
        for child in item:
            if child.tag in ("ul", "ol"):
                nested.append(_list_text(child, ", "))
            else:
                own.append(child.text_content())
            own.append(child.tail or "")
        text = " ".join("".join(own).split())
        inner = ", ".join(n for n in nested if n)
        items.append(f"{text}: {inner}" if text and inner else text or inner)
    return separator.join(item for item in items if item)


def _within_a_list(element: Any, cell: Any) -> bool:
    """Whether ``element`` sits in a list inside ``cell``."""
    for ancestor in element.iterancestors():
        if ancestor is cell:
            return False
        if ancestor.tag in ("ul", "ol"):
            return True
    return False


def _definitions_as_items(tree: Any) -> None:
    """Write each definition list of ``tree`` whose definitions are text (a glossary) as a list of
    "term: definition" items, in place.

    trafilatura wrote its terms and definitions as items of one list ("- NPSH", "- Net positive suction
    head ..."): a chunk could end between a term and its definition, and nothing said which defined
    what. Terms given together ("<dt>BEP</dt><dt>Best point</dt>") are parted by commas, definitions of
    one term by "; " (by a space after a full stop). A list whose definitions hold lists, tables, code
    or lists of their own (API references) is left as it is.
    """
    for found in list(tree.iter("dl")):
        parts = [part for part in found.iter("dt", "dd") if next(part.iterancestors("dl"), None) is found]
        if not parts or any(part.xpath(".//ul|.//ol|.//dl|.//table|.//pre") for part in parts):
            continue
        groups: list[tuple[list[str], list[str]]] = []
        for part in parts:
            text = _text_of(part)
            if not text:
                continue
            if not groups or (part.tag == "dt" and groups[-1][1]):
                groups.append(([], []))
            groups[-1][0 if part.tag == "dt" else 1].append(text)
        items = _element(found, "ul", "")
        for terms, definitions in groups:
            said = definitions[0] if definitions else ""
            for definition in definitions[1:]:
                said += (" " if said[-1] in ".!?" else "; ") + definition
            items.append(_element(found, "li", ": ".join(filter(None, (", ".join(terms), said)))))
        _replace(found, items)


#: Elements whose text runs on with the text around them; any other element parts its text from it.
_INLINE = frozenset(
    (
        *("a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "del", "dfn", "em", "font", "i", "ins"),
        *("kbd", "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup", "time", "tt"),
        *("u", "var", "wbr"),
    )
)


def _tables_as_grids(tree: Any) -> None:
    """Set each table of data in ``tree`` out as its reader sees it, in place, before trafilatura renders
    it as a Markdown table (whose first row it takes for the header row).

    trafilatura read a table's first row alone as its header (a second header row, "Dry | Oiled" under
    "Torque", became a row of values), wrote a table without ``<th>`` cells with no header row at all
    (so it was no Markdown table), did not fill a cell spanning rows into the rows below (their values
    slid one column left, under the wrong names) and lifted a table inside a cell out after its table
    (leaving the cell empty). Now the columns are named as :class:`~citeline.load.text.TableGrid` names
    them, in one ``<th>`` row; a cell spanning rows is copied into each; a table inside a cell is that
    cell's text (its rows parted by "; "); a table whose rows each open with a ``<th>`` and that has no
    header row is a paragraph per row ("Version: 2.1"), as in Markdown files. A table of one row is
    left as it is. A caption, and a header row of one cell across the table (an infobox's name), is a
    paragraph above its table.
    """
    for table in reversed(list(tree.iter("table"))):  # a table inside a cell first: the cell's text then
        if _table_of(table) is not None:
            rows = [[_text_of(cell) for cell in _cells(row)] for row in _rows(table)]
            text = "; ".join(" ".join(filter(None, row)) for row in rows if any(row))
            _replace(table, _element(table, "span", f" {text} "))
    for table in list(tree.iter("table")):
        _set_out(table)


def _set_out(table: Any) -> None:
    for caption in [child for child in table if child.tag == "caption"]:
        # trafilatura wrote it as a header row of its own, over the real one and its own "|---|" row.
        table.remove(caption)
        table.addprevious(_element(table, "p", _text_of(caption)))
    rows = _rows(table)
    grid = table_grid(
        [
            TableRow(
                row.getparent().tag == "thead",
                [
                    TableCell(
                        _text_of(cell),
                        cell.tag == "th",
                        _span(cell, "colspan"),
                        _span(cell, "rowspan"),
                        cell.find(".//img") is not None,
                    )
                    for cell in _cells(row)
                ],
            )
            for row in rows
        ]
    )
    if len(grid.rows) < 2 or grid.pictures:
        return
    for title in grid.titles:
        table.addprevious(_element(table, "p", title))
    for number in range(grid.sources[0]):  # the title rows, and spacers among them
        rows[number].getparent().remove(rows[number])
    if grid.header_rows == 0 and grid.row_names:
        block = _element(table, "div", "")
        for line in grid.rows:
            names = [grid.text(placed) for placed in line]
            block.append(
                _element(table, "p", f"{names[0]}: {'; '.join(filter(None, names[1:]))}".strip(": "))
            )
        _replace(table, block)
        return
    header = max(grid.header_rows, 1)
    for number, line in zip(grid.sources[header:], grid.rows[header:], strict=True):
        row, own = rows[number], _cells(rows[number])
        cells = []
        for placed in line:
            if placed.row == number and not placed.beside:
                cells.append(own[placed.cell])
            elif placed.row != number and not placed.beside:
                copy = deepcopy(_cells(rows[placed.row])[placed.cell])
                copy.tail = None
                cells.append(copy)
        for cell in own:
            row.remove(cell)
        row.extend(cells)
    names = _element(table, "tr", "")
    for name in grid.names():
        names.append(_element(table, "th", name))
    first = rows[grid.sources[0]]
    first.getparent().insert(first.getparent().index(first), names)
    for number in grid.sources[:header]:
        rows[number].getparent().remove(rows[number])
    for cell in table.iter("td", "th"):
        cell.attrib.pop("rowspan", None)


def _rows(table: Any) -> list[Any]:
    """The rows of ``table``, not those of a table inside it."""
    return [row for row in table.iter("tr") if _table_of(row) is table]


def _cells(row: Any) -> list[Any]:
    return [cell for cell in row if cell.tag in ("td", "th")]


def _span(cell: Any, name: str) -> int:
    value = (cell.get(name) or "").strip()
    return int(value) if value.isdigit() else 1


def _text_of(element: Any) -> str:
    """The text of ``element`` on one line: the text of elements of its own (paragraphs, lines broken
    by ``<br>``, list items) parted by a space, not run together as ``text_content()`` does."""
    parts = [element.text or ""]
    for child in element:
        if isinstance(child.tag, str):  # not a comment
            gap = "" if child.tag in _INLINE else " "
            parts.extend((gap, _text_of(child), gap))
        parts.append(child.tail or "")
    return " ".join("".join(parts).split())


def _element(near: Any, tag: str, text: str) -> Any:
    element = near.makeelement(tag, {})
    element.text = text
    return element


def _replace(old: Any, new: Any) -> None:
    new.tail = old.tail
    old.getparent().replace(old, new)


# The frames trafilatura's extractor reads a page's main text in: its BODY_XPATH (trafilatura 2.3),
# as one expression. It is written out here rather than imported: BODY_XPATH is no public name of
# trafilatura, whose releases have rewritten it, and were it renamed or moved, importing it would fail
# the loading of every web page. Should trafilatura come to know a frame this does not, a page framed
# only so gets a <main> around its body besides, which trafilatura tries among the last of its frames:
# it still reads the one it knows.
# tests/load/test_load_html.py checks the two agree while trafilatura still has BODY_XPATH.
_CONTENT_TOKENS = (
    *("(?:entry|article|art)-content", "article__content", "article(?:-|__)?body", "articleBody"),
    "body-text",
)
_POST_CLASS_TOKENS = (
    *("post[-_]text", "post-body", "post-?entry", "post[-_]?content", "postContent", "post_inner_wrapper"),
    *("article-?text", "articleText", "(?:entry|page|text|article|art)-content", "ArticleContent"),
    *(*_CONTENT_TOKENS, "article__container"),
)
_STORY_CLASS_TOKENS = (
    *("^article ", "post-bodycopy", "story-?content", "(?:theme|blog|section|single)-content"),
    *("single-post", "main-column", "wpb_text_column", "story-body", "field-body"),
)
_FRAME_XPATH = f"""
    .//article | .//main |
    .//*[self::div or self::section][
        @class='post' or @class='entry' or @itemprop='articleBody' or @id='articleContent' or
        re:test(@id, '{"|".join(_CONTENT_TOKENS)}') or re:test(@class, '{"|".join(_POST_CLASS_TOKENS)}') or
        @role='article' or @id='article' or @id='story' or @class='postarea' or
        @class='art-postcontent' or @class='text' or @class='cell' or @class='story' or
        re:test(@id, '^primary|story-body') or re:test(@class, 'fulltext', 'i') or
        re:test(@class, '{"|".join(_STORY_CLASS_TOKENS)}') or
        @id='content' or @class='content' or
        re:test(@id, 'content-main|content-body|contentBody') or
        re:test(@class, 'content[-_]main|content(?:-|__)body') or
        contains(translate(@id, 'CM', 'cm'), 'main-content') or
        contains(translate(@class, 'CM', 'cm'), 'main-content') or
        contains(translate(@class, 'CP', 'cp'), 'page-content') or
        starts-with(@class, 'main') or starts-with(@id, 'main') or starts-with(@role, 'main')
    ]
"""
_XPATH_NAMESPACES = {"re": "http://exslt.org/regular-expressions"}


def _has_frame(tree: Any) -> bool:
    """Whether ``tree`` holds a frame trafilatura reads the main text in (see :data:`_FRAME_XPATH`)."""
    return bool(tree.xpath(_FRAME_XPATH, namespaces=_XPATH_NAMESPACES))


def _frame_the_body(tree: Any) -> None:
    """Wrap the body of ``tree`` in a ``<main>``, in place, when it has no frame trafilatura looks for.

    trafilatura's own extractor reads the main text inside the first frame it knows (``<article>``,
    ``<main>``, a container classed ``content``, ``post``, ``story`` and the like). A page without one,
    its text in plain ``<div>``s or straight in ``<body>`` (hand-written pages, pages saved from a word
    processor or a wiki), is left to picking up loose paragraphs and to other extractors, which lose
    its headings (so no sections), its lists or its tables, depending on the page. Framed, the body is
    read as any article is, its navigation, headers, footers and boilerplate classes still dropped.
    """
    body = tree.find("body")
    if body is None or _has_frame(tree):
        return
    frame = body.makeelement("main", {})
    frame.text, body.text = body.text, None
    frame.extend(list(body))
    body.append(frame)


def _join_broken_lines(tree: Any) -> None:
    """Replace each lone ``<br>`` of ``tree`` (outside ``<pre>``) by a space, in place.

    trafilatura renders every ``<br>`` as a paragraph break, so "daily<br>with food" became two
    paragraphs, and the splitter, which cuts at paragraphs first, cut inside the sentence. Two or more
    in a row, with nothing between them, are how older pages part paragraphs, and are kept.
    """
    for br in list(tree.iter("br")):
        before, after = br.getprevious(), br.getnext()
        run = (after is not None and after.tag == "br" and not (br.tail or "").strip()) or (
            before is not None and before.tag == "br" and not (before.tail or "").strip()
        )
        if run or any(ancestor.tag == "pre" for ancestor in br.iterancestors()):
            continue
        text = " " + (br.tail or "")
        parent = br.getparent()
        if parent is None:
            continue
        if before is not None:
            before.tail = (before.tail or "") + text
        else:
            parent.text = (parent.text or "") + text
        parent.remove(br)


def _without_site_name(title: str, heading: str | None, site: object) -> str:
    """``title`` without the site's name beside the page's own heading: "Valve care | Example Plant"
    is "Valve care" when the page's first level-1 heading is "Valve care".

    After "|", "·" or "»" the other part is taken for the site's name; after a dash or colon only when
    it is the name the page's metadata gives, since those also open a subtitle ("Valves - a primer").
    """
    if not heading or title == heading:
        return title
    for part in (title.removeprefix(heading), title.removesuffix(heading)):
        if part == title:
            continue
        rest = part.strip(_TITLE_SEPARATORS)
        separator = part.replace(rest, "", 1).strip() if rest else ""
        if separator in _SITE_SEPARATORS or (separator in _SUBTITLE_SEPARATORS and rest == site):
            return heading
    return title


def load_html_file(path: Path) -> LoadedSource:
    """Load a saved HTML page: its main text as one page, headings as sections.

    The title is the page's ``<title>`` (without the site's name beside its heading: see
    :func:`_without_site_name`), else a title from its metadata (``og:title`` and the like), else its
    first level-1 heading, else the file stem. Raises :class:`LoadError` when the page has no
    extractable main text.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LoadError(str(path), f"cannot read file ({exc.strerror or exc})") from exc
    if not data.strip():
        raise LoadError(str(path), "empty file")
    # Bytes, not text: trafilatura reads the page's own <meta charset> to decode it.
    return _extract(str(path), data, path.stem)


def load_url(
    url: str,
    *,
    allow_private: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> LoadedSource:
    """Fetch an http(s) URL and load it as an HTML page (see :func:`load_html_file`).

    Hosts that resolve to loopback, private, link-local, multicast or reserved addresses are refused
    unless ``allow_private`` is true. ``metadata["url"]`` is the final URL after redirects. Raises
    :class:`LoadError` for a refused host, a failed or slow fetch, a body over ``max_bytes`` or a
    response that is not HTML.
    """
    response = fetch(url, allow_private=allow_private, timeout=timeout, max_bytes=max_bytes)
    if response.media_type not in _HTML_MEDIA_TYPES:
        raise LoadError(url, f"not an HTML page (the server sent {response.media_type})")
    if not response.body.strip():
        raise LoadError(url, "empty page (the server sent no content)")
    html: str | bytes = response.body
    if response.charset:
        # An unknown charset label is left to the page's own <meta charset>.
        with contextlib.suppress(LookupError):
            html = response.body.decode(response.charset, errors="replace")
    parts = urlsplit(response.url)
    fallback_title = parts.path.rstrip("/").rsplit("/", 1)[-1] or parts.hostname or response.url
    loaded = _extract(url, html, fallback_title)
    loaded.metadata["url"] = response.url
    return loaded
