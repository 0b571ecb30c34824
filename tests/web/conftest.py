"""Browser fixtures: Debian's chromium driven by Playwright, and a small real HTTP server on loopback.

The server serves the package's static folder (the viewer and its PDF.js assets) and answers the two
routes of the API contract the viewer reads, for documents the tests register: ``/api/files/{name}``
(the original, with single byte ranges) and ``/api/pages/{name}/{n}`` (``{"page": n, "text": ...}``),
both only with the bearer key, as ``citeline serve`` will. The helpers at the end open a citation in
the test page and read its marks back; ``bench/viewer_mapping.py`` uses them too.
"""

from __future__ import annotations

import difflib
import json
import mimetypes
import os
import re
import sys
import threading
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from citeline.split import sentence_ends
from citeline.web import static_dir

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium keeps calling home, which floods a closed network.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
API_KEY = "test-key"
HARNESS = Path(__file__).with_name("harness.html")
_REPO = Path(__file__).resolve().parents[2]
# The shared fixtures sit beside the main checkout; a worktree is one level further down.
_PDF_DIRS = [_REPO.parent / "shared/fixtures/pdfs", _REPO.parents[1] / "shared/fixtures/pdfs"]
PDF_DIR = next((path for path in _PDF_DIRS if path.is_dir()), _PDF_DIRS[0])
# ES modules must come with a JavaScript type or the browser refuses them.
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")
_TYPES = {".mjs": "text/javascript", ".js": "text/javascript", ".css": "text/css", ".html": "text/html"}


