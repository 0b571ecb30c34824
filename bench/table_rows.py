"""Questions about the rows of the user guide's Markdown tables: is the row's passage found?
(``python -m bench.table_rows``).

A user asks about a table by naming a row and a column: "What is the Default of
CITELINE_QUERY_THREADS?". Past a table's first chunk, the column's name is only in the header row,
which that chunk does not hold. This script asks, for every row of every Markdown table of the guide
at :data:`bench.guide_answers.GUIDE_COMMIT`, "What is the <second column's name> of <first cell>?",
with the guide ingested at the default chunk size into ``--data-dir`` (namespace ``bench_tables``),
and reports how often a passage holding the row is ranked first, in the top 5 and in the top 10, and
MRR@10; ``--ranks`` writes each question's rank for pairing.

The questions are made from the tables by that one rule, never edited; rows whose first cell is under
three characters are left out. To pair two versions of the code, run each (the old one with
``PYTHONPATH=<its src>``) into its own data dir with ``--ranks``, then ``--pair OLD NEW``.

    .venv/bin/python -m bench.table_rows --data-dir /tmp/tables --ranks new.json
    .venv/bin/python -m bench.table_rows --pair old.json new.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from bench.api import frozen_guide
from bench.guide_answers import GUIDE_COMMIT

_TABLE = re.compile(
    r"^ {0,3}(\|[^\n]*\|) *\n {0,3}\|[ :|-]*-[ :|-]*\| *\n((?: {0,3}\|[^\n]*\n?)+)", re.MULTILINE
)


def _cells(row: str) -> list[str]:
    return [cell.strip(" `*") for cell in row.strip().strip("|").split("|")]


def questions(guide: Path) -> list[dict[str, str]]:
    """One question per table row of the guide's Markdown files, in file order, without repeats."""
    out: dict[str, dict[str, str]] = {}
    for path in sorted(guide.glob("*.md")):
        for table in _TABLE.finditer(path.read_text(encoding="utf-8")):
            header = _cells(table[1])
            for row in table[2].splitlines():
                cells = _cells(row)
                if len(header) < 2 or not header[1] or len(cells) < 2 or len(cells[0]) < 3:
                    continue
                question = f"What is the {header[1]} of {cells[0]}?"
                out.setdefault(question, {"file": path.name, "question": question, "row": row.strip()})
    return list(out.values())


def ranks(data_dir: Path) -> list[int | None]:
    """Each question's rank of the first passage holding its row (None: not in the top 10)."""
    import os

    os.environ["CITELINE_DATA_DIR"] = str(data_dir)
    os.environ["CITELINE_QUERY_CACHE_SIZE"] = "0"
    from citeline.engine import Citeline
    from citeline.retrieve.search import SearchRequest
    from citeline.settings import Settings

    guide, _ = frozen_guide(data_dir, GUIDE_COMMIT)
    asked = questions(guide)
    with Citeline(Settings(namespace="bench_tables")) as cl:
        cl.ingest(sorted(guide.glob("*.md")))
        found: list[int | None] = []
        for q in asked:
            hits = cl.search(SearchRequest(q["question"], top_k=10))
            holding = (
                i + 1 for i, h in enumerate(hits) if h.document_name == q["file"] and q["row"] in h.text
            )
            found.append(next(holding, None))
    return found


def _rr(rank: int | None) -> float:
    return 0.0 if rank is None else 1.0 / rank


def summary(found: list[int | None]) -> str:
    n = len(found)
    at = {k: sum(r is not None and r <= k for r in found) / n for k in (1, 5, 10)}
    mrr = sum(map(_rr, found)) / n
    return f"{n} questions: first {at[1]:.3f}, top 5 {at[5]:.3f}, top 10 {at[10]:.3f}, MRR@10 {mrr:.3f}"


def pair(old: list[int | None], new: list[int | None], seed: int = 0) -> str:
    """MRR@10 of new minus old, with a 95% paired bootstrap interval over the questions."""
    diffs = [_rr(b) - _rr(a) for a, b in zip(old, new, strict=True)]
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(5000))
    better, worse = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    return (
        f"MRR@10 {sum(diffs) / len(diffs):+.3f} (95% {means[124]:+.3f} to {means[-125]:+.3f}); "
        f"{better} questions better, {worse} worse"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="a data dir of its own for the guide")
    parser.add_argument("--ranks", type=Path, help="write each question's rank here (JSON)")
    parser.add_argument("--pair", nargs=2, type=Path, metavar=("OLD", "NEW"), help="pair two --ranks files")
    args = parser.parse_args()
    if args.pair:
        old, new = (json.loads(p.read_text()) for p in args.pair)
        print(f"old: {summary(old)}\nnew: {summary(new)}\n{pair(old, new)}")
        return
    if args.data_dir is None:
        parser.error("--data-dir is needed to ask the questions")
    found = ranks(args.data_dir)
    print(summary(found))
    if args.ranks:
        args.ranks.write_text(json.dumps(found))


if __name__ == "__main__":
    main()
