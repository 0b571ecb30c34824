"""Which row of a table a sentence is about: a table row backs a sentence only about that row.

A reference table's rows differ in one cell, the first (the drug, the analyte, the code), and are
alike in the rest: "drug: Empagliflozin; ... renal adjustment: eGFR < 30: halve the dose" scored 0.71
for "The renal adjustment for sitagliptin when eGFR < 30 is halve the dose [1]", and the potassium
question's "135 mmol/L" was attributed to the sodium row. Meaning and shared words cannot tell the
rows apart; their first cells can. So a passage made of table rows (a CSV's chunk, a chunk of a
Markdown table) backs a sentence only when the sentence or the question names one of its rows'
first cells (:func:`names_a_row`), and an extractive answer to a question naming a row quotes that
row, not its neighbours (:func:`named_rows`).

A CSV row's first cell is read by the table's column names where the hit carries them
(:func:`citeline.load.table.read_row`), so a cell holding "; " is read whole ("Metformin; extended
release", not "Metformin"); a chunk stored before citeline kept the names is read up to the first "; ",
as it always was.

A first cell is named when every word of it is said (as the keyword index stems words: "children"
names "Child"), or when it is written squashed into the text whatever its punctuation (codes:
"E1165" names "E11.65"). A table whose first cells hold no letters (row numbers, dates) says nothing
of what a row is about, and is not judged.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from citeline.answer.names import Reading, squashed
from citeline.answer.support import content_terms, table_rule
from citeline.load.table import read_row
from citeline.types import table_cells

if TYPE_CHECKING:
    from citeline.retrieve.search import Hit

_TABLES = frozenset({"text/csv"})
# A CSV row as the loader writes it: "name: value; other: value2" (load/table.py render_rows), read
# without its column names: up to the first "; ".
_FIELD = re.compile(r"^[^:;\n]{1,80}: (.+?)(?:; |$)")
_LETTER = re.compile(r"[^\W\d_]")


def row_keys(hit: Hit) -> tuple[str, ...] | None:
    """The first cells of the rows of ``hit``, a passage of nothing but table rows (a heading and the
    table's header aside); None for any other passage, and for a table whose first cells hold no letter."""
    if hit.content_type in _TABLES:
        keys = [_csv_key(line, hit.columns) for line in hit.text.splitlines() if line.strip()]
    else:
        keys = _markdown_keys(hit.text, hit.context)
    if not keys or any(key is None or not _LETTER.search(key) for key in keys):
        return None
    return tuple(key for key in keys if key is not None)


def names_a_row(keys: tuple[str, ...] | None, said: Reading) -> bool:
    """Whether ``said`` (a sentence and the question it answers) names one of the rows ``keys`` gives;
    true for a passage that is no table (``keys`` None)."""
    return keys is None or any(_names(key, said) for key in keys)


def taken_from_other_rows(
    claim: frozenset[str], asked: Reading, cited: Reading, others: Iterable[Reading]
) -> frozenset[str]:
    """The terms of ``claim`` (a sentence's content terms) that neither the question (``asked``) nor
    the cited rows give and another passage given does: a value taken from another row.

    A row names its drug, and the sentence may name it too while stating the next row's value: "The
    renal adjustment for sitagliptin when eGFR < 30 is halve the dose", cited to the sitagliptin row
    (25 mg once daily), took "halve" from the empagliflozin row. Rows are short and state values, so a
    term of the sentence that another row gives and the cited one does not is a value read there. A
    term no passage gives (the writer's own word) tells nothing either way.
    """
    new = claim - asked.terms - cited.terms
    if not new:
        return frozenset()
    return frozenset(term for term in new if any(term in other.terms for other in others))


def named_rows(keys: Iterable[str], said: Reading) -> frozenset[str]:
    """The ``keys`` that ``said`` names."""
    return frozenset(key for key in keys if _names(key, said))


def _names(key: str, said: Reading) -> bool:
    words, whole = _read(key)
    return bool(words and words <= said.terms) or any(whole in text for text in said.squashed)


@functools.lru_cache(maxsize=4096)
def _read(key: str) -> tuple[frozenset[str], str]:
    """A first cell's words (its terms of letters: "Child (2-12 y)" is named by "children") and its
    squashed form."""
    return frozenset(t for t in content_terms(key) if t.isalpha() and len(t) > 1), squashed(key)


def _csv_key(line: str, columns: tuple[str, ...] | None) -> str | None:
    """A CSV row's first cell: read by ``columns`` when they are known and account for the row (a row
    longer than a chunk is cut, so its pieces do not), else up to the first "; "."""
    fields = read_row(line.strip(), columns) if columns else None
    if fields:
        return fields[0][1].strip()
    found = _FIELD.match(line.strip())
    return found.group(1).strip() if found else None


def _markdown_keys(text: str, context: str | None) -> list[str | None]:
    """The first cells of a Markdown passage's data rows, or [None] when it holds anything else."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    keys: list[str | None] = []
    header = context.strip() if context and context.strip().startswith("|") else None
    for i, line in enumerate(lines):
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if line.startswith("#") and not keys:
            continue  # the section's heading, above its table
        if not line.startswith("|"):
            return [None]
        if table_rule(line) or line == header or table_rule(following):
            continue  # the rule, and the header above it
        cells = table_cells(line)
        keys.append(cells[0] if cells and cells[0] else None)
    return keys
