"""The chat and admin pages, in Debian's chromium, against a real ``citeline serve`` over its own
embedded database and real embedder (the extractive answerer; one test asks the real local model).

The store: the 15-page Federal Register PDF and a hostile Markdown note in scope acme, a note in
scope globex; an admin key and a reader key of scope acme. The figures the issue asks for (citation to
highlighted page, each page's first load) are printed: run with ``-s`` to see them.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, Route, expect

from citeline.retrieve.filters import MAX_LABEL_CHARS
from tests.api.conftest import (
    Server,
    base_env,
    create_key,
    ingest,
    launch_server,
    start_server,
    stop_server,
    wait_ready,
)
from tests.conftest import write
from tests.web.conftest import PDF_DIR, fold

FEDERAL_REGISTER = PDF_DIR / "multicol_federal_register_2020-17221.pdf"  # 15 pages, three columns
UPLOADED_PDF = PDF_DIR / "multicol_latex_pypdf_sample.pdf"
QUESTION = "What do flight control laws generate commands for?"
HOSTILE_TITLE = '<img src=x onerror="window.pwned=1"> Pump room notes'
HOSTILE_BODY = (
    "The pump room door code is <script>window.pwned=2</script> changed every month. "
    'The sump pump alarm <img src=x onerror="window.pwned=3"> sounds at 40 cm of water.'
)
# The pages' screenshots: docs/web.md shows them, and `make screenshots` writes them there. A test run
# writes them to a temporary folder, so it leaves the checkout as it found it.
SCREENSHOTS_ENV = "CITELINE_SCREENSHOTS"
OPENS = 9  # citation opens timed for the p50


@dataclass
class Site:
    server: Server
    admin: str
    reader: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, fresh_data_dir: Callable[[str], Path]) -> Iterator[Site]:
    if not FEDERAL_REGISTER.is_file():
        pytest.skip(f"PDF fixture not found: {FEDERAL_REGISTER}")
    data = fresh_data_dir("citeline-pages-")
    env = base_env(data, CITELINE_LLM="extractive")
    corpus = tmp_path_factory.mktemp("pages-corpus")
    (corpus / "acme").mkdir()
    (corpus / "acme" / FEDERAL_REGISTER.name).write_bytes(FEDERAL_REGISTER.read_bytes())
    write(corpus / "acme" / "pump-room.md", f"# {HOSTILE_TITLE}\n\n{HOSTILE_BODY}\n")
    write(
        corpus / "globex" / "globex-boiler.md", "# Globex boiler\n\nThe Globex boiler is serviced in spring."
    )
    # The first ingest starts the database; the server boots while the second runs.
    ingest(env, corpus / "acme", "--scope", "acme", "--category", "aviation", "--tag", "safety")
    server = launch_server(env, tmp_path_factory.mktemp("pages-log") / "serve.log")
    try:
        ingest(env, corpus / "globex", "--scope", "globex")
        wait_ready(server)
        admin = create_key(env, "--role", "admin", "--name", "pages admin")["key"]
        reader = create_key(env, "--role", "reader", "--scope", "acme", "--name", "acme reader")["key"]
        yield Site(server, admin, reader)
    finally:
        stop_server(server)


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    instance = browser.new_context(viewport={"width": 1280, "height": 900})
    yield instance
    instance.close()


def sign_in(page: Page, url: str, key: str) -> None:
    page.goto(url)
    page.get_by_label("API key", exact=True).fill(key)
    page.get_by_role("button", name="Sign in").click()


def upload_files(page: Page, files: Path | list[Path], scope: str) -> None:
    """Upload ``files`` on the admin page under ``scope``, as an administrator does."""
    page.get_by_label("Files to upload").set_input_files(files)
    page.get_by_label("Scopes").first.fill(scope)
    page.get_by_role("button", name="Upload", exact=True).click()


def refusing(refused: list[str], retry_after: int, message: str) -> Callable[[Route], None]:
    """A route handler answering as a server over the key's requests a minute, noting each URL refused."""

    def over_the_limit(route: Route) -> None:
        refused.append(route.request.url)
        route.fulfill(
            status=429,
            headers={"Retry-After": str(retry_after)},
            json={"error": {"code": "rate_limited", "message": message}},
        )

    return over_the_limit


def delete_scope(site: Site, scope: str) -> None:
    """Delete the documents a test uploaded under ``scope``, leaving the shared site as it was."""
    with site.server.client(site.admin) as api:
        for doc in api.get("/documents", params={"scope": scope, "limit": 100}).json()["documents"]:
            api.delete(f"/documents/{doc['id']}").raise_for_status()


def ask(page: Page, question: str, timeout: float = 60_000) -> None:
    page.get_by_label("Question").fill(question)
    page.get_by_role("button", name="Ask").click()
    expect(page.locator(".message.assistant").last).not_to_have_attribute(
        "aria-busy", "true", timeout=timeout
    )


# What a page fetched, from the browser's own resource timing: bytes over the wire (headers included)
# of the page and of the resources after the ``skip`` first ones, and the time to its load event.
LOAD_FIGURES = """
(skip) => {
  const nav = performance.getEntriesByType("navigation")[0];
  const resources = performance.getEntriesByType("resource").slice(skip);
  return {
    pageBytes: nav.transferSize,
    bytes: resources.reduce((sum, r) => sum + r.transferSize, 0),
    requests: resources.length,
    names: resources.map((r) => new URL(r.name).pathname),
    loadMs: nav.loadEventEnd,
    count: performance.getEntriesByType("resource").length,
  };
}
"""


def load_figures(page: Page, skip: int = 0) -> dict[str, Any]:
    figures: dict[str, Any] = page.evaluate(LOAD_FIGURES, skip)
    return figures


# Click citation [n], then "Open at the page", and time until the highlighted page is on screen (a
# mark the viewer made for this open, in view).
TIME_OPEN = """
async (number) => {
  const box = document.getElementById("viewer");
  const before = new Set(box.querySelectorAll("mark.citeline-mark"));
  const started = performance.now();
  document.querySelector(`.cite[data-number="${number}"]`).click();
  document.getElementById("open-page").click();
  for (;;) {
    // A viewer that never draws (PDF.js not served) fails the test rather than hang the suite.
    if (performance.now() - started > 120000) throw new Error("the cited span was not shown within 120 s");
    const mark = [...box.querySelectorAll("mark.citeline-mark")].find((m) => !before.has(m));
    const drawn = !box.querySelector("canvas") || box.querySelector(".textLayer mark");
    if (mark && drawn) {
      const seen = mark.getBoundingClientRect(), view = box.getBoundingClientRect();
      if (seen.bottom > view.top && seen.top < view.bottom) break;
    }
    await new Promise((resolve) => requestAnimationFrame(resolve));
  }
  return performance.now() - started;
}
"""