@dataclass
class Documents:
    """What the test server answers on the API routes: files and page texts by document name."""

    files: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    pages: dict[str, list[str]] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    server: TestServer

    def log_message(self, format: str, *args: object) -> None:
        """Keep the test output quiet."""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/harness.html":
            self._send(HARNESS.read_bytes(), "text/html")
        elif path.startswith("/static/"):
            self._static(path.removeprefix("/static/"))
        elif path.startswith("/api/"):
            self._api(path.removeprefix("/api/").split("/"))
        else:
            self.send_error(HTTPStatus.NOT_FOUND)

    def _static(self, relative: str) -> None:
        root = static_dir().resolve()
        target = (root / relative).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        kind = _TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        self._send(target.read_bytes(), kind)

    def _api(self, parts: list[str]) -> None:
        if self.headers.get("Authorization") != f"Bearer {API_KEY}":
            self.send_error(HTTPStatus.UNAUTHORIZED)
            return
        documents = self.server.documents
        if len(parts) == 2 and parts[0] == "files" and parts[1] in documents.files:
            self._send_file(*documents.files[parts[1]])
        elif len(parts) == 3 and parts[0] == "pages" and parts[1] in documents.pages and parts[2].isdigit():
            texts, number = documents.pages[parts[1]], int(parts[2])
            if not 1 <= number <= len(texts):
                self.send_error(HTTPStatus.NOT_FOUND)
                return
            body = json.dumps({"page": number, "text": texts[number - 1]}).encode()
            self._send(body, "application/json")
        else:
            self.send_error(HTTPStatus.NOT_FOUND)

    def _send_file(self, body: bytes, content_type: str) -> None:
        # One byte range (``bytes=a-b``) is all PDF.js asks for; the API answers the same way.
        match = _RANGE.fullmatch(self.headers.get("Range", ""))
        if not match:
            self._send(body, content_type, {"Accept-Ranges": "bytes"})
            return
        first = int(match[1])
        last = min(int(match[2]) if match[2] else len(body) - 1, len(body) - 1)
        if first > last:
            self.send_error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            return
        self._send(
            body[first : last + 1],
            content_type,
            {"Accept-Ranges": "bytes", "Content-Range": f"bytes {first}-{last}/{len(body)}"},
            HTTPStatus.PARTIAL_CONTENT,
        )

    def _send(
        self,
        body: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
        status: HTTPStatus = HTTPStatus.OK,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class TestServer(ThreadingHTTPServer):
    """The HTTP server on a free loopback port; register documents in ``documents``."""

    __test__ = False  # not a test class, whatever its name says to pytest
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.documents = Documents()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore a client that hangs up mid-answer: PDF.js drops a stream once it has what it needs."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture(scope="session")
def server() -> Iterator[TestServer]:
    if not (static_dir() / "vendor/pdfjs/wasm/jbig2.wasm").is_file():
        pytest.fail("PDF.js is missing from the static folder: run `make web`")
    instance = TestServer()
    thread = threading.Thread(target=instance.serve_forever, daemon=True)
    thread.start()
    yield instance
    instance.shutdown()
    instance.server_close()


# Per module, not per session: while sync_playwright is open its event loop counts as running in this
# thread, and any test run after it that calls asyncio.run (the answer tests do) would fail.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as instance:
        yield instance


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not CHROMIUM.is_file():
        missing = f"{CHROMIUM} not found: `make browser` installs Debian's chromium (as root)"
        # `make test` installs it and sets this: there, a browser that went missing fails the run
        # instead of skipping every page test in silence.
        if os.environ.get("CITELINE_REQUIRE_BROWSER"):
            pytest.fail(missing)
        pytest.skip(missing)
    instance = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    yield instance
    instance.close()


@pytest.fixture
def viewer_page(browser: Browser, server: TestServer) -> Iterator[Page]:
    """The test page at 1280x900 with the viewer module loaded (``window.CitationViewer``)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{server.url}/harness.html")
    page.wait_for_function("window.harnessReady === true")
    yield page
    context.close()


def fold(text: str) -> str:
    """``text`` folded as locate.js folds it: letters and digits only, lower case, accents dropped."""
    decomposed = unicodedata.normalize("NFKD", text)
    kept = "".join(c for c in decomposed if not unicodedata.category(c).startswith("M")).lower()
    return "".join(c for c in kept if unicodedata.category(c)[0] in "LN")


# Open one chunk in the viewer and read back the marks, in the span's order (data-piece), then in
# document order within a piece.
OPEN_CITATION = """
async ({citation, fresh, key}) => {
  const container = document.getElementById("viewer");
  if (fresh || !window.citeViewer) {
    window.citeViewer?.close();
    window.citeViewer = new CitationViewer(container, {headers: {Authorization: `Bearer ${key}`}});
  }
  const started = performance.now();
  const result = await window.citeViewer.open(citation);
  const ms = performance.now() - started;
  const marks = [...container.querySelectorAll("mark.citeline-mark")];
  const ordered = marks.map((mark, i) => [Number(mark.dataset.piece), i, mark.textContent])
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const layer = container.querySelector(".textLayer");
  // The text layer's own pieces of text (PDF.js's items, not the spans grouping them), and of each
  // word of theirs that a mark touches, the word and whether it is marked whole.
  const spans = layer ? [...layer.querySelectorAll("span")] : [];
  const leaves = spans.filter((span) => !span.querySelector("span"));
  const markedWords = [];
  for (const leaf of leaves.filter((span) => span.querySelector("mark.citeline-mark"))) {
    const marked = [];
    for (const node of leaf.childNodes) {
      const on = node.nodeType === Node.ELEMENT_NODE && node.matches("mark.citeline-mark");
      for (let k = 0; k < node.textContent.length; k++) marked.push(on);
    }
    for (const word of leaf.textContent.matchAll(/[\\p{L}\\p{N}]+/gu)) {
      const inside = marked.slice(word.index, word.index + word[0].length);
      if (inside.some(Boolean)) markedWords.push([word[0], inside.every(Boolean)]);
    }
  }
  return {
    layerText: leaves.map((span) => span.textContent).join("\\n"),
    markedWords,
    text: ordered.map((m) => m[2]).join(" "),
    pieces: new Set(marks.map((m) => m.dataset.piece)).size,
    matched: result.matched,
    total: result.total,
    ms,
    onLayer: marks.every((mark) => !layer || layer.contains(mark)),
    at: marks.length ? (({left, top}) => [left, top])(marks[0].getBoundingClientRect()) : null,
    // The span's start (its first piece's first mark), which the viewer scrolls to: on a page set
    // sideways, the first mark in the document may be another piece's, far from it.
    inView: marks.length > 0 && (() => {
      const first = marks[ordered[0][1]];
      const box = first.getBoundingClientRect(), view = container.getBoundingClientRect();
      return box.bottom > view.top && box.top < view.bottom;
    })(),
  };
}
"""


@dataclass(frozen=True)
class Span:
    """A cited span: ``page_text[start:end]`` of page ``page``, as citeline extracted it."""

    label: str
    page: int
    start: int
    end: int
    page_text: str


def sentences(text: str) -> list[tuple[int, int]]:
    """The sentences of ``text`` as the answer stage cuts them, as (start, end) without outer spaces."""
    found, begin = [], 0
    for cut in [*sentence_ends(text), len(text)]:
        piece = text[begin:cut]
        if piece.strip():
            found.append((begin + len(piece) - len(piece.lstrip()), cut - (len(piece) - len(piece.rstrip()))))
        begin = cut
    return found


def open_citation(page: Page, citation: dict[str, Any], *, fresh: bool = False) -> dict[str, Any]:
    """Open ``citation`` in the test page's viewer (a new one if ``fresh``) and read back its marks."""
    result: dict[str, Any] = page.evaluate(
        OPEN_CITATION, {"citation": citation, "fresh": fresh, "key": API_KEY}
    )
    return result


def pdf_citation(server_url: str, name: str, span: Span) -> dict[str, Any]:
    """The viewer's citation of ``span`` in the PDF ``name`` registered on the test server."""
    return {
        "fileUrl": f"{server_url}/api/files/{name}",
        "pageUrl": f"{server_url}/api/pages/{name}/{span.page}",
        "contentType": "application/pdf",
        "page": span.page,
        "start": span.start,
        "end": span.end,
        "text": span.page_text[span.start : span.end],
    }


def agreement(span: str, shown: str) -> tuple[float, float]:
    """(recall, precision): the share of ``span`` that ``shown`` reproduces in order, and vice versa."""
    matcher = difflib.SequenceMatcher(None, span, shown, autojunk=False)
    same = sum(block.size for block in matcher.get_matching_blocks())
    return same / max(len(span), 1), same / max(len(shown), 1)
