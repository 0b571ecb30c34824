"""Markdown: headings become sections at exact offsets; front matter becomes metadata."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from citeline.engine import Citeline
from citeline.errors import LoadError
from citeline.ingest import IngestOptions
from citeline.load import load
from citeline.load.text import find_headings, without_html
from tests.load.test_load_html import INFOBOX

DOC = """\
---
title: "Lipid guide"
author: A. Writer
tags: [a, b]
---
Intro paragraph before any heading.

# Lipids and You

Some text about LDL-C.

Setext Heading
==============

More text.

## Second *level* ##

```python
# a comment, not a heading
x = 1
```

Sub heading
-----------

Last words.

---

    # indented code, not a heading
"""


def _write(tmp_path: Path, text: str, name: str = "guide.md") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_headings_become_sections_at_their_lines(tmp_path: Path) -> None:
    page = next(load(_write(tmp_path, DOC)).pages)
    assert [section.heading for section in page.sections] == [
        "Lipids and You",
        "Setext Heading",
        "Second level",
        "Sub heading",
    ]
    lines = ["# Lipids and You", "Setext Heading\n=====", "## Second *level* ##", "Sub heading\n-----"]
    for section, line in zip(page.sections, lines, strict=True):
        assert page.text[section.start :].startswith(line)


def test_front_matter_is_metadata_not_text(tmp_path: Path) -> None:
    source = load(_write(tmp_path, DOC))
    page = next(source.pages)
    assert source.content_type == "text/markdown"
    assert source.metadata == {"title": "Lipid guide", "author": "A. Writer", "tags": ["a", "b"]}
    assert page.text.startswith("Intro paragraph before any heading.")
    assert "author:" not in page.text


def test_title_is_front_matter_title_then_first_h1_then_stem(tmp_path: Path) -> None:
    assert load(_write(tmp_path, DOC)).title == "Lipid guide"
    body = DOC.split("---\n", 2)[2]
    assert load(_write(tmp_path, body)).title == "Lipids and You"
    assert load(_write(tmp_path, "## Only a level two\n\ntext\n", "notes.markdown")).title == "notes"


def test_markdown_is_cleaned_before_offsets_are_taken(tmp_path: Path) -> None:
    path = tmp_path / "crlf.md"
    path.write_bytes(b"Intro   \r\n\r\n\r\n\r\n# Head\x00ing\r\n\r\nAn exam-\r\nple.\r\n")
    page = next(load(path).pages)
    assert page.text == "Intro\n\n# Heading\n\nAn example."
    assert page.sections[0].heading == "Heading"
    assert page.text[page.sections[0].start :].startswith("# Heading")


def test_thematic_break_is_not_a_heading(tmp_path: Path) -> None:
    page = next(load(_write(tmp_path, "Para one.\n\n---\n\n- item\n---\nEnd.\n")).pages)
    assert page.sections == ()


def test_front_matter_only_file_is_empty(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="empty file"):
        load(_write(tmp_path, "---\ntitle: Nothing else\n---\n\n"))


def test_front_matter_values_are_cleaned_as_the_body_is(tmp_path: Path) -> None:
    # A NUL in the front matter went into the title and metadata uncleaned, and PostgreSQL refused
    # them: the swap-in of every document ingested alongside failed with it.
    path = tmp_path / "nul.md"
    path.write_bytes(b"---\ntitle: Pump\x00 guide\nauthor: A.\x07 Writer\n---\n# Pumps\n\nPrime the pump.\n")
    source = load(path)
    assert source.title == "Pump guide"
    assert source.metadata == {"title": "Pump guide", "author": "A. Writer"}


def test_front_matter_lists_of_scalars_are_kept_as_lists(tmp_path: Path) -> None:
    # Flow lists ([a, b]) and block lists ("- a" lines under the key) were dropped whole: a file's
    # tags, authors or aliases vanished from its source metadata.
    text = """\
---
title: Pump care
tags: [pumps, "relief valve", 'maint, yearly']
authors:
  - Ada Okafor
  - "B. Lee"
aliases:
- pump-care
empty: []
version: 2
---
# Pumps