def marked_text(page: Page) -> str:
    texts: list[str] = page.locator("#viewer mark.citeline-mark").evaluate_all(
        "marks => marks.map(m => [Number(m.dataset.piece), m.textContent]).sort((a, b) => a[0] - b[0])"
        ".map(m => m[1])"
    )
    return " ".join(texts)


def completed_answer(stream_body: str) -> dict[str, Any]:
    """The ``complete`` event's payload in a ``/chat/stream`` body."""
    blocks = [b for b in stream_body.replace("\r\n", "\n").split("\n\n") if b.startswith("event: complete")]
    assert blocks, stream_body[-500:]
    payload: dict[str, Any] = json.loads(blocks[-1].split("data:", 1)[1])
    return payload


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the pages' screenshots go to: ``CITELINE_SCREENSHOTS`` if set, else a temporary one."""
    named = os.environ.get(SCREENSHOTS_ENV)
    return Path(named) if named else tmp_path_factory.mktemp("screenshots")


def test_a_citation_opens_its_page_with_the_cited_span_highlighted(
    site: Site, browser: Browser, context: BrowserContext, screenshots: Path
) -> None:
    page = context.new_page()
    page.goto(site.server.url + "/")
    page.wait_for_load_state("load")
    chat = load_figures(page)
    page.get_by_label("API key", exact=True).fill(site.reader)
    page.get_by_role("button", name="Sign in").click()
    with page.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
        ask(page, QUESTION)
    answer = completed_answer(streamed.value.text())
    citations = {c["number"]: c for c in answer["citations"]}
    pdf_citations = [n for n, c in citations.items() if c["document_name"] == FEDERAL_REGISTER.name]
    assert pdf_citations, answer

    number = pdf_citations[0]
    cited = citations[number]
    # The first open fetches PDF.js, its worker and the PDF: the viewer's share of the first load.
    before = load_figures(page)["count"]
    cold_ms = page.evaluate(TIME_OPEN, number)
    viewer = load_figures(page, before)
    panel = page.get_by_role("complementary", name="Citation")
    expect(panel).to_contain_text(f"Citation [{number}]")
    expect(panel.locator("dd").filter(has_text=FEDERAL_REGISTER.name)).to_have_count(1)
    expect(panel).to_contain_text(f"{cited['score']:.2f}")
    expect(page.locator("#viewer canvas")).to_have_attribute("aria-label", f"Page {cited['page']} of 15")
    shown = marked_text(page)
    assert fold(shown) == fold(cited["excerpt"]), (shown, cited["excerpt"])

    times = [page.evaluate(TIME_OPEN, pdf_citations[i % len(pdf_citations)]) for i in range(OPENS)]
    page.screenshot(path=str(screenshots / "web-chat.png"))

    admin_page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    admin_page.goto(site.server.url + "/admin")
    admin_page.wait_for_load_state("load")
    admin = load_figures(admin_page)
    admin_page.context.close()
    print(
        f"\ncitation click -> highlighted page, 15-page PDF: first open {cold_ms:.0f} ms "
        f"(loads PDF.js and the PDF); then p50 {statistics.median(times):.0f} ms over {OPENS} opens "
        f"of {len(pdf_citations)} citations (min {min(times):.0f}, max {max(times):.0f})"
        f"\nchat page first load: {(chat['pageBytes'] + chat['bytes']) / 1024:.1f} KiB in "
        f"{chat['requests'] + 1} requests, load event at {chat['loadMs']:.0f} ms"
        f"\nviewer first open: {viewer['bytes'] / 1024:.1f} KiB more in {viewer['requests']} requests "
        f"({', '.join(viewer['names'])})"
        f"\nadmin page first load: {(admin['pageBytes'] + admin['bytes']) / 1024:.1f} KiB in "
        f"{admin['requests'] + 1} requests, load event at {admin['loadMs']:.0f} ms"
    )


def test_a_reader_sees_no_admin_action_and_no_other_scope(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.reader)
    rows = page.locator("#documents tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#documents tbody")).to_contain_text(FEDERAL_REGISTER.stem)
    expect(page.locator("#documents tbody")).not_to_contain_text("Globex")
    expect(page.locator("#whoami")).to_have_text("reader key: acme")
    for section in ("Add documents", "API keys"):
        expect(page.get_by_role("heading", name=section)).to_be_hidden()
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    expect(page.get_by_role("button", name="Re-ingest")).to_have_count(0)
    # The reader's scope selector offers its own scope and nothing else.
    chat = context.new_page()
    sign_in(chat, site.server.url + "/", site.reader)
    expect(chat.get_by_label("Scope").locator("option")).to_have_text(["All my scopes", "acme"])
    expect(chat.get_by_role("link", name="Documents")).to_be_hidden()
    # Asked about a globex document, the reader's answer cites none of it.
    with chat.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
        ask(chat, "When is the Globex boiler serviced?")
    cited = {c["document_name"] for c in completed_answer(streamed.value.text())["citations"]}
    assert "globex-boiler.md" not in cited, cited
    expect(chat.locator(".message.assistant").last).not_to_contain_text("serviced in spring")


def test_not_in_the_evidence_is_said_of_the_documents_searched(site: Site, context: BrowserContext) -> None:
    # The admin key reads every document; with the globex scope picked, the aviation question finds
    # nothing. The note said "the documents this key can see", which the scope had narrowed.
    page = context.new_page()
    sign_in(page, site.server.url + "/", site.admin)
    page.get_by_label("Scope").select_option("globex")
    ask(page, QUESTION)
    expect(page.locator(".message.assistant").last.locator(".not-in-evidence")).to_have_text(
        "Not in the evidence: the documents searched do not answer this question."
    )


