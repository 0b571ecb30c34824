"""Seconds the loaders and the splitter take on hostile input: runs of one character, long lines, deep
nesting. Each case runs at two sizes; a ratio near 2 is linear, near 4 quadratic.

Run with another commit's code to compare (``git worktree add /tmp/old REV``, then
``PYTHONPATH=/tmp/old/src .venv/bin/python -m bench.hostile_input``). ``--scale`` multiplies the sizes,
``--only`` runs the cases whose name holds a word; ``--timeout`` skips a case's larger size once its
smaller one took longer.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from citeline.load import text as markdown
from citeline.load.clean import clean_text
from citeline.split import split
from citeline.store.analyzer import Analyzer, DocumentTerms
from citeline.types import Page


def _markdown(text: str) -> object:
    _, body = markdown.split_front_matter(text)
    return markdown.markdown_page(markdown.bordered_tables(markdown.without_html(body)))


def _split(text: str, size: int = 800, overlap: int = 120) -> int:
    return sum(1 for _ in split([Page(number=1, text=text)], chunk_size=size, chunk_overlap=overlap))


def _terms(text: str) -> int:
    terms = DocumentTerms(Analyzer())
    for draft in split([Page(number=1, text=text)], chunk_size=800, chunk_overlap=120):
        terms.add(draft.page, draft.start, draft.end, draft.text)
    return len(terms.counts())


def _deep_list(n: int) -> str:
    return "# Deep\n\n" + "".join(f"{'  ' * i}- item {i}\n" for i in range(n))


#: name -> (what is timed, the input at a size, the smaller size)
CASES: dict[str, tuple[Callable[[str], object], Callable[[int], str], int]] = {
    "clean: spaces inside a line": (clean_text, lambda n: "start" + " " * n + "end", 10_000),
    "markdown: list nested n deep": (_markdown, _deep_list, 500),
    "markdown: tabs in a heading": (_markdown, lambda n: "# Pumps" + "\t" * n + "and valves ##", 10_000),
    "markdown: unclosed _ in a heading": (_markdown, lambda n: "# " + "_a " * (n // 3), 15_000),
    "markdown: unclosed * in a heading": (_markdown, lambda n: "# " + "*a " * (n // 3), 15_000),
    "markdown: unclosed ` in a heading": (_markdown, lambda n: "# " + "`a " * (n // 3), 15_000),
    "markdown: [ in a heading": (_markdown, lambda n: "# " + "[" * n, 15_000),
    "markdown: [a]( in a heading": (_markdown, lambda n: "# " + "[a](" * (n // 4), 15_000),
    "markdown: backticks in an HTML line": (_markdown, lambda n: "<p>" + "`" * n + "</p>", 1_500),
    "markdown: unclosed comments": (_markdown, lambda n: "Text\n\n" + "<!--" * (n // 4), 40_000),
    "markdown: spaces before a comment": (
        _markdown,
        lambda n: "<!-- note -->\nText" + " " * n + "more",
        10_000,
    ),
    "split: one line, 800/120": (_split, lambda n: "lorem ipsum dolor. " * (n // 19), 5_000_000),
    "split: one line, 50/20": (lambda t: _split(t, 50, 20), lambda n: "lorem ipsum " * (n // 12), 500_000),
    "keyword terms: one line": (_terms, lambda n: "lorem ipsum dolor. " * (n // 19), 2_000_000),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--only", default="")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    for name, (run, make, size) in CASES.items():
        if args.only not in name:
            continue
        seconds: list[float] = []
        for n in (int(size * args.scale), int(size * args.scale) * 2):
            text = make(n)
            started = time.perf_counter()
            run(text)
            seconds.append(time.perf_counter() - started)
            if seconds[-1] > args.timeout:
                break
        sizes = f"{len(make(int(size * args.scale))):,} chars"
        ratio = f"x{seconds[1] / max(seconds[0], 1e-6):.1f}" if len(seconds) == 2 else "(larger skipped)"
        print(f"{name:40} {sizes:>16}: " + " ".join(f"{s:8.3f}s" for s in seconds) + f"  {ratio}", flush=True)


if __name__ == "__main__":
    main()
