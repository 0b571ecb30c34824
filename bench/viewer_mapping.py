"""How well the citation viewer finds citeline's spans on PDF.js's text layer, and how fast it opens.

Run from the repository root with the project's virtualenv (needs ``make install`` and ``make browser``)::

    .venv/bin/python -m bench.viewer_mapping [--fixtures DIR] [--opens 10]

Every chunk (800/120, as ingestion cuts them) and every sentence of at least 20 letters and digits
(as the answer stage cuts them) of every PDF fixture with a text layer is opened in the viewer in
Debian's chromium, through the same loopback server the browser tests use. The marks are read back
from the DOM in the span's order and compared with the span, letters and digits only: *exact* counts
equal ones, *recall* is the share of the span the marks reproduce in order, *precision* the share of
the marks that belong to the span, *pieces* the spans found in more than one run (columns or cells read
in another order). Then the 15-page fixture is opened ``--opens`` times at different pages, each with
a new viewer (fetch and parse the PDF) and again with the document already open; the figure is the
time from ``open()`` to the highlighted page on screen.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
from pathlib import Path

from playwright.sync_api import Page, sync_playwright
from tests.web.conftest import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PDF_DIR,
    Span,
    TestServer,
    agreement,
    fold,
    open_citation,
    pdf_citation,
    sentences,
)

from citeline.errors import LoadError
from citeline.load import load
from citeline.load.pdf import NO_TEXT_LAYER
from citeline.split import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, split

FIFTEEN_PAGES = "multicol_federal_register_2020-17221.pdf"


def _all_spans(path: Path) -> list[Span]:
    """Every chunk and every sentence of 20 or more letters and digits, page by page."""
    pages = list(load(path).pages)
    texts = {page.number: page.text for page in pages}
    spans = [
        Span(f"chunk {c.index}", c.page, c.start, c.end, texts[c.page])
        for c in split(pages, chunk_size=DEFAULT_CHUNK_SIZE, chunk_overlap=DEFAULT_CHUNK_OVERLAP)
    ]
    for page in pages:
        for start, end in sentences(page.text):
            if len(fold(page.text[start:end])) >= 20:
                spans.append(Span(f"sentence at {start}", page.number, start, end, page.text))
    return spans


def _has_text_layer(path: Path) -> bool:
    try:
        load(path)
    except LoadError as exc:
        if NO_TEXT_LAYER in str(exc):
            return False
        raise
    return True


def _mapping(page: Page, server: TestServer, path: Path) -> None:
    server.documents.files[path.name] = (path.read_bytes(), "application/pdf")
    # The page texts tell the viewer which occurrence of a repeated passage was cited.
    server.documents.pages[path.name] = [p.text for p in load(path).pages]
    for kind in ("chunk", "sentence"):
        spans = [span for span in _all_spans(path) if span.label.startswith(kind)]
        recalls, precisions, exact, pieces = [], [], 0, 0
        for span in spans:
            result = open_citation(page, pdf_citation(server.url, path.name, span))
            cited, shown = fold(span.page_text[span.start : span.end]), fold(result["text"])
            recall, precision = agreement(cited, shown)
            recalls.append(recall)
            precisions.append(precision)
            exact += cited == shown
            pieces += result["pieces"] > 1
        if spans:
            print(
                f"{path.name:44} {kind + 's':9} {len(spans):4}  exact {exact:4}  "
                f"recall mean {statistics.mean(recalls):.4f} min {min(recalls):.3f}  "
                f"precision mean {statistics.mean(precisions):.4f} min {min(precisions):.3f}  "
                f"in pieces {pieces}"
            )


def _timing(page: Page, server: TestServer, fixtures: Path, opens: int) -> None:
    path = fixtures / FIFTEEN_PAGES
    server.documents.files[path.name] = (path.read_bytes(), "application/pdf")
    by_page: dict[int, Span] = {}
    for span in _all_spans(path):
        by_page.setdefault(span.page, span)
    spans = [by_page[number] for number in sorted(by_page)][:opens]
    open_citation(page, pdf_citation(server.url, path.name, spans[0]), fresh=True)  # PDF.js loaded once
    cold = [open_citation(page, pdf_citation(server.url, path.name, s), fresh=True)["ms"] for s in spans]
    warm = [open_citation(page, pdf_citation(server.url, path.name, s))["ms"] for s in spans]
    print(
        f"\n{path.name}, {len(spans)} opens at different pages, open() to highlighted page on screen: "
        f"p50 {statistics.median(cold):.0f} ms with a new viewer, "
        f"p50 {statistics.median(warm):.0f} ms with the document open "
        f"(load average {os.getloadavg()[0]:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=PDF_DIR)
    parser.add_argument("--opens", type=int, default=10)
    args = parser.parse_args()
    if not CHROMIUM.is_file():
        raise SystemExit(f"{CHROMIUM} not found: run `make browser` (as root)")

    server = TestServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{server.url}/harness.html")
        page.wait_for_function("window.harnessReady === true")
        print(f"load average {os.getloadavg()[0]:.2f}")
        for path in sorted(args.fixtures.glob("*.pdf")):
            if _has_text_layer(path):
                _mapping(page, server, path)
        _timing(page, server, args.fixtures, args.opens)
        browser.close()
    server.shutdown()


if __name__ == "__main__":
    main()