def test_an_admin_sees_every_document_with_its_actions(
    site: Site, context: BrowserContext, screenshots: Path
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    expect(page.locator("#documents tbody tr")).to_have_count(3)
    globex = page.locator("#documents tbody tr").filter(has_text="Globex boiler")
    expect(globex).to_contain_text("globex")
    expect(globex).to_contain_text("completed")
    expect(globex.get_by_role("button", name="Delete globex-boiler.md")).to_be_visible()
    expect(page.locator("#stats")).to_contain_text("Chunks")
    # Filters: by scope, then the detail of one document with its chunks.
    page.locator("#filters").get_by_label("Scope").select_option("globex")
    expect(page.locator("#documents tbody tr")).to_have_count(1)
    page.locator("#filters").get_by_label("Scope").select_option("")
    expect(page.locator("#documents tbody tr")).to_have_count(3)
    page.get_by_role("button", name="Globex boiler").click()
    expect(page.locator("#chunks tbody")).to_contain_text("serviced in spring")
    expect(page.get_by_role("heading", name="API keys")).to_be_visible()
    expect(page.locator("#key-table tbody tr")).to_have_count(2)
    page.get_by_role("button", name="Close").click()
    page.screenshot(path=str(screenshots / "web-admin.png"), full_page=True)


def test_a_hostile_document_renders_literally(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/", site.reader)
    ask(page, "When does the sump pump alarm sound?")
    answer = page.locator(".message.assistant").last
    expect(answer).to_contain_text('<img src=x onerror="window.pwned=3">')
    answer.locator("button.cite").first.click()
    panel = page.get_by_role("complementary", name="Citation")
    expect(panel).to_contain_text(HOSTILE_TITLE)
    expect(panel.locator(".passage")).to_contain_text("<script>window.pwned=2</script>")
    page.get_by_role("button", name="Open at the page").click()
    expect(page.locator("#viewer .citeline-text")).to_contain_text("<script>window.pwned=2</script>")

    admin = context.new_page()
    sign_in(admin, site.server.url + "/admin", site.admin)
    expect(admin.locator("#documents tbody")).to_contain_text(HOSTILE_TITLE)
    admin.get_by_role("button", name=HOSTILE_TITLE).click()
    expect(admin.locator("#chunks tbody")).to_contain_text("<script>window.pwned=2</script>")
    for shown in (page, admin):
        assert shown.evaluate("window.pwned") is None
        assert shown.locator("main img, aside img, #messages img").count() == 0


def test_an_uploaded_pdf_goes_from_queued_to_completed(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    # Every status the row shows, as it changes.
    page.evaluate(
        """name => {
          window.seen = [];
          new MutationObserver(() => {
            const rows = [...document.querySelectorAll("#documents tbody tr")];
            const row = rows.find((r) => r.textContent.includes(name));
            const status = row?.dataset.status;
            if (status && window.seen.at(-1) !== status) window.seen.push(status);
          }).observe(document.getElementById("documents"), {childList: true, subtree: true});
        }""",
        UPLOADED_PDF.stem,
    )
    upload_files(page, UPLOADED_PDF, "acme")
    expect(page.locator("#add-status")).to_contain_text("Uploaded 1 of 1 file")
    row = page.locator("#documents tbody tr").filter(has_text=UPLOADED_PDF.stem)
    expect(row).to_have_attribute("data-status", "completed", timeout=180_000)
    seen = page.evaluate("window.seen")
    assert seen[0] in ("queued", "processing") and seen[-1] == "completed", seen
    expect(row.locator("td").nth(3)).not_to_have_text("0")
    print(f"\nupload statuses seen on the admin page: {' -> '.join(seen)}")


@pytest.mark.slow
def test_a_chat_with_the_real_local_model(site: Site, context: BrowserContext, tmp_path: Path) -> None:
    env = {k: v for k, v in site.server.env.items() if k != "CITELINE_LLM"}
    model = start_server(env, tmp_path / "serve.log")
    try:
        page = context.new_page()
        sign_in(page, model.url + "/", site.reader)
        # Stop: the page aborts the request while the model answers, and the server stops generating.
        # Stopped once the evidence has come (the model then reads its prompt, a second or more), not
        # once text has: a short answer could end between the text being seen and the click.
        page.get_by_label("Question").fill(QUESTION)
        page.get_by_role("button", name="Ask").click()
        expect(page.locator("#chat-status")).to_contain_text("Answering from", timeout=300_000)
        page.get_by_role("button", name="Stop").click()
        expect(page.locator(".message.assistant").last).to_contain_text("Stopped.")
        deadline = time.monotonic() + 60
        while model.ready()["generations"]["stopped_early"] < 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert model.ready()["generations"]["stopped_early"] == 1

        ask(page, QUESTION, timeout=300_000)
        answer = page.locator(".message.assistant").last
        expect(answer.locator("p.error")).to_have_count(0)
        answer.locator("button.cite").first.click()
        page.get_by_role("button", name="Open at the page").click()
        expect(page.locator("#viewer mark.citeline-mark").first).to_be_visible(timeout=30_000)
    finally:
        stop_server(model)


def test_pages_load_without_a_key_and_modules_come_as_javascript(site: Site) -> None:
    with httpx.Client(base_url=site.server.url, timeout=30) as anonymous:
        for path in ("/", "/admin"):
            page = anonymous.get(path)
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert "script-src 'self'" in page.headers["content-security-policy"]
        for path in (
            "/static/chat.js",
            "/static/vendor/pdfjs/pdf.min.mjs",
            "/static/vendor/pdfjs/pdf.worker.min.mjs",
        ):
            assert anonymous.get(path).headers["content-type"].startswith("text/javascript"), path
        assert anonymous.get("/keys/me").status_code == 401


def test_keys_me_names_the_scopes_a_key_may_search(site: Site) -> None:
    with site.server.client(site.reader) as reader, site.server.client(site.admin) as admin:
        assert reader.get("/keys/me").json() == {"role": "reader", "all_scopes": False, "scopes": ["acme"]}
        assert admin.get("/keys/me").json() == {
            "role": "admin",
            "all_scopes": True,
            "scopes": ["acme", "globex"],
        }


def test_the_chat_works_with_the_keyboard_at_phone_width(site: Site, browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        page = context.new_page()
        page.goto(site.server.url + "/")
        page.keyboard.type(site.reader)  # the key field has the focus
        page.keyboard.press("Enter")
        expect(page.get_by_label("Question")).to_be_focused()
        page.keyboard.type(QUESTION)
        page.keyboard.press("Enter")
        first = page.locator(".message.assistant button.cite").first
        expect(first).to_be_visible(timeout=60_000)
        first.focus()
        page.keyboard.press("Enter")
        panel = page.get_by_role("complementary", name="Citation")
        # The panel opens once its passage is fetched: allow for a loaded machine, as for the answer.
        expect(panel).to_be_focused(timeout=20_000)
        page.get_by_role("button", name="Open at the page").focus()
        page.keyboard.press("Enter")
        expect(page.locator("#viewer mark.citeline-mark").first).to_be_visible(timeout=30_000)
        page.keyboard.press("Escape")
        expect(panel).to_be_hidden()
        expect(first).to_be_focused()
        # One column: nothing wider than the phone's screen.
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        admin = context.new_page()
        sign_in(admin, site.server.url + "/admin", site.reader)
        expect(admin.locator("#documents tbody")).to_contain_text(FEDERAL_REGISTER.stem)
        assert admin.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        context.close()


# Everything the page holds, shown or hidden: text a signed-out page keeps in its DOM is one sign-in
# away from the next user of the tab (and readable by anyone who opens the developer tools).
PAGE_TEXT = (
    "() => document.body.textContent + [...document.querySelectorAll('input')].map(i => i.value).join(' ')"
)


def test_signing_out_leaves_nothing_of_the_key_for_the_next_one_in_the_tab(
    site: Site, context: BrowserContext
) -> None:
    admin = context.new_page()
    sign_in(admin, site.server.url + "/admin", site.admin)
    admin.get_by_role("button", name="Globex boiler").click()
    expect(admin.locator("#chunks tbody")).to_contain_text("serviced in spring")
    admin.get_by_role("button", name="Sign out").click()
    expect(admin.locator("#sign-in")).to_be_visible()
    held = admin.evaluate(PAGE_TEXT)
    assert "Globex boiler" not in held and "serviced in spring" not in held, held
    # The acme reader signing in next in the same tab (no reload) sees neither the detail nor the list.
    admin.get_by_label("API key", exact=True).fill(site.reader)
    admin.get_by_role("button", name="Sign in").click()
    expect(admin.locator("#documents tbody")).to_contain_text(FEDERAL_REGISTER.stem)
    expect(admin.locator("#detail")).to_be_hidden()
    held = admin.evaluate(PAGE_TEXT)
    assert "Globex boiler" not in held and "serviced in spring" not in held, held

    chat = context.new_page()
    sign_in(chat, site.server.url + "/", site.admin)
    ask(chat, "When is the Globex boiler serviced?")
    chat.locator(".message.assistant button.cite").first.click()
    expect(chat.locator("#citation-passage")).to_contain_text("serviced in spring")
    expect(chat.locator("#conversation-list")).to_contain_text("When is the Globex boiler serviced?")
    chat.get_by_role("button", name="Sign out").click()
    expect(chat.locator("#sign-in")).to_be_visible()
    held = chat.evaluate(PAGE_TEXT)
    assert "Globex boiler" not in held and "serviced in spring" not in held, held
    assert chat.locator("#scope option").all_inner_texts() == [], "the admin's scopes stay offered"


def test_a_reload_keeps_the_scope_chosen(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/", site.admin)
    scope = page.get_by_label("Scope")
    scope.select_option("globex")
    ask(page, "When is the Globex boiler serviced?")
    page.reload()
    expect(page.locator(".message.assistant")).to_have_count(1)
    expect(scope).to_have_value("globex")
    # A follow-up after the reload searches the scope the page shows, as before the reload.
    with page.expect_request("**/chat/stream") as asked:
        ask(page, "How often is the Globex boiler serviced?")
    assert json.loads(asked.value.post_data or "{}")["scopes"] == ["globex"]
    # Signed out, the choice goes with the key.
    page.get_by_role("button", name="Sign out").click()
    page.get_by_label("API key", exact=True).fill(site.reader)
    page.get_by_role("button", name="Sign in").click()
    expect(scope).to_have_value("")


def test_the_statistics_count_every_document_the_list_shows(site: Site, context: BrowserContext) -> None:
    with site.server.client(site.admin) as api:
        made = api.post("/documents", files={"file": ("empty.txt", b"")}, data={"scopes": "globex"})
        assert made.status_code in (201, 202), made.text
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    failed = page.locator("#documents tbody tr").filter(has_text="empty.txt")
    expect(failed).to_have_attribute("data-status", "failed", timeout=60_000)
    total = page.locator("#documents tbody tr").count()
    expect(page.locator("#documents-count")).to_have_text(f"{total} documents")
    stat = page.locator("#stats .stat").filter(has=page.locator("dt", has_text="Documents"))
    # A failed document is a document: 'Documents' counts it, as the list and its statuses do, and
    # 'Searchable' counts those with a version that searches read.
    expect(stat.locator("dd")).to_have_text(str(total))
    searchable = page.locator("#stats .stat").filter(has=page.locator("dt", has_text="Searchable"))
    expect(searchable.locator("dd")).to_have_text(str(total - 1))


def test_an_upload_says_which_files_were_ingested_and_why_the_others_failed(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    files = [
        write(tmp_path / "boiler-log.md", "# Boiler log\n\nThe boiler was flushed on Monday."),
        tmp_path / UPLOADED_PDF.name,
        write(tmp_path / "blank.txt", ""),  # taken, then fails to ingest: nothing to read
        tmp_path / "scan.pdf",  # taken, then fails to ingest: not a PDF inside
        tmp_path / "tool.exe",  # refused at upload
    ]
    files[1].write_bytes(UPLOADED_PDF.read_bytes())
    files[3].write_bytes(b"this is no PDF, whatever its name says\n" * 50)
    files[4].write_bytes(b"MZ\x90\x00")
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    expect(page.locator("#documents tbody tr").first).to_be_visible()
    try:
        upload_files(page, files, "uploads")
        status = page.locator("#add-status")
        # Four were taken and one refused; of the four, two were ingested and two failed, each with why.
        expect(status).to_contain_text("2 failed to ingest", timeout=180_000)
        expect(status).to_have_text(
            "Uploaded 4 of 5 files (scopes uploads; no tags): 2 ingested, 2 failed to ingest. "
            "Failed to ingest: blank.txt: empty file; scan.pdf: not a PDF file (no %PDF header). "
            "Not uploaded: tool.exe: unsupported file type '.exe'; supported: .csv, .htm, .html, "
            ".markdown, .md, .pdf, .tsv, .txt (HTTP 415)"
        )
        expect(status).to_have_attribute("data-kind", "error")
        rows = page.locator("#documents tbody tr").filter(has_text="uploads")
        expect(rows.and_(page.locator('[data-status="completed"]'))).to_have_count(2)
        expect(rows.and_(page.locator('[data-status="failed"]'))).to_have_count(2)
    finally:
        delete_scope(site, "uploads")


def test_an_answer_still_coming_for_a_conversation_left_does_not_write_into_the_one_opened(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/", site.admin)
    with page.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
        ask(page, "When is the Globex boiler serviced?")
    opened = completed_answer(streamed.value.text())
    [first] = [c for c in opened["citations"] if c["number"] == 1]
    assert first["document_name"] == "globex-boiler.md", opened

    # Another question in a new conversation; its answer is on its way (held) when the user goes back
    # to the first conversation, and comes after. Its citation [1] is of another document.
    held: list[Route] = []
    page.route("**/chat/stream", lambda route: held.append(route))
    page.get_by_role("button", name="New conversation").click()
    page.get_by_label("Question").fill(QUESTION)
    page.get_by_role("button", name="Ask").click()
    expect(page.locator(".message.assistant")).to_have_count(1)
    while not held:
        page.wait_for_timeout(50)
    page.locator(f'#conversation-list li[data-id="{opened["conversation_id"]}"] button.continue').click()
    expect(page.locator(".message.user")).to_have_text(["YouWhen is the Globex boiler serviced?"])
    held[0].fulfill(response=held[0].fetch())
    expect(page.get_by_role("button", name="Ask")).to_be_enabled(timeout=60_000)
    page.unroute("**/chat/stream")

    # The conversation on screen is the one picked: its messages, its citations, its follow-ups.
    expect(page.locator(".message.user")).to_have_text(["YouWhen is the Globex boiler serviced?"])
    page.locator('.message.assistant .cite[data-number="1"]').first.click()
    panel = page.get_by_role("complementary", name="Citation")
    expect(panel.locator("dd").filter(has_text="globex-boiler.md")).to_have_count(1)
    expect(page.locator("#chat-status")).not_to_contain_text("Answering")
    with page.expect_request("**/chat/stream") as asked:
        ask(page, "How often is the Globex boiler serviced?")
    assert json.loads(asked.value.post_data or "{}")["conversation_id"] == opened["conversation_id"]


def test_many_files_uploaded_at_once_wait_out_the_keys_rate_limit_rather_than_fail(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    # A server of the same store allowing 30 requests a minute per key, as 600 a minute does for an
    # admin uploading a few hundred files at once.
    limited = start_server({**site.server.env, "CITELINE_API_RATE_LIMIT": "30"}, tmp_path / "serve.log")
    files = [
        write(tmp_path / f"tank-{n:02}.md", f"# Tank {n}\n\nTank {n} is drained every {n} days.")
        for n in range(24)
    ]
    try:
        page = context.new_page()
        sign_in(page, limited.url + "/admin", site.admin)
        expect(page.locator("#documents tbody tr").first).to_be_visible()
        # Everything the status says, as it changes: a wait of a second may fall between two looks.
        page.evaluate(
            """() => {
              window.said = [];
              const status = document.getElementById("add-status");
              new MutationObserver(() => window.said.push(status.textContent))
                .observe(status, {childList: true, characterData: true, subtree: true});
            }"""
        )
        upload_files(page, files, "tanks")
        status = page.locator("#add-status")
        # Following the builds (the list and the builds each second, the statistics when the list changed)
        # is refused over the limit too, and goes on after the wait: a refused read once ended it.
        expect(status).to_have_text(
            "Uploaded 24 of 24 files (scopes tanks; no tags): 24 ingested.", timeout=240_000
        )
        # Over the limit the page waited as the server asked (Retry-After), and every file went in.
        waits = [said for said in page.evaluate("window.said") if ": waiting " in said]
        assert waits and all("as the server asks" in said for said in waits), waits[:3]
    finally:
        stop_server(limited)
        delete_scope(site, "tanks")


def test_an_upload_held_back_by_another_request_s_refusal_says_it_is_waiting(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    files = [
        write(tmp_path / f"held-{n}.md", f"# Held {n}\n\nValve {n} is checked weekly.") for n in range(3)
    ]
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    expect(page.locator("#documents tbody tr").first).to_be_visible()
    held: list[Route] = []
    refused: list[str] = []

    def hold_two_uploads(route: Route) -> None:
        if route.request.method == "POST" and len(held) < 2:
            held.append(route)
        else:
            route.continue_()

    over_the_limit = refusing(refused, 4, "too many requests: 30 a minute")

    page.route("**/documents", hold_two_uploads)
    try:
        upload_files(page, files, "held")
        while not held:
            page.wait_for_timeout(50)
        # The list read after the first file is refused over the key's limit, as the page's other
        # requests may be while an administrator uploads: the next upload must wait 4 s first.
        page.route("**/documents?*", over_the_limit, times=1)
        held[0].continue_()
        while not (refused and len(held) == 2):
            page.wait_for_timeout(50)
        held[1].continue_()
        # Before, the third file waited those seconds under "Uploading held-2.md (3 of 3)…".
        expect(page.locator("#add-status")).to_contain_text(
            "Uploading held-2.md (3 of 3): waiting 4 s, as the server asks: too many requests: 30 a minute"
        )
        expect(page.locator("#add-status")).to_have_text(
            "Uploaded 3 of 3 files (scopes held; no tags): 3 ingested.", timeout=60_000
        )
    finally:
        page.unroute_all()
        delete_scope(site, "held")


def test_a_refused_list_read_does_not_end_following_an_upload(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    expect(page.locator("#documents tbody tr").first).to_be_visible()
    refused: list[str] = []
    over_the_limit = refusing(refused, 1, "too many requests")
    # Every list read is refused until the upload's build has ended, as over a key's requests a minute.
    page.route("**/documents?*", over_the_limit)
    try:
        upload_files(page, write(tmp_path / "refused.md", "# Refused\n\nIt ends."), "refused")
        with site.server.client(site.admin) as api:
            deadline = time.monotonic() + 60
            while not refused or [
                doc["status"]
                for doc in api.get("/documents", params={"scope": "refused"}).json()["documents"]
            ] != ["completed"]:
                assert time.monotonic() < deadline, "the upload was not built within a minute"
                page.wait_for_timeout(200)
        # Said as the wait it is, not as a failure: nothing is wrong with the server or the documents.
        admin_status = page.locator("#admin-status")
        expect(admin_status).to_contain_text("Could not list the documents: waiting 1 s, as the server asks")
        expect(admin_status).to_have_attribute("data-kind", "info")
        page.unroute("**/documents?*", over_the_limit)
        # Before, the first refusal stopped the polling, and the page said "being ingested" for good.
        expect(page.locator("#add-status")).to_have_text(
            "Uploaded 1 of 1 file (scopes refused; no tags): 1 ingested.", timeout=15_000
        )
        expect(admin_status).to_have_text("")
    finally:
        page.unroute_all()
        delete_scope(site, "refused")


def test_a_reload_after_leaving_a_conversation_mid_answer_gives_its_question_to_no_other(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/", site.admin)
    with page.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
        ask(page, "When is the Globex boiler serviced?")
    opened = completed_answer(streamed.value.text())["conversation_id"]
    held: list[Route] = []
    page.route("**/chat/stream", lambda route: held.append(route))
    page.get_by_role("button", name="New conversation").click()
    page.get_by_label("Question").fill(QUESTION)
    page.get_by_role("button", name="Ask").click()
    while not held:
        page.wait_for_timeout(50)
    page.locator(f'#conversation-list li[data-id="{opened}"] button.continue').click()
    expect(page.locator(".message.user")).to_have_text(["YouWhen is the Globex boiler serviced?"])
    page.reload()
    # The question left unanswered was asked elsewhere: given back here, it would be asked in this one.
    expect(page.locator(".message.user")).to_have_text(["YouWhen is the Globex boiler serviced?"])
    expect(page.get_by_label("Question")).to_have_value("")
    expect(page.locator("#chat-status")).not_to_contain_text("not answered")


def test_a_reingest_started_on_the_page_says_when_its_new_version_serves(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    row = page.locator("#documents tbody tr").filter(has_text="globex-boiler.md")
    expect(row).to_have_attribute("data-status", "completed")
    version = int(row.locator("td").first.inner_text())
    row.get_by_role("button", name="Re-ingest globex-boiler.md").click()
    # Its end is said, as a cancelled or failed one's is; before, only the version number changed.
    expect(page.locator("#admin-status")).to_have_text(
        f"Re-ingested globex-boiler.md: version {version + 1} serves searches now.", timeout=60_000
    )
    expect(row.locator("td").first).to_have_text(str(version + 1))
    expect(row.locator(".next-version")).to_have_count(0)


def test_at_phone_width_the_admin_page_reads_why_a_document_failed_in_lines(
    site: Site, browser: Browser
) -> None:
    with site.server.client(site.admin) as api:
        made = api.post("/documents", files={"file": ("blank-phone.txt", b"")}, data={"scopes": "phone"})
        assert made.status_code in (201, 202), made.text
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        page = context.new_page()
        sign_in(page, site.server.url + "/admin", site.admin)
        row = page.locator("#documents tbody tr").filter(has_text="blank-phone.txt")
        expect(row).to_have_attribute("data-status", "failed", timeout=60_000)
        error = row.locator("td.status .error")
        expect(error).to_have_text("blank-phone.txt: empty file")
        # The table scrolls sideways at this width; the reason still reads in lines, not in scraps of
        # a word or two (its column had the badge's width, 77 px).
        assert error.evaluate("e => e.getBoundingClientRect().width") >= 150
        zone = page.locator("#drop-zone").evaluate("e => e.getBoundingClientRect().right")
        assert page.get_by_label("Files to upload").evaluate("e => e.getBoundingClientRect().right") <= zone
    finally:
        context.close()
        with site.server.client(site.admin) as api:
            api.delete(f"/documents/{made.json()['id']}").raise_for_status()


def test_the_citations_heading_and_close_stay_in_view_with_the_page_open(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/", site.reader)
    ask(page, QUESTION)
    page.locator(".message.assistant button.cite").first.click()
    page.get_by_role("button", name="Open at the page").click()
    expect(page.locator("#viewer mark.citeline-mark").first).to_be_in_viewport(timeout=30_000)
    # The viewer brings the marked passage into view by scrolling the panel; which citation is open and
    # the way to close it stay on screen with it.
    expect(page.locator("#citation-title")).to_be_in_viewport(ratio=1)
    expect(page.get_by_role("button", name="Close the citation")).to_be_in_viewport(ratio=1)


def test_an_answer_cut_off_keeps_opening_its_own_passages_after_the_next_answer_reuses_its_numbers(
    site: Site, context: BrowserContext
) -> None:
    # A passage as the server sends it the first time a conversation cites it (asked over the API).
    with (
        site.server.client(site.admin) as api,
        api.stream(
            "POST", "/chat/stream", json={"question": "When is the Globex boiler serviced?"}
        ) as response,
    ):
        events = [
            json.loads(block.split("data:", 1)[1])
            for block in response.read().decode().replace("\r\n", "\n").split("\n\n")
            if block.startswith("event: citation")
        ]
    boiler = next(e["passage"] for e in events if e["passage"]["document_name"] == "globex-boiler.md")

    page = context.new_page()
    sign_in(page, site.server.url + "/", site.admin)
    with page.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
        ask(page, "At what water level does the sump pump alarm sound?")
    first = completed_answer(streamed.value.text())
    free = max(c["number"] for c in first["citations"]) + 1
    # The next answer cites the boiler's passage as [free], and its connection is cut before it ends:
    # the server stores no such turn.
    cut = "".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n"
        for name, data in (
            ("start", {"conversation_id": first["conversation_id"], "turn": 2}),
            ("token", {"text": f"The Globex boiler is serviced in spring [{free}]."}),
            ("citation", {"number": free, "stance": "supports", "passage": boiler}),
        )
    )
    page.route(
        "**/chat/stream",
        lambda route: route.fulfill(status=200, content_type="text/event-stream", body=cut),
    )
    page.get_by_label("Question").fill("When is the Globex boiler serviced?")
    page.get_by_role("button", name="Ask").click()
    cut_off = page.locator(".message.assistant").nth(1)
    expect(cut_off.locator(".error")).to_contain_text("The answer was cut off")
    page.unroute("**/chat/stream")

    # The next answer in the conversation gives [free] to a passage of another document.
    with page.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
        ask(page, QUESTION)
    reused = [c for c in completed_answer(streamed.value.text())["citations"] if c["number"] == free]
    assert reused and reused[0]["document_name"] != "globex-boiler.md", reused
    panel = page.get_by_role("complementary", name="Citation")
    cut_off.locator(f'.cite[data-number="{free}"]').click()
    expect(panel.locator("dd").filter(has_text="globex-boiler.md")).to_have_count(1)
    page.locator(".message.assistant").last.locator(f'.cite[data-number="{free}"]').first.click()
    expect(panel.locator("dd").filter(has_text=reused[0]["document_name"])).to_have_count(1)


def test_a_cited_pdf_out_of_reach_says_the_server_could_not_be_reached(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/", site.admin)
    ask(page, QUESTION)
    page.locator(".message.assistant button.cite").first.click()
    page.route("**/file*", lambda route: route.abort("internetdisconnected"))
    page.get_by_role("button", name="Open at the page").click()
    expect(page.locator("#viewer")).to_have_text(
        "Could not open the cited page: the server could not be reached.", timeout=30_000
    )


def test_a_citation_of_a_passage_filed_twice_names_the_other_document(
    site: Site, context: BrowserContext
) -> None:
    # The same note filed again under another name: search shows its passage once, naming the copy.
    note = b"# Globex boiler\n\nThe Globex boiler is serviced in spring."
    with site.server.client(site.admin) as api:
        made = api.post(
            "/documents", files={"file": ("globex-boiler-copy.md", note)}, data={"scopes": "globex"}
        )
        assert made.status_code == 202, made.text
        copy = made.json()
        assert [d["name"] for d in copy["same_content_as"]] == ["globex-boiler.md"]
        deadline = time.monotonic() + 120
        while api.get(f"/documents/{copy['id']}").json()["status"] != "completed":
            assert time.monotonic() < deadline, "the copy was not built"
            time.sleep(0.5)
        try:
            page = context.new_page()
            sign_in(page, site.server.url + "/", site.admin)
            with page.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
                ask(page, "When is the Globex boiler serviced?")
            cited = completed_answer(streamed.value.text())["citations"]
            number = next(c["number"] for c in cited if c["document_name"].startswith("globex-boiler"))
            page.locator(".message.assistant").last.locator(f'.cite[data-number="{number}"]').first.click()
            facts = page.get_by_role("complementary", name="Citation").locator("dd")
            expect(facts.filter(has_text="page 1")).to_contain_text("globex-boiler")
            expect(page.get_by_role("complementary", name="Citation")).to_contain_text("Also in")
        finally:
            assert api.delete(f"/documents/{copy['id']}").status_code == 200


def test_a_csv_citation_names_its_row_of_the_file_not_page_1(site: Site, context: BrowserContext) -> None:
    # "page 1" finds nothing in a spreadsheet: the citation names the row a spreadsheet shows (the
    # header is row 1, the blank line row 3).
    doses = b"drug,dose\nmetformin,500 mg twice daily\n\nsitagliptin,100 mg once daily\n"
    with site.server.client(site.admin) as api:
        made = api.post("/documents", files={"file": ("doses.csv", doses)})
        assert made.status_code == 202, made.text
        doc = made.json()
        deadline = time.monotonic() + 120
        while api.get(f"/documents/{doc['id']}").json()["status"] != "completed":
            assert time.monotonic() < deadline, "the CSV was not built"
            time.sleep(0.5)
        try:
            page = context.new_page()
            sign_in(page, site.server.url + "/", site.admin)
            with page.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
                ask(page, "What is the dose of sitagliptin?")
            cited = completed_answer(streamed.value.text())["citations"]
            number = next(c["number"] for c in cited if c["document_name"] == "doses.csv")
            button = page.locator(".message.assistant").last.locator(f'.cite[data-number="{number}"]').first
            expect(button).to_have_attribute("title", re.compile(r"^doses\.csv, row 4"))
            button.click()
            panel = page.get_by_role("complementary", name="Citation")
            expect(panel.locator("dt", has_text=re.compile("^Row$"))).to_have_count(1)
            expect(panel.locator("dt", has_text=re.compile("^Page$"))).to_have_count(0)
        finally:
            assert api.delete(f"/documents/{doc['id']}").status_code == 200


# Page 10 of the Federal Register PDF is one scanned figure ("Runaway Stabilizer", a CCITT-fax image that
# PDF.js decodes with its JBIG2 wasm module) over (108, 315)-(504, 733) of the 612 x 792 pt page.
FIGURE_PAGE = 10
FIGURE_SHARE = (108 / 612, (792 - 733) / 792, 504 / 612, (792 - 315) / 792)  # left, top, right, bottom
# Open page 10 in a viewer of its own on the chat page (its Content-Security-Policy, its PDF.js) and
# return the share of the figure's area the canvas draws dark.
DRAW_FIGURE = """
async ({fileUrl, key, page, box}) => {
  const { CitationViewer } = await import("/static/viewer.js");
  const container = document.createElement("div");
  container.style.cssText = "width: 900px; height: 1200px; overflow: auto";
  document.body.append(container);
  const viewer = new CitationViewer(container, {headers: {Authorization: `Bearer ${key}`}});
  await viewer.open({fileUrl, contentType: "application/pdf", page, start: 0, end: 18,
                     text: "Runaway Stabilizer"});
  const canvas = container.querySelector("canvas");
  const [left, top, right, bottom] = box;
  const x = Math.floor(left * canvas.width), y = Math.floor(top * canvas.height);
  const w = Math.floor((right - left) * canvas.width), h = Math.floor((bottom - top) * canvas.height);
  const { data } = canvas.getContext("2d").getImageData(x, y, w, h);
  let dark = 0;
  for (let i = 0; i < data.length; i += 4) if (data[i] + data[i + 1] + data[i + 2] < 384) dark++;
  viewer.close();
  container.remove();
  return dark / (w * h);
}
"""


def test_a_pdf_figure_decoded_by_pdfjs_wasm_is_drawn_in_the_viewer(
    site: Site, context: BrowserContext
) -> None:
    with site.server.client(site.reader) as api:
        docs = api.get("/documents", params={"scope": "acme", "limit": 100}).json()["documents"]
    doc_id = next(d["id"] for d in docs if d["name"] == FEDERAL_REGISTER.name)
    page = context.new_page()
    said: list[str] = []
    page.on("console", lambda message: said.append(message.text))
    page.on("worker", lambda worker: worker.on("console", lambda message: said.append(message.text)))
    sign_in(page, site.server.url + "/", site.reader)
    expect(page.get_by_label("Question")).to_be_visible()

    dark = page.evaluate(
        DRAW_FIGURE,
        {
            "fileUrl": f"/documents/{doc_id}/file",
            "key": site.reader,
            "page": FIGURE_PAGE,
            "box": FIGURE_SHARE,
        },
    )
    # The figure's text and frame are drawn (about 5% of its area is ink); blank, it is white throughout.
    assert dark > 0.01, (dark, said)
    assert not [text for text in said if "wasm" in text.lower() or "jbig2" in text.lower()], said


def test_a_key_the_server_refuses_is_said_by_its_form_and_the_last_new_key_is_no_longer_shown(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    form = page.locator("#key-form")
    new_key = page.locator("#new-key")
    form.get_by_label("Scopes").fill("acme")
    form.get_by_label("Name").fill("made by the key form")
    form.get_by_role("button", name="Create key").click()
    expect(new_key).to_be_visible()
    made = page.locator("#new-key-value").text_content()
    assert made and made.startswith("cl_")
    try:
        # A scope longer than any label may be: the server refuses it (HTTP 422).
        form.get_by_label("Scopes").fill("x" * (MAX_LABEL_CHARS + 1))
        form.get_by_label("Name").fill("reader of too long a scope")
        with page.expect_response(
            lambda r: r.url.endswith("/keys") and r.request.method == "POST"
        ) as refused:
            form.get_by_role("button", name="Create key").click()
        assert refused.value.status == 422
        said = page.locator("#keys").get_by_text("Could not create the key: ")
        expect(said).to_contain_text(f"must be at most {MAX_LABEL_CHARS} characters")
        expect(said).to_be_in_viewport()
        expect(page.locator("#admin-status")).to_be_hidden()
        # The key made before is not shown as if it were the one just asked for.
        expect(new_key).to_be_hidden()
        expect(page.locator("#keys")).not_to_contain_text(made)

        # A reader key with no scope, which the server makes for no one: said before anything is sent,
        # rather than advising the empty field ("leave it empty for ... universal documents only").
        posted = []
        page.on(
            "request", lambda r: posted.append(r) if r.method == "POST" and r.url.endswith("/keys") else None
        )
        form.get_by_label("Scopes").fill(" , ")
        form.get_by_role("button", name="Create key").click()
        expect(page.locator("#key-status")).to_have_text(
            'Scopes: "," names no scope; give at least one scope, or tick every scope.'
        )
        form.get_by_label("Scopes").fill("")
        form.get_by_role("button", name="Create key").click()
        expect(page.locator("#key-status")).to_have_text(
            "Scopes: a reader key needs at least one; give at least one scope, or tick every scope."
        )
        assert posted == []
    finally:
        with site.server.client(site.admin) as api:
            for key in api.get("/keys").json()["keys"]:
                if key["name"] == "made by the key form":
                    api.delete(f"/keys/{key['id']}").raise_for_status()


def test_escape_closes_a_documents_detail_after_its_chunks_are_paged_to_the_last(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    page.locator("#documents tbody tr").filter(has_text=FEDERAL_REGISTER.name).locator("button.link").click()
    detail = page.locator("#detail")
    expect(page.locator("#chunks-range")).to_contain_text("chunks 1\u201350 of ")
    following = page.locator("#chunks-next")
    following.focus()
    while following.is_enabled():
        shown = page.locator("#chunks-range").text_content()
        page.keyboard.press("Enter")
        expect(page.locator("#chunks-range")).not_to_have_text(shown or "")
    # Next is disabled under the focus: the focus stays in the detail, and Escape still closes it.
    assert page.evaluate("document.getElementById('detail').contains(document.activeElement)")
    page.keyboard.press("Escape")
    expect(detail).to_be_hidden()
    # And with the focus lost to the body all the same.
    page.locator("#documents tbody tr").filter(has_text=FEDERAL_REGISTER.name).locator("button.link").click()
    expect(detail).to_be_visible()
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("Escape")
    expect(detail).to_be_hidden()


def open_the_federal_register_cited(page: Page, site: Site) -> tuple[Locator, int]:
    """Ask QUESTION as the reader, open the Federal Register's citation at its page, and return the
    viewer's pager once shown, with the citation's number."""
    sign_in(page, site.server.url + "/", site.reader)
    with page.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
        ask(page, QUESTION)
    cited = completed_answer(streamed.value.text())["citations"]
    number = next(c["number"] for c in cited if c["document_name"] == FEDERAL_REGISTER.name)
    page.locator(f'.message.assistant .cite[data-number="{number}"]').first.click()
    page.get_by_role("button", name="Open at the page").click()
    pager = page.locator("#viewer nav.citeline-pager")
    expect(pager).to_be_visible(timeout=30_000)
    return pager, number


def test_escape_closes_the_citation_after_the_viewer_is_paged_to_the_last_page(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    pager, number = open_the_federal_register_cited(page, site)
    pager.get_by_role("button", name="Next page").focus()
    while pager.get_by_role("button", name="Next page").is_enabled():
        shown = pager.locator("span").text_content()
        page.keyboard.press("Enter")
        expect(pager.locator("span")).not_to_have_text(shown or "", timeout=30_000)
    expect(pager.locator("span")).to_have_text("Page 15 of 15")
    panel = page.get_by_role("complementary", name="Citation")
    assert page.evaluate("document.getElementById('citation-panel').contains(document.activeElement)")
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    # And with the focus lost to the body all the same.
    page.locator(f'.message.assistant .cite[data-number="{number}"]').first.click()
    expect(panel).to_be_visible()
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()


# The pager's controls (page buttons, counter, zoom buttons, zoom) as boxes: where each sits and
# whether it lies inside the pager, the pager's own height and whether it scrolls sideways.
PAGER_BOXES = """() => {
  const pager = document.querySelector("#viewer nav.citeline-pager");
  const bar = pager.getBoundingClientRect();
  const controls = [...pager.querySelectorAll("button, span, output")].map((node) => {
    const box = node.getBoundingClientRect();
    return {
      name: node.getAttribute("aria-label") ?? node.textContent,
      top: box.top,
      bottom: box.bottom,
      height: box.height,
      inside: box.left >= bar.left - 0.5 && box.right <= bar.right + 0.5,
    };
  });
  return {controls, height: bar.height, overflows: pager.scrollWidth > pager.clientWidth};
}"""


def test_the_viewer_s_pager_keeps_its_controls_on_one_line_at_phone_width(
    site: Site, browser: Browser
) -> None:
    context = browser.new_context(viewport={"width": 360, "height": 780}, is_mobile=True)
    try:
        page = context.new_page()
        pager, _ = open_the_federal_register_cited(page, site)
        # The widest the pager gets on this document: "Page 15 of 15" at 300%.
        following = pager.get_by_role("button", name="Next page")
        following.focus()
        while following.is_enabled():
            shown = pager.locator("span").text_content()
            page.keyboard.press("Enter")
            expect(pager.locator("span")).not_to_have_text(shown or "", timeout=30_000)
        expect(pager.locator("span")).to_have_text("Page 15 of 15")
        for zoom in ("150%", "200%", "300%"):
            pager.get_by_role("button", name="Zoom in").click()
            expect(pager.locator("output")).to_have_text(zoom)

        for width in (360, 375, 390):
            page.set_viewport_size({"width": width, "height": 780})
            boxes = page.evaluate(PAGER_BOXES)
            # Nothing hidden: both page buttons, the counter, the zoom's three buttons and its figure.
            assert len(boxes["controls"]) == 7, boxes
            tallest = max(control["height"] for control in boxes["controls"])
            # One row: every control centred on the same line, the pager no taller than its tallest.
            middles = [(control["top"] + control["bottom"]) / 2 for control in boxes["controls"]]
            assert max(middles) - min(middles) <= 2, (width, boxes)
            assert boxes["height"] < 1.5 * tallest, (width, boxes)
            assert all(control["inside"] for control in boxes["controls"]), (width, boxes)
            assert not boxes["overflows"], (width, boxes)
    finally:
        context.close()