Prime the pump.
"""
    source = load(_write(tmp_path, text))
    assert source.metadata == {
        "title": "Pump care",
        "tags": ["pumps", "relief valve", "maint, yearly"],
        "authors": ["Ada Okafor", "B. Lee"],
        "aliases": ["pump-care"],
        "version": "2",
    }
    assert next(source.pages).text == "# Pumps\n\nPrime the pump."


def test_front_matter_comments_and_quotes_are_read_as_yaml_reads_them(tmp_path: Path) -> None:
    # "value # note" is the value and a comment; 'It''s' is It's; a "#" inside a word or quotes stays.
    text = """\
---
title: 'It''s the pump' # working title
subtitle: "A \\"quoted\\" word"
status: draft   # until review
url: https://example.com/pumps#priming
language: "C# and F#"
tags: [pumps, 'o''ring']  # two
owners:
  - Ada   # lead
  - "B. #2"
---
Prime the pump.
"""
    assert load(_write(tmp_path, text)).metadata == {
        "title": "It's the pump",
        "subtitle": 'A "quoted" word',
        "status": "draft",
        "url": "https://example.com/pumps#priming",
        "language": "C# and F#",
        "tags": ["pumps", "o'ring"],
        "owners": ["Ada", "B. #2"],
    }


def test_front_matter_values_that_are_not_scalars_or_lists_of_scalars_are_skipped(tmp_path: Path) -> None:
    # Nested mappings, lists of mappings or of lists, and block scalars are not guessed at.
    text = """\
---
title: Pump care
owner:
  name: Ada
  team: maintenance
steps:
  - name: prime
    minutes: 2
matrix: [[1, 2], [3, 4]]
note: |
  - not a list item
  but a block of text
map: {a: 1}
tags:
  - pumps
---
Prime the pump.
"""
    source = load(_write(tmp_path, text))
    assert source.metadata == {"title": "Pump care", "tags": ["pumps"]}


def test_html_comments_are_not_text_but_code_blocks_keep_theirs(tmp_path: Path) -> None:
    # A comment is the author's note to other authors ("TODO: internal"), never shown to a reader: it
    # was indexed and could be quoted as evidence.
    text = """\
<!-- TODO: check the pressure
     with the supplier -->
# Pumps

Prime the pump <!-- for two minutes? --> before use.

```html
<!-- kept: an example of a comment -->
```
"""
    page = next(load(_write(tmp_path, text)).pages)
    assert page.text == (
        "# Pumps\n\nPrime the pump before use.\n\n```html\n<!-- kept: an example of a comment -->\n```"
    )
    assert page.text[page.sections[0].start :].startswith("# Pumps")
    with pytest.raises(LoadError, match="empty file"):
        load(_write(tmp_path, "<!-- only a note -->\n"))


def test_front_matter_yaml_cannot_read_is_skipped_and_the_body_still_loads(tmp_path: Path) -> None:
    text = "---\ntitle: [unclosed\nauthor: Ada\n---\n# Pumps\n\nPrime the pump.\n"
    source = load(_write(tmp_path, text))
    assert source.metadata == {}
    assert source.title == "Pumps"
    assert next(source.pages).text == "# Pumps\n\nPrime the pump."


def test_front_matter_scalars_are_kept_as_written_not_converted(tmp_path: Path) -> None:
    # YAML 1.1 would read "no" as false and 2024-05-01 as a date; metadata keeps the author's text.
    text = "---\ntitle: No\ndraft: yes\ndate: 2024-05-01\nratio: 1e3\n---\nPrime the pump.\n"
    assert load(_write(tmp_path, text)).metadata == {
        "title": "No",
        "draft": "yes",
        "date": "2024-05-01",
        "ratio": "1e3",
    }


README = """\
<p align="center">
    <img src="https://raw.githubusercontent.com/acme/pumpctl/main/docs/logo.png" width="200" alt="logo">
</p>

<h1 align="center">pumpctl</h1>

<p align="center">
  <a href="https://github.com/acme/pumpctl/actions"><img src="https://img.shields.io/ci.svg" alt="CI"></a>
