"""A chunk that continues a Markdown table holds rows under no header; its context (``Hit.context``,
the table's header row) is how the answer side reads, checks and quotes those rows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from citeline.answer.citations import CitationNumbering, rewrite_citations, verify
from citeline.answer.extractive import extractive_answer
from citeline.answer.prompt import select_passages
from citeline.answer.support import PassageSentences, VectorCache
from citeline.embed import Embedder
from citeline.engine import Citeline
from tests.conftest import write

from .conftest import make_hit

HEADER = "| Fastener | Tightening torque | Thread locker |"
ROWS = "| M8 bracket bolt | 25 N·m | blue |\n| M10 flange bolt | 49 N·m | none |"


def test_rows_that_continue_a_table_are_read_under_its_header_row() -> None:
    read = PassageSentences.of(ROWS + "\n\nCheck them after the first run.", HEADER)

    assert read.sentences == (
        "Fastener: M8 bracket bolt; Tightening torque: 25 N·m; Thread locker: blue.",
        "Fastener: M10 flange bolt; Tightening torque: 49 N·m; Thread locker: none.",
        "Check them after the first run.",
    )
    # Without it, they stay rows ("| ...": never quoted), as before a chunk carried its context.
    assert PassageSentences.of(ROWS).sentences[:2] == tuple(ROWS.splitlines())
    # A context that is not a table row names no columns.
    assert PassageSentences.of(ROWS, "Torques").sentences[:2] == tuple(ROWS.splitlines())


def test_a_sentence_citing_such_a_row_is_backed_by_it_and_quotes_it_read(embedder: Embedder) -> None:
    hit = dataclasses.replace(make_hit(1, ROWS), context=HEADER)
    passages = select_passages([hit])
    numbering = CitationNumbering()
    sentence = "The M10 flange bolt takes a tightening torque of 49 N·m [1]."
    reply = rewrite_citations(sentence, passages, numbering)

    checked = verify(reply.text, {numbering.number(p.chunk_id): p for p in passages}, VectorCache(embedder))

    [citation] = checked.citations
    assert citation.supported and checked.unsupported == ()
    assert citation.excerpt == "Fastener: M10 flange bolt; Tightening torque: 49 N·m; Thread locker: none."


def test_the_extractive_answer_quotes_a_row_from_a_tables_later_chunk_under_its_header(
    cl: Citeline, tmp_path: Path
) -> None:
    rows = "\n".join(
        f"| M{n} flange bolt | {n * 5} N·m | {'blue' if n % 2 else 'none'} |" for n in range(4, 40)
    )
    write(tmp_path / "torques.md", f"# Torques\n\n{HEADER}\n| --- | --- | --- |\n{rows}\n")
    cl.ingest([tmp_path])
    question = "What tightening torque does the M31 flange bolt take?"
    hits = cl.search(question)[:5]
    assert hits[0].context == HEADER and "| M31 flange bolt |" in hits[0].text

    extract = extractive_answer(
        question, select_passages(hits), CitationNumbering(), VectorCache(cl.embedder)
    )

    row = "Fastener: M31 flange bolt; Tightening torque: 155 N·m; Thread locker: blue [1]."
    assert extract.text.startswith(row), extract.text
