"""Where chunks begin and end, against the splitter of another commit (``python -m bench.chunk_edges``).

A chunk that ends mid-sentence ("... in the same direction as a") is a fragment to embed and to
quote. This script splits the same pages with the splitter as it is (``src/citeline/split.py``) and
as it was at ``--old`` (a git revision, read with ``git show``), at the default chunk size and
overlap, and counts per document and in all:

- chunks, and how many end at a full stop or another closing mark (``. ? ! : ; ) ] | " ``` ``*``);
- how many start with a capital letter or a non-letter (a chunk starting in a small letter mostly
  starts mid-sentence);
- with ``--scifact``, how many SciFact abstracts (as ``citeline eval`` ingests them: title, blank line,
  text) are chunked differently, which says whether the ranking figures need measuring again.

The pages are the shared PDF fixtures and the user guide (``docs/*.md``), loaded by citeline's own
loaders. Nothing is stored.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import re
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType

from citeline import split as current
from citeline.load import load
from citeline.split import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from citeline.types import Page

SHARED = Path(__file__).resolve().parents[2] / "shared"
_ENDS = re.compile(r"[.?!:;)\]|\"\u201d\u2019`*]\s*$")


def _old_splitter(revision: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{revision}:src/citeline/split.py"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "split_old.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("split_old", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _edges(splitter: ModuleType, pages: list[Page]) -> tuple[int, int, int]:
    chunks = list(splitter.split(pages, chunk_size=DEFAULT_CHUNK_SIZE, chunk_overlap=DEFAULT_CHUNK_OVERLAP))
    ends = sum(bool(_ENDS.search(chunk.text)) for chunk in chunks)
    starts = sum(chunk.text[:1].isupper() or not chunk.text[:1].isalpha() for chunk in chunks)
    return len(chunks), ends, starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="HEAD", help="git revision of the splitter to compare with")
    parser.add_argument(
        "--scifact", action="store_true", help="also count SciFact abstracts chunked differently"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per document")
    args = parser.parse_args()
    old = _old_splitter(args.old)
    files = sorted(glob.glob(str(SHARED / "fixtures" / "pdfs" / "*.pdf"))) + sorted(glob.glob("docs/*.md"))
    totals = {"old": [0, 0, 0], "new": [0, 0, 0]}
    for name in files:
        pages = list(load(name).pages)
        for label, splitter in (("old", old), ("new", current)):
            for i, count in enumerate(_edges(splitter, pages)):
                totals[label][i] += count
        if args.verbose:
            print(Path(name).name, "old", _edges(old, pages), "new", _edges(current, pages))
    for label, (chunks, ends, starts) in totals.items():
        print(
            f"{label} ({args.old if label == 'old' else 'working tree'}): {chunks} chunks, "
            f"{ends / chunks:.2f} end at a closing mark, "
            f"{starts / chunks:.2f} start with a capital or a non-letter"
        )
    if args.scifact:
        changed = total = 0
        with open(SHARED / "eval" / "scifact" / "corpus.jsonl", encoding="utf-8") as corpus:
            for line in corpus:
                entry = json.loads(line)
                pages = [Page(1, f"{entry.get('title', '')}\n\n{entry['text']}".strip())]
                spans = [
                    [(c.start, c.end) for c in s.split(pages, chunk_size=800, chunk_overlap=120)]
                    for s in (old, current)
                ]
                total += 1
                changed += spans[0] != spans[1]
        print(f"SciFact: {changed} of {total} abstracts chunked differently")


if __name__ == "__main__":
    main()