</p>

pumpctl controls <b>centrifugal</b> pumps over Modbus.<br>It needs Python 3.11.

## Torques

<table>
<tr><th>Bolt</th><th>Torque</th></tr>
<tr><td>M8</td><td>25 Nm</td></tr>
</table>


## Usage

Run `pumpctl start <unit>` to start a unit. Notes go in `<!-- -->`, like this<!-- one -->.

```html
<p>kept: an example of markup</p>
```

    <b>kept: indented code</b>
"""


def test_html_in_markdown_is_read_as_a_reader_sees_it(tmp_path: Path) -> None:
    # A README opening with a centred logo, an HTML <h1> and badges: the tags, image addresses and
    # badge links were the text of its first chunk, quoted as evidence and indexed; the HTML <h1>
    # was no heading, so the title was the file name; table cells were glued into their markup.
    # HTML inside a paragraph's text is left as written: only blocks of HTML are read as text. A table
    # is read as a Markdown table.
    source = load(_write(tmp_path, README, name="README.md"))
    [page] = source.pages
    assert source.title == "pumpctl"
    assert [section.heading for section in page.sections] == ["pumpctl", "Torques", "Usage"]
    assert page.text == (
        "# pumpctl\n\npumpctl controls <b>centrifugal</b> pumps over Modbus.<br>It needs Python 3.11.\n\n"
        "## Torques\n\n| Bolt | Torque |\n| --- | --- |\n| M8 | 25 Nm |\n\n"
        "## Usage\n\nRun `pumpctl start <unit>` to start a unit. Notes go in `<!-- -->`, like this.\n\n"
        "```html\n<p>kept: an example of markup</p>\n```\n\n    <b>kept: indented code</b>"
    )


def test_toml_front_matter_is_metadata_not_text(tmp_path: Path) -> None:
    # Hugo and Zola pages open with TOML between "+++" lines, their title there and not in the body:
    # the block was indexed as body text ('title = "Pump care"' the start of the first chunk) and the
    # document was titled by its file name.
    text = (
        '+++\ntitle = "Pump care"\nweight = 10\ndraft = false\ntags = ["pumps", "maintenance"]\n'
        'date = 2024-05-01\n[params]\nhidden = "nested tables are skipped"\n+++\n\nPrime the pump.\n'
    )
    source = load(_write(tmp_path, text, name="_index.md"))
    assert source.title == "Pump care"
    assert source.metadata == {
        "title": "Pump care",
        "weight": "10",
        "draft": "false",
        "tags": ["pumps", "maintenance"],
        "date": "2024-05-01",
    }
    assert next(source.pages).text == "Prime the pump."
    # TOML that cannot be read is skipped whole, as YAML is, and the body still loads.
    broken = load(_write(tmp_path, '+++\ntitle = "unclosed\n+++\n# Pumps\n\nPrime it.\n', name="b.md"))
    assert (broken.title, broken.metadata, next(broken.pages).text) == ("Pumps", {}, "# Pumps\n\nPrime it.")


SPEC = """\
# pumpctl

pumpctl talks Modbus to centrifugal pumps.

## Registers

<table>
  <caption>Holding registers</caption>
  <thead>
    <tr>
      <th>Register</th>
      <th>Name</th>
      <th>Unit</th>
      <th>Access</th>
    </tr>
  </thead>
  <tbody>
{rows}
  </tbody>
</table>

## Wiring

Use shielded twisted pair.
"""
REGISTER_NAMES = [
    "Outlet pressure",
    "Inlet pressure",
    "Motor speed",
    "Motor current",
    "Bearing temperature",
    "Flow rate",
    "Run hours",
    "Fault code",
    "Setpoint pressure",
    "Ramp time",
    "Minimum speed",
    "Maximum speed",
]


def _register_rows() -> str:
    return "\n".join(
        f"    <tr>\n      <td><code>{40001 + n}</code></td>\n      <td>{name}</td>\n"
        f"      <td>0.01&nbsp;bar</td>\n      <td>{'read' if n % 2 else 'read &amp; write'}</td>\n    </tr>"
        for n, name in enumerate(REGISTER_NAMES)
    )


def test_an_html_table_in_markdown_is_read_as_a_markdown_table(tmp_path: Path) -> None:
    # Its cells were parted by spaces and its rows were lines ("40001 Outlet pressure 0.01 bar read"):
    # the columns were lost, and the splitter, which reads a table's later rows under its header row,
    # found no table.
    source = load(_write(tmp_path, SPEC.replace("{rows}", _register_rows()), name="README.md"))
    [page] = source.pages
    lines = page.text.split("\n")
    header = lines.index("| Register | Name | Unit | Access |")
    assert lines[header - 2 : header + 4] == [
        "Holding registers",
        "",
        "| Register | Name | Unit | Access |",
        "| --- | --- | --- | --- |",
        "| 40001 | Outlet pressure | 0.01 bar | read & write |",
        "| 40002 | Inlet pressure | 0.01 bar | read |",
    ]
    assert lines[header + 2 + len(REGISTER_NAMES) :] == ["", "## Wiring", "", "Use shielded twisted pair."]
    # Headings are found in the text as rendered: each section starts at its own heading line.
    assert [s.heading for s in page.sections] == ["pumpctl", "Registers", "Wiring"]
    for section in page.sections:
        assert page.text[section.start :].startswith(f"{'#' * (1 + (section.start > 0))} {section.heading}")


def test_the_cells_of_an_html_table_are_written_on_its_rows_lines() -> None:
    # Names over two header rows are joined; a header spanning columns names each; a data cell spanning
    # the row is written once; one spanning rows is written in each; a list, a <br> and a table in a
    # cell are one line; a pipe in a cell is escaped, so it parts no columns.
    table = """\
<table>
<tr><th rowspan="2">Bolt</th><th colspan="2">Torque</th></tr>
<tr><th>Dry</th><th>Oiled</th></tr>
<tr><td colspan="3"><b>Frame</b></td></tr>
<tr><td rowspan="2">M8</td><td>25 Nm<br>(new bolt)</td>
<td><ul><li>22 Nm</li><li>20 Nm reused</li></ul></td></tr>
<tr><td>23 Nm</td><td>A | B</td></tr>
<tr><td>M10</td><td><table><tr><td>49</td><td>Nm</td></tr><tr><td>52 max</td></tr></table></td></tr>
</table>"""
    assert without_html(table) == (
        "\n| Bolt | Torque Dry | Torque Oiled |\n| --- | --- | --- |\n| Frame |  |  |\n"
        "| M8 | 25 Nm (new bolt) | 22 Nm; 20 Nm reused |\n| M8 | 23 Nm | A \\| B |\n"
        "| M10 | 49 Nm; 52 max |  |\n"
    )


def test_an_html_table_with_blank_lines_between_its_rows_is_one_table() -> None:
    # Each of its lines opens an HTML block of its own, and a reader sees one table.
    table = "<table>\n<tr><th>Bolt</th><th>Torque</th></tr>\n\n<tr><td>M8</td><td>25 Nm</td></tr>\n</table>"
    assert (
        without_html(f"{table}\n\nText.") == "\n| Bolt | Torque |\n| --- | --- |\n| M8 | 25 Nm |\n\n\nText."
    )
    # One never closed ends at the first blank line, as any block: it does not take the rest of the file.
    assert without_html("<table>\n<tr><td>M8</td></tr>\n\nText <b>bold</b>.") == "\nM8\n\nText <b>bold</b>."


def test_html_tables_without_rows_of_data_under_a_header_are_lines() -> None:
    # A table of one row (logos side by side, a callout) is one line; a table naming each row in its
    # first cell, with no header row, is a line per row under its name.
    assert without_html('<table><tr><td><img src="a.png"> Acme</td><td>Globex</td></tr></table>') == (
        "\nAcme Globex\n"
    )
    rows = "<table><tr><th>Version</th><td>2.1</td></tr><tr><th>License</th><td>MIT</td></tr></table>"
    assert without_html(rows) == "\nVersion: 2.1\nLicense: MIT\n"


def test_a_table_in_markdown_is_read_under_its_header_row_once_ingested(cl: Citeline, tmp_path: Path) -> None:
    path = _write(tmp_path, SPEC.replace("{rows}", _register_rows()), name="README.md")
    [result] = cl.ingest([path], IngestOptions(chunk_size=300, chunk_overlap=50))
    assert result.error is None
    document = next(d for d in cl.documents() if d.name == "README.md")
    chunks = cl.chunks(document)
    rows = [c for c in chunks if "| 400" in c["text"]]
    assert len(rows) >= 2 and rows[0]["context"] is None
    assert all(c["context"] == "| Register | Name | Unit | Access |" for c in rows[1:])
    hits = cl.search("Which register holds the bearing temperature?")
    hit = next(h for h in hits if "Bearing temperature" in h.text)
    assert "| 40005 | Bearing temperature |" in hit.text
    assert hit.context == "| Register | Name | Unit | Access |" and hit.section == "Registers"


def test_entity_references_are_the_characters_a_reader_sees_outside_code(tmp_path: Path) -> None:
    # "&amp;" was indexed and quoted as written, and titled the document: "Pumps &amp; valves".
    text = (
        "# Pumps &amp; valves\n\n"
        '<p align="center">Fast&nbsp;&amp;&nbsp;quiet &#8211; <b>P100</b></p>\n\n'
        "Rated &lt; 6 bar &copy; Acme, see `a &amp; b` and https://x.test/?a=1&copy=2.\n\n"
        "| Part | Note |\n| --- | --- |\n| M8 | &gt; 25 Nm &#124; dry |\n\n"
        "```\nx = 1 &amp; 2\n```\n"
    )
    source = load(_write(tmp_path, text))
    assert source.title == "Pumps & valves"
    assert next(source.pages).text == (
        "# Pumps & valves\n\nFast\u00a0&\u00a0quiet \u2013 P100\n\n"
        "Rated < 6 bar \u00a9 Acme, see `a &amp; b` and https://x.test/?a=1&copy=2.\n\n"
        "| Part | Note |\n| --- | --- |\n| M8 | > 25 Nm \\| dry |\n\n```\nx = 1 &amp; 2\n```"
    )


def test_a_file_of_many_tables_never_closed_loads_at_once(tmp_path: Path) -> None:
    # Each block's open table was looked for to the end of the file: 8,000 of them took 98 s.
    text = "".join(f"<table><tr><td>Row {n}</td></tr>\n\n" for n in range(5000))
    started = time.perf_counter()
    page = next(load(_write(tmp_path, text)).pages)
    assert time.perf_counter() - started < 5
    assert page.text.split("\n\n")[:2] == ["Row 0", "Row 1"]


def test_an_html_infobox_in_markdown_is_its_title_and_a_line_per_row() -> None:
    # As on a web page (tests/load/test_load_html.py): its name across the table is its title, not the
    # column names, and each row is named by its <th>.
    assert without_html(INFOBOX) == (
        "\nAlbert Einstein\nEinstein in 1921\nBorn: 14 March 1879 Ulm\nDied: 18 April 1955\n"
        "Scientific career\nFields: Physics\n"
    )


def test_a_grid_of_pictures_is_not_read_under_its_first_row() -> None:
    # A README's grid of contributors (a picture and a name a cell, no <th>): its first row was taken
    # for column names, and the next contributors read under them.
    def cell(name: str) -> str:
        return (
            f'<td align="center"><a href="https://x.test/{name}"><img src="https://x.test/{name}.png" '
            f'alt=""/><br /><sub><b>{name}</b></sub></a></td>'
        )

    grid = f"<table>\n<tr>{cell('Ada')}{cell('Bo')}</tr>\n<tr>{cell('Cy')}{cell('Di')}</tr>\n</table>"
    assert without_html(grid) == "\nAda Bo\nCy Di\n"


def test_a_table_without_outer_pipes_is_read_as_one_with_them(tmp_path: Path) -> None:
    # GitHub's tables may leave out the outer pipes; the splitter and the answer know rows by their
    # leading pipe, so such a table's later chunks were read under no header.
    text = (
        "# Torques\n\nBolt | Torque (Nm)\n:--- | ---:\nM8 | 25\nM10 | 49 \\| dry\n\n"
        "Not a table | though it holds a pipe.\n\n```\nx | y\n--- | ---\n```\n"
    )
    assert next(load(_write(tmp_path, text)).pages).text == (
        "# Torques\n\n| Bolt | Torque (Nm) |\n| :--- | ---: |\n| M8 | 25 |\n| M10 | 49 \\| dry |\n\n"
        "Not a table | though it holds a pipe.\n\n```\nx | y\n--- | ---\n```"
    )


def test_a_long_table_without_outer_pipes_is_read_under_its_header_row_once_ingested(
    cl: Citeline, tmp_path: Path
) -> None:
    rows = "\n".join(f"M{n} | {n * 5} | {n * 4}" for n in range(6, 90))
    path = _write(
        tmp_path, f"# Torques\n\nBolt | Torque dry (Nm) | Torque oiled (Nm)\n--- | --- | ---\n{rows}\n"
    )
    cl.ingest([path], IngestOptions(chunk_size=300, chunk_overlap=50))
    chunks = cl.chunks(next(d for d in cl.documents() if d.name == path.name))
    later = [c for c in chunks if c["text"].startswith("| M") and c["chunk_index"] > 0]
    assert later and all(
        c["context"].startswith("| Bolt | Torque dry (Nm) | Torque oiled (Nm) |") for c in later
    )


# Hostile input: each of these took many seconds (quadratic or worse in the run's length) before its
# pattern was fixed, and the upload's build held the API process's other threads all the while.


def test_a_heading_with_a_long_run_of_tabs_is_read_at_once() -> None:
    # 20,000 tabs: 6 s when the closing "#"s were matched after a lazy text.
    [heading] = find_headings("# Pumps" + "\t" * 20_000 + "and valves ##")
    assert heading.section.heading == "Pumps and valves"


@pytest.mark.parametrize("word", ["_a", "*a", "`a", "["], ids=["underscore", "star", "backtick", "bracket"])
def test_a_heading_of_markup_that_never_closes_is_kept_as_written(word: str) -> None:
    # 60,000 characters: 11 to 13 s when each opening "_", "*", "`" or "[" was scanned to the end.
    words = [word] * 20_000
    [heading] = find_headings("# " + " ".join(words))
    assert heading.section.heading == " ".join(words)


def test_a_heading_of_links_that_never_close_is_kept_as_written() -> None:
    # 240,000 characters: 8 s.
    [heading] = find_headings("# " + "[a](" * 60_000)
    assert heading.section.heading == "[a](" * 60_000


def test_nested_and_closed_markup_in_a_heading_is_still_taken_off() -> None:
    headings = find_headings("# **Bold *and* italic** `code` _x_ [link](http://a.b) ##\n\n# C#")
    assert [h.section.heading for h in headings] == ["Bold and italic code x link", "C#"]


def test_a_run_of_backticks_in_an_html_line_is_kept() -> None:
    # 4,000 backticks: 11 s (cubic) when a code span could start at any of them.
    assert without_html("<p>" + "`" * 4_000 + "</p>\n\nText.") == "`" * 4_000 + "\n\nText."


def test_comments_that_never_close_are_kept_and_the_closed_ones_go() -> None:
    # 20,000 "<!--" and no "-->" after them: 7 s when each was scanned to the end.
    unclosed = "<!--" * 20_000
    assert without_html(f"Text <!-- gone --> here.\n\n{unclosed}") == f"Text here.\n\n{unclosed}"


def test_spaces_before_a_comment_go_with_it_and_a_long_run_elsewhere_stays() -> None:
    # 80,000 spaces in a file with a comment: 6 s when a comment was looked for from each of them.
    spaced = "Text" + " " * 80_000 + "more"
    assert without_html(f"Pumps  <!-- note -->\n{spaced}") == f"Pumps\n{spaced}"
