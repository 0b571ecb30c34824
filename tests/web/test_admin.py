"""The admin page's labels and its live table, in Debian's chromium, against a real ``citeline serve``
(its own embedded database, real embedder) whose jobs go to a real Redis with no worker reading it, so
a build started anywhere stays ``queued`` until it is cancelled (or a test starts a worker): labels
the API would refuse or read as something else are refused before anything is sent, and what the
server stored is said; a document's labels change from its detail; a re-ingest started elsewhere
shows live while the page is seen, and a hidden page stops asking; an upload followed reads the
statistics when the list changed, not at every poll; signing in reads them once, and a failed read
is asked again at the next poll."""

from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, Request, Route, expect

from tests.api.conftest import Server, base_env, create_key, ingest, start_server, stop_server
from tests.conftest import write
from tests.web.test_pages import sign_in

PUMP = "# Feed pump\n\nThe feed pump runs at 1450 rpm. Its bearings are greased every 2000 hours.\n"
GAUGE = "# Pressure gauge\n\nThe pressure gauge is calibrated every year against the master gauge.\n"
WATCH_S = 5  # admin.js WATCH_MS
FOLLOWED_S = 8  # how long a queued upload is followed while its requests are counted


@dataclass
class Site:
    server: Server
    admin: str
    ids: dict[str, str]

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        with self.server.client(self.admin) as client:
            return client.request(method, path, **kwargs).raise_for_status().json()


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory, fresh_data_dir: Callable[[str], Path], redis_server: str
) -> Iterator[Site]:
    data = fresh_data_dir("citeline-admin-")
    corpus = tmp_path_factory.mktemp("admin-corpus")
    write(corpus / "pump.md", PUMP)
    write(corpus / "gauge.md", GAUGE)
    ids = ingest(base_env(data), corpus)
    # Builds the API starts go to Redis, and no worker takes them: they stay queued.
    env = base_env(
        data, CITELINE_LLM="extractive", CITELINE_JOB_RUNNER="celery", CITELINE_REDIS_URL=redis_server
    )
    server = start_server(env, tmp_path_factory.mktemp("admin-log") / "serve.log")
    try:
        admin = create_key(env, "--role", "admin", "--name", "admin page")["key"]
        yield Site(server, admin, ids)
    finally:
        stop_server(server)


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    instance = browser.new_context(viewport={"width": 1280, "height": 900})
    yield instance
    instance.close()


def admin_page(site: Site, context: BrowserContext) -> Page:
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    expect(page.locator("#documents tbody tr").filter(has_text="gauge.md")).to_have_count(1)
    return page


def sent(page: Page, method: str, path: str) -> list[Request]:
    """The ``method`` requests to ``path`` that ``page`` makes from now on (a list that fills)."""
    requests: list[Request] = []
    page.on(
        "request",
        lambda r: requests.append(r) if r.method == method and r.url.split("?")[0].endswith(path) else None,
    )
    return requests


def test_labels_naming_nothing_are_refused_before_anything_is_sent(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    page = admin_page(site, context)
    posts = sent(page, "POST", "/documents")
    add = page.locator("#add")
    status = page.locator("#add-status")
    page.get_by_label("Files to upload").set_input_files(write(tmp_path / "valve.md", "# Valve\n\nShut.\n"))
    # Only commas: read as no scope, the file would be universal, seen by every search.
    scopes, tags, category = (
        add.get_by_label("Scopes"),
        add.get_by_label("Tags"),
        add.get_by_label("Category"),
    )
    scopes.fill(" , ,")
    add.get_by_role("button", name="Upload", exact=True).click()
    expect(status).to_have_text(
        'Scopes: ", ," names no scope; leave it empty for universal documents, which every search sees.'
    )
    expect(scopes).to_be_focused()
    expect(scopes).to_have_attribute("aria-invalid", "true")
    scopes.fill("plant-a")
    expect(scopes).not_to_have_attribute("aria-invalid", "true")
    tags.fill(",")
    page.keyboard.press("Enter")  # submits the upload form from its field
    expect(status).to_have_text('Tags: "," names no tag; leave it empty for no tags.')
    expect(tags).to_be_focused()
    tags.fill("")
    category.fill(" / / ")
    page.get_by_label("Web page URL").fill("https://example.org/valves")
    page.get_by_role("button", name="Add the page").click()
    expect(status).to_contain_text('Category: "/ /" names no category; give a path such as plant/valves')
    expect(category).to_be_focused()
    assert posts == [], [r.url for r in posts]

    # Blank entries and repeats are left out, and the page says which labels the server stored.
    category.fill("")
    scopes.fill("plant-a, , plant-b, plant-a")
    tags.fill("valves, , spare,")
    add.get_by_role("button", name="Upload", exact=True).click()
    expect(status).to_have_text(
        "Uploaded 1 of 1 file (scopes plant-a, plant-b; tags spare, valves); it is being ingested."
    )
    row = page.locator("#documents tbody tr").filter(has_text="valve.md")
    expect(row).to_contain_text("plant-a, plant-b")
    site.api("DELETE", f"/documents/{row.get_attribute('data-id')}")

    # A reader key's scopes alike (said by the key form): only commas name no scope, and a reader key
    # needs one.
    keys = page.locator("#key-form")
    keys.get_by_label("Scopes").fill(",,")
    keys.get_by_role("button", name="Create key").click()
    expect(page.locator("#key-status")).to_have_text(
        'Scopes: ",," names no scope; give at least one scope, or tick every scope.'
    )
    expect(page.locator("#new-key")).to_be_hidden()


def test_a_documents_labels_change_from_its_detail(site: Site, context: BrowserContext) -> None:
    page = admin_page(site, context)
    row = page.locator("#documents tbody tr").filter(has_text="pump.md")
    row.get_by_role("button", name="Feed pump").click()
    form = page.locator("#relabel-form")
    status = page.locator("#relabel-status")
    expect(form.get_by_label("Scopes")).to_have_value("")
    form.get_by_label("Scopes").fill("plant-a, plant-b")
    form.get_by_label("Category").fill("plant/pumps")
    form.get_by_label("Tags").fill("feed, , rotating")
    form.get_by_label("Metadata").fill('{"site": "north"}')
    form.get_by_role("button", name="Save the labels").click()
    expect(status).to_have_text(
        "Saved: scopes plant-a, plant-b; category plant/pumps; tags feed, rotating; "
        'metadata {"site":"north"}.'
    )
    # The list and the detail show the new labels; the API has them.
    expect(row.locator("td").nth(3)).to_have_text("plant-a, plant-b")
    expect(row.locator("td").nth(5)).to_have_text("feed, rotating")
    expect(page.locator("#detail-facts")).to_contain_text("plant/pumps")
    stored = site.api("GET", f"/documents/{site.ids['pump.md']}")
    assert (stored["scopes"], stored["category"], stored["tags"], stored["metadata"]) == (
        ["plant-a", "plant-b"],
        "plant/pumps",
        ["feed", "rotating"],
        {"site": "north"},
    ), stored

    # The server's refusal, in its words, naming the field; nothing changes.
    form.get_by_label("Metadata").fill('{"floor": 3}')
    form.get_by_role("button", name="Save the labels").click()
    expect(status).to_contain_text("Could not change the labels of pump.md: body.metadata.floor")
    expect(status).to_contain_text("(HTTP 422)")
    assert site.api("GET", f"/documents/{site.ids['pump.md']}")["metadata"] == {"site": "north"}
    # An emptied category removes it; scopes naming nothing are refused; empty scopes make the
    # document universal again, as the field says.
    form.get_by_label("Metadata").fill('{"site": "north"}')
    form.get_by_label("Category").fill("")
    form.get_by_role("button", name="Save the labels").click()
    expect(status).to_have_text(
        'Saved: scopes plant-a, plant-b; tags feed, rotating; metadata {"site":"north"}.'
    )
    assert site.api("GET", f"/documents/{site.ids['pump.md']}")["category"] is None
    form.get_by_label("Scopes").fill(" ,")
    form.get_by_role("button", name="Save the labels").click()
    expect(status).to_contain_text("names no scope; leave it empty to make the document universal.")
    form.get_by_label("Scopes").fill("")
    form.get_by_label("Scopes").press("Enter")
    expect(status).to_contain_text("Saved: universal; tags feed, rotating")
    expect(row.locator("td").nth(3)).to_have_text("Universal")


def wait_until(page: Page, done: Callable[[], bool], timeout: float = 10) -> None:
    """Let ``page`` run (its requests and route handlers) until ``done()``."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        page.wait_for_timeout(50)


def hide(page: Page, hidden: bool) -> None:
    """Tell ``page`` it is hidden (another tab in front) or shown again, as the browser would."""
    page.evaluate(
        """hidden => {
          Object.defineProperty(document, "hidden", {value: hidden, configurable: true});
          Object.defineProperty(document, "visibilityState", {
            value: hidden ? "hidden" : "visible", configurable: true,
          });
          document.dispatchEvent(new Event("visibilitychange"));
        }""",
        hidden,
    )


def test_a_reingest_started_elsewhere_shows_live_while_the_page_is_seen(
    site: Site, context: BrowserContext
) -> None:
    page = admin_page(site, context)
    row = page.locator("#documents tbody tr").filter(has_text="gauge.md")
    expect(row).to_have_attribute("data-status", "completed")
    built = site.api("POST", f"/documents/{site.ids['gauge.md']}/reingest")  # as the CLI or a script would
    expect(row.locator(".next-version")).to_have_text(
        f"version {built['version']}: queued", timeout=(WATCH_S + 10) * 1000
    )
    expect(row).to_have_attribute("data-status", "completed")
    row.get_by_role("button", name="Cancel gauge.md").click()
    expect(page.locator("#admin-status")).to_have_text(
        f"Cancelled re-ingesting gauge.md (version {built['version']})."
    )
    expect(row.get_by_role("button", name="Re-ingest gauge.md")).to_be_visible()

    # Hidden, the page asks nothing; shown again, it looks at once.
    stats, builds = sent(page, "GET", "/stats"), sent(page, "GET", "/builds")
    hide(page, True)
    time.sleep(1)
    stats.clear()
    builds.clear()
    time.sleep(WATCH_S + 1)
    assert stats == [] and builds == [], [r.url for r in stats + builds]
    built = site.api("POST", f"/documents/{site.ids['gauge.md']}/reingest")
    hide(page, False)
    expect(row.locator(".next-version")).to_have_text(f"version {built['version']}: queued", timeout=5_000)
    site.api("POST", f"/documents/{site.ids['gauge.md']}/cancel")
    expect(row.locator(".next-version")).to_have_count(0)


def test_builds_started_elsewhere_are_found_in_one_request_and_drop_out_when_they_end(
    site: Site, context: BrowserContext
) -> None:
    page = admin_page(site, context)
    swept, asked = sent(page, "GET", "/versions"), sent(page, "GET", "/builds")
    rows = {name: page.locator("#documents tbody tr").filter(has_text=name) for name in site.ids}
    built = {name: site.api("POST", f"/documents/{doc}/reingest") for name, doc in site.ids.items()}
    for name, row in rows.items():
        expect(row.locator(".next-version")).to_have_text(
            f"version {built[name]['version']}: queued", timeout=(WATCH_S + 10) * 1000
        )
        expect(row.get_by_role("button", name=f"Cancel {name}")).to_be_visible()
    # The builds are one request, not a read of every listed document's versions.
    assert swept == [] and asked, [r.url for r in swept]

    for doc in site.ids.values():  # ended elsewhere
        site.api("POST", f"/documents/{doc}/cancel")
    for name, row in rows.items():
        expect(row.locator(".next-version")).to_have_count(0)
        expect(row.get_by_role("button", name=f"Re-ingest {name}")).to_be_visible()
    expect(page.locator("#admin-status")).to_contain_text("cancelled")


def test_on_a_slow_network_the_newest_list_shows_and_an_action_is_sent_once(
    site: Site, context: BrowserContext
) -> None:
    page = admin_page(site, context)
    rows = page.locator("#documents tbody tr")
    # The list of failed documents answers late, after the user has gone back to every document.
    held: list[Route] = []
    page.route(lambda url: "status=failed" in url, lambda route: held.append(route))
    status = page.locator("#filters").get_by_label("Status")
    status.select_option("failed")
    wait_until(page, lambda: len(held) == 1)
    status.select_option("")
    expect(rows.filter(has_text="gauge.md")).to_have_count(1)
    held[0].continue_()
    page.wait_for_timeout(500)  # the late answer arrives, and is not shown over the newer one
    expect(rows.filter(has_text="gauge.md")).to_have_count(1)
    expect(rows.filter(has_text="pump.md")).to_have_count(1)

    # A double click on Re-ingest, its answer slow: one re-ingest, not two builds.
    page.route("**/reingest", lambda route: held.append(route))
    row = rows.filter(has_text="gauge.md")
    row.get_by_role("button", name="Re-ingest gauge.md").dblclick()
    wait_until(page, lambda: len(held) >= 2)
    page.wait_for_timeout(500)  # time for a second request, were it sent
    assert len(held) == 2, [r.request.url for r in held]
    expect(row.get_by_role("button", name="Delete gauge.md")).to_be_disabled()
    held[1].continue_()
    expect(row.locator(".next-version")).to_contain_text("queued")
    expect(row.get_by_role("button", name="Cancel gauge.md")).to_be_enabled()
    versions = site.api("GET", f"/documents/{site.ids['gauge.md']}/versions")["versions"]
    assert [v["status"] for v in versions].count("queued") == 1, versions
    row.get_by_role("button", name="Cancel gauge.md").click()
    expect(row.get_by_role("button", name="Re-ingest gauge.md")).to_be_visible()


def test_on_a_slow_network_sign_in_says_it_is_checking_and_a_file_is_uploaded_once(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    page = context.new_page()
    held: list[Route] = []
    page.route("**/keys/me", lambda route: held.append(route))
    page.goto(site.server.url + "/admin")
    page.get_by_label("API key", exact=True).fill(site.admin)
    page.get_by_label("API key", exact=True).press("Enter")
    expect(page.locator("#sign-in-status")).to_have_text("Checking the key…")
    expect(page.get_by_role("button", name="Sign in")).to_be_disabled()
    held.pop().continue_()
    expect(page.locator("#documents tbody tr").filter(has_text="gauge.md")).to_have_count(1)

    page.route(
        "**/documents",
        lambda route: held.append(route) if route.request.method == "POST" else route.continue_(),
    )
    page.get_by_label("Files to upload").set_input_files(write(tmp_path / "drain.md", "# Drain\n\nOpen.\n"))
    page.get_by_role("button", name="Upload", exact=True).dblclick()
    wait_until(page, lambda: len(held) >= 1)
    page.wait_for_timeout(500)  # time for a second upload, were it sent
    assert len(held) == 1, [r.request.url for r in held]
    expect(page.get_by_role("button", name="Add the page")).to_be_disabled()
    held[0].continue_()
    expect(page.locator("#add-status")).to_contain_text("Uploaded 1 of 1 file")
    expect(page.get_by_role("button", name="Upload", exact=True)).to_be_enabled()
    row = page.locator("#documents tbody tr").filter(has_text="drain.md")
    expect(row).to_have_count(1)
    site.api("DELETE", f"/documents/{row.get_attribute('data-id')}")


def test_documents_are_found_by_part_of_their_name(site: Site, context: BrowserContext) -> None:
    page = admin_page(site, context)
    rows = page.locator("#documents tbody tr")
    name = page.locator("#filters").get_by_label("Name")
    name.fill("GAUGE")
    name.press("Enter")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("gauge.md")
    expect(page.locator("#documents-count")).to_have_text("1 document")
    name.fill("")
    name.press("Enter")
    expect(rows.filter(has_text="pump.md")).to_have_count(1)


def test_the_keyboard_focus_stays_in_the_table_while_it_is_drawn_again(
    site: Site, context: BrowserContext
) -> None:
    page = admin_page(site, context)
    row = page.locator("#documents tbody tr").filter(has_text="gauge.md")
    focused_row = "document.activeElement.closest('tr')?.dataset.id ?? document.activeElement.tagName"
    row.get_by_role("button", name="Re-ingest gauge.md").focus()
    page.keyboard.press("Enter")
    expect(row.locator(".next-version")).to_contain_text("queued")
    # The row is drawn again every second while its version is built: the focus stays on it.
    for _ in range(3):
        page.wait_for_timeout(1100)
        assert page.evaluate(focused_row) == site.ids["gauge.md"]
    page.keyboard.press("Tab")  # on to the row's next control: its Cancel
    expect(row.get_by_role("button", name="Cancel gauge.md")).to_be_focused()
    page.keyboard.press("Enter")
    expect(row.get_by_role("button", name="Re-ingest gauge.md")).to_be_visible()
    assert page.evaluate(focused_row) == site.ids["gauge.md"]


def test_a_moment_without_the_server_is_said_and_then_unsaid(site: Site, context: BrowserContext) -> None:
    page = admin_page(site, context)
    status = page.locator("#admin-status")
    page.route("**/stats", lambda route: route.abort("internetdisconnected"))
    expect(status).to_have_text(
        "Could not read the statistics: the server could not be reached", timeout=(WATCH_S + 5) * 1000
    )
    page.unroute("**/stats")
    expect(status).to_be_hidden(timeout=(WATCH_S + 5) * 1000)


def test_signing_in_reads_the_statistics_once(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    stats = sent(page, "GET", "/stats")
    sign_in(page, site.server.url + "/admin", site.admin)
    expect(shown_stat(page, "Documents")).to_have_text(str(site.api("GET", "/stats")["documents"]))
    expect(page.locator("#documents tbody tr").filter(has_text="gauge.md")).to_have_count(1)
    page.wait_for_timeout(1_500)  # the list's own read of them, had it asked, well sent by now
    # Before, the watch read them with the builds and the list read them again: two at once.
    assert len(stats) == 1, [r.url for r in stats]


def test_a_failed_statistics_read_is_asked_again_at_the_next_poll_while_an_upload_is_followed(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    page = admin_page(site, context)
    page.get_by_label("Files to upload").set_input_files(
        write(tmp_path / "drain.md", "# Drain\n\nThe drain valve is opened weekly.\n")
    )
    page.get_by_role("button", name="Upload", exact=True).click()
    try:
        expect(page.locator("#add-status")).to_contain_text("Uploaded 1 of 1 file")
        # Queued, no worker: the list is read every second while it is followed.
        stats = sent(page, "GET", "/stats")
        page.route("**/stats", lambda route: route.abort("internetdisconnected"))
        status = page.locator("#admin-status")
        expect(status).to_have_text(
            "Could not read the statistics: the server could not be reached", timeout=(WATCH_S + 5) * 1000
        )
        stats.clear()
        page.wait_for_timeout(3_000)
        # Each poll asks again; before, only the watch did, every WATCH_S: none or one in 3 s.
        assert len(stats) >= 2, [r.url for r in stats]
        page.unroute("**/stats")
        expect(status).to_be_hidden(timeout=2_500)
    finally:
        for doc in site.api("GET", "/documents")["documents"]:
            if doc["name"] == "drain.md":
                site.api("DELETE", f"/documents/{doc['id']}")


def test_on_a_slow_network_the_detail_shows_the_chunks_of_the_document_opened_last(
    site: Site, context: BrowserContext
) -> None:
    page = admin_page(site, context)
    held: list[Route] = []
    page.route(f"**/documents/{site.ids['pump.md']}/chunks*", lambda route: held.append(route))
    page.get_by_role("button", name="Feed pump").click()
    wait_until(page, lambda: len(held) == 1)
    page.get_by_role("button", name="Pressure gauge").click()
    chunks = page.locator("#chunks tbody")
    expect(chunks).to_contain_text("master gauge")
    expect(page.locator("#detail-title")).to_have_text("Pressure gauge")
    held[0].continue_()
    page.wait_for_timeout(500)  # the late answer arrives, and is not shown under the gauge
    expect(chunks).to_contain_text("master gauge")
    expect(chunks).not_to_contain_text("1450 rpm")


def test_a_reader_opens_a_documents_detail_without_a_refused_request(
    site: Site, context: BrowserContext
) -> None:
    reader = site.api("POST", "/keys", json={"role": "reader", "all_scopes": True, "name": "reader"})["key"]
    page = context.new_page()
    refused: list[str] = []
    page.on("response", lambda r: refused.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    sign_in(page, site.server.url + "/admin", reader)
    page.get_by_role("button", name="Pressure gauge").click()
    expect(page.locator("#chunks tbody")).to_contain_text("master gauge")
    expect(page.locator("#detail-versions")).to_contain_text("version 1: completed")
    expect(page.locator("#relabel-form")).to_be_hidden()
    assert refused == [], refused


def test_a_file_uploaded_with_the_keyboard_leaves_the_focus_on_upload(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    page = admin_page(site, context)
    page.get_by_label("Files to upload").set_input_files(
        write(tmp_path / "strainer.md", "# Strainer\n\nThe strainer is cleaned weekly.\n")
    )
    upload = page.get_by_role("button", name="Upload", exact=True)
    upload.focus()
    page.keyboard.press("Enter")
    row = page.locator("#documents tbody tr").filter(has_text="strainer.md")
    try:
        expect(page.locator("#add-status")).to_contain_text("Uploaded 1 of 1 file")
        # The button waits (disabled) while the file goes up, which dropped the focus to the page's
        # top: the status holds it meanwhile, and it comes back to Upload.
        expect(upload).to_be_enabled()
        expect(upload).to_be_focused()
    finally:
        expect(row).to_have_count(1)
        site.api("DELETE", f"/documents/{row.get_attribute('data-id')}")


def test_a_file_uploaded_with_the_bytes_of_a_stored_document_names_it_and_opens_it(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    page = admin_page(site, context)
    files = [
        write(tmp_path / "gauge (copy).md", GAUGE),  # the bytes gauge.md holds, under another name
        write(tmp_path / "filter.md", "# Filter\n\nThe filter is changed monthly.\n"),
    ]
    page.get_by_label("Files to upload").set_input_files(files)
    page.get_by_role("button", name="Upload", exact=True).click()
    try:
        expect(page.locator("#add-status")).to_contain_text("Uploaded 2 of 2 files")
        # Stored all the same, as the API and `citeline ingest` say; the page says which document
        # already held the bytes, next to that file only.
        same = page.locator("#add-same li")
        expect(same).to_have_text(["gauge (copy).md: same content as gauge.md (version 1)"])
        same.get_by_role("button", name="Open gauge.md").click()
        expect(page.locator("#detail-title")).to_have_text("Pressure gauge")
        expect(page.locator("#detail-facts")).to_contain_text(site.ids["gauge.md"])

        # A copy under other scopes is seen by other readers than the one stored: said, with both's.
        page.get_by_label("Files to upload").set_input_files(write(tmp_path / "gauge (plant-a).md", GAUGE))
        page.locator("#add").get_by_label("Scopes").fill("plant-a")
        page.get_by_role("button", name="Upload", exact=True).click()
        expect(same).to_have_text(
            [
                "gauge (plant-a).md: same content as gauge (copy).md (version 1, universal), gauge.md "
                "(version 1, universal); this copy has scopes plant-a"
            ]
        )
        page.locator("#add").get_by_label("Scopes").fill("")

        # The next upload says only its own files.
        page.get_by_label("Files to upload").set_input_files(
            write(tmp_path / "valve.md", "# Valve\n\nThe valve is shut at night.\n")
        )
        page.get_by_role("button", name="Upload", exact=True).click()
        expect(page.locator("#add-status")).to_contain_text("Uploaded 1 of 1 file")
        expect(page.locator("#add-same")).to_be_hidden()
    finally:
        for doc in site.api("GET", "/documents")["documents"]:
            if doc["name"] in ("gauge (copy).md", "gauge (plant-a).md", "filter.md", "valve.md"):
                site.api("DELETE", f"/documents/{doc['id']}")


def test_closing_the_page_while_files_are_being_uploaded_asks_first(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    page = admin_page(site, context)
    held: list[Route] = []
    page.route(
        "**/documents",
        # The first file's upload is held; the second goes on once it is let go.
        lambda route: (
            held.append(route) if route.request.method == "POST" and not held else route.continue_()
        ),
    )
    files = [write(tmp_path / f"tank-{n}.md", f"# Tank {n}\n\nTank {n} holds {n} m3.\n") for n in (1, 2)]
    page.get_by_label("Files to upload").set_input_files(files)
    page.get_by_role("button", name="Upload", exact=True).click()
    wait_until(page, lambda: len(held) >= 1)
    # Closed (or reloaded) now, the second file would never be sent: the browser asks first.
    with page.expect_event("dialog", timeout=10_000) as asked:
        page.close(run_before_unload=True)
    assert asked.value.type == "beforeunload"
    asked.value.dismiss()  # stay on the page
    held[0].continue_()
    page.unroute("**/documents")
    expect(page.locator("#add-status")).to_contain_text("Uploaded 2 of 2 files")
    # Deleted as the catalog lists them: the table, read at most every UPLOAD_LIST_MS while files go
    # up, may not show the second yet, which stayed queued and was built by a later test's worker.
    for doc in site.api("GET", "/documents")["documents"]:
        if doc["name"].startswith("tank-"):
            site.api("DELETE", f"/documents/{doc['id']}")
    # Nothing being sent, the page closes without asking.
    with page.expect_event("close", timeout=10_000):
        page.close(run_before_unload=True)


def test_a_key_pasted_with_a_character_no_key_has_is_said_so(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    page.goto(site.server.url + "/admin")
    checked = sent(page, "GET", "/keys/me")
    key = page.get_by_label("API key", exact=True)
    status = page.locator("#sign-in-status")
    for pasted, named in (
        (site.admin + "…", '"…"'),
        (site.admin[:10] + "\u00a0" + site.admin[10:], "a space"),
    ):
        key.fill(pasted)
        page.get_by_role("button", name="Sign in").click()
        expect(status).to_have_text(
            f"This key holds {named}, which no API key has: "
            "paste the key as `citeline keys create` printed it."
        )
    assert not checked  # nothing was sent
    key.fill(site.admin)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#documents tbody tr").filter(has_text="gauge.md")).to_have_count(1)


def test_a_document_s_detail_says_which_key_or_command_line_user_uploaded_it(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    page = admin_page(site, context)
    page.get_by_label("Files to upload").set_input_files(
        write(tmp_path / "hose.md", "# Hose\n\nThe hose is 8 m.\n")
    )
    page.get_by_role("button", name="Upload", exact=True).click()
    try:
        expect(page.locator("#add-status")).to_contain_text("Uploaded 1 of 1 file")
        (hose,) = [doc for doc in site.api("GET", "/documents")["documents"] if doc["name"] == "hose.md"]
        page.locator(f'#documents tr[data-id="{hose["id"]}"] button.link').click()
        uploaded_by = page.locator("#detail-facts dt:text-is('Uploaded by') + dd")
        # Named as the keys list names the key the page signed in with.
        expect(uploaded_by).to_have_text("admin page (key)")
        # One ingested with `citeline ingest` was sent by no key: by the user on the command line.
        page.locator(f'#documents tr[data-id="{site.ids["gauge.md"]}"] button.link').click()
        expect(page.locator("#detail-title")).to_have_text("Pressure gauge")
        expect(uploaded_by).to_have_text(f"{getpass.getuser()} (command line)")
    finally:
        for doc in site.api("GET", "/documents")["documents"]:
            if doc["name"] == "hose.md":
                site.api("DELETE", f"/documents/{doc['id']}")


def test_a_replaced_document_shows_when_it_was_added_and_when_its_current_version_was_made(
    site: Site, context: BrowserContext
) -> None:
    """The list and the detail showed one time, the current version's, as "Uploaded": a document
    replaced today looked added today."""
    first = site.api(
        "POST",
        "/documents",
        files={"file": ("seal.md", b"# Seal\n\nThe seal is PTFE.\n")},
        data={"index": "false"},
    )
    time.sleep(1.2)  # the page shows times to the second
    site.api(
        "POST",
        "/documents",
        files={"file": ("seal.md", b"# Seal\n\nThe seal is graphite.\n")},
        data={"index": "false", "document_id": first["id"]},
    )
    try:
        doc = site.api("GET", f"/documents/{first['id']}")
        assert doc["version"] == 2 and doc["added_at"] == first["created_at"] != doc["created_at"], doc
        page = admin_page(site, context)
        shown = page.evaluate(
            "(times) => times.map((t) => new Date(t).toLocaleString())", [doc["added_at"], doc["created_at"]]
        )
        row = page.locator(f'#documents tr[data-id="{first["id"]}"]')
        expect(row.locator("td[data-label='Added']")).to_have_text(shown[0])
        expect(row.locator("td[data-label='Updated']")).to_have_text(shown[1])
        row.locator("button.link").click()
        expect(page.locator("#detail-facts dt:text-is('Added') + dd")).to_have_text(shown[0])
        expect(page.locator("#detail-facts dt:text-is('Updated') + dd")).to_have_text(shown[1])
    finally:
        site.api("DELETE", f"/documents/{first['id']}")


def shown_stat(page: Page, term: str) -> Locator:
    """The value the statistics show for ``term`` ("Documents", "Searchable", a status)."""
    return page.locator(f"#stats dt:text-is('{term}') + dd")


def test_following_an_upload_reads_the_statistics_when_the_list_changed_not_at_every_poll(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    page = admin_page(site, context)
    before = site.api("GET", "/stats")
    page.get_by_label("Files to upload").set_input_files(
        write(tmp_path / "sump.md", "# Sump\n\nThe sump is pumped dry every Friday.\n")
    )
    page.get_by_role("button", name="Upload", exact=True).click()
    status = page.locator("#add-status")
    worker: subprocess.Popen[bytes] | None = None
    try:
        expect(status).to_contain_text("Uploaded 1 of 1 file")
        # No worker reads the queue yet: the build stays queued while the page follows it, the list
        # read every second and nothing in it changing.
        stats, lists = sent(page, "GET", "/stats"), sent(page, "GET", "/documents")
        page.wait_for_timeout(FOLLOWED_S * 1000)
        # Before, each poll read the statistics too (one a second, besides the watch's every 5 s):
        # over a tight per-key rate limit that made a followed upload end later than it had to.
        assert len(lists) >= FOLLOWED_S - 2, [r.url for r in lists]
        assert len(stats) <= FOLLOWED_S // WATCH_S + 1, [r.url for r in stats]
        print(f"\nfollowed {FOLLOWED_S} s: {len(lists)} list reads, {len(stats)} statistics reads")

        # A worker builds it: once the list shows it completed, the statistics count it at once, not
        # at the watch's next look.
        worker = subprocess.Popen(
            [sys.executable, "-m", "citeline.cli", "worker"],
            env=site.server.env,
            stdout=(tmp_path / "worker.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        expect(status).to_have_text("Uploaded 1 of 1 file (universal; no tags): 1 ingested.", timeout=120_000)
        # The worker also builds whatever else the module's shared site left queued; the page follows
        # that too, and its statistics are compared once nothing is left to build.
        wait_until(page, lambda: not site.api("GET", "/builds")["builds"], timeout=60)
        after = site.api("GET", "/stats")
        assert after["documents"] == before["documents"] + 1, after
        (sump,) = [doc for doc in site.api("GET", "/documents")["documents"] if doc["name"] == "sump.md"]
        assert sump["status"] == "completed", sump
        for term, value in (
            ("Documents", after["documents"]),
            ("Searchable", after["active_documents"]),
            ("completed", after["by_status"]["completed"]),
        ):
            expect(shown_stat(page, term)).to_have_text(str(value), timeout=2_000)
    finally:
        if worker is not None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(30)
        for doc in site.api("GET", "/documents")["documents"]:
            if doc["name"] == "sump.md":
                site.api("DELETE", f"/documents/{doc['id']}")


def test_at_phone_width_each_documents_status_and_actions_are_in_view_without_scrolling_sideways(
    site: Site, browser: Browser
) -> None:
    context = browser.new_context(viewport={"width": 375, "height": 812}, is_mobile=True)
    try:
        page = admin_page(site, context)
        rows = page.locator("#documents tbody tr")
        expect(rows.filter(has_text="pump.md")).to_have_count(1)
        # The table scrolled sideways inside its box: only Name and Version showed, so a document's
        # status could not be watched while it was ingested, nor its buttons reached.
        widths = page.evaluate(
            "() => [document.documentElement.scrollWidth, ...[...document.querySelectorAll('.table-wrap')]"
            ".filter((w) => w.closest('section').id !== 'detail').map((w) => w.scrollWidth - w.clientWidth)]"
        )
        assert widths[0] <= 375 and all(extra <= 0 for extra in widths[1:]), widths
        for name in ("gauge.md", "pump.md"):
            row = rows.filter(has_text=name)
            for shown in (
                row.locator("td.status .badge"),
                row.get_by_role("button", name=f"Re-ingest {name}"),
                row.get_by_role("button", name=f"Delete {name}"),
            ):
                shown.scroll_into_view_if_needed()
                expect(shown).to_be_in_viewport(ratio=1)
            # Each field is said by its column's name, the header row being out of sight.
            expect(row.locator("td.status")).to_have_attribute("data-label", "Status")
    finally:
        context.close()


def test_the_focus_goes_to_the_next_document_after_a_delete_with_the_keyboard(
    site: Site, context: BrowserContext
) -> None:
    made = [
        site.api("POST", "/documents", files={"file": (name, f"# {name}\n\nA gasket of {name}.\n".encode())})
        for name in ("gasket-a.md", "gasket-b.md")
    ]
    try:
        page = admin_page(site, context)
        rows = page.locator("#documents tbody tr")
        expect(rows.filter(has_text="gasket-b.md")).to_have_count(1)
        after = rows.evaluate_all(
            "(rows, id) => rows[rows.findIndex((r) => r.dataset.id === id) + 1].dataset.id", made[0]["id"]
        )
        page.once("dialog", lambda dialog: dialog.accept())
        rows.filter(has_text="gasket-a.md").get_by_role("button", name="Delete gasket-a.md").focus()
        page.keyboard.press("Enter")
        expect(page.locator("#admin-status")).to_have_text("Deleted gasket-a.md.")
        expect(rows.filter(has_text="gasket-a.md")).to_have_count(0)
        # The button went with its row, and the focus fell to the page's top (the body): it is on the
        # row that took the deleted one's place, where Tab goes on through the table.
        focused = page.locator(":focus")
        expect(focused).to_have_count(1)
        assert focused.evaluate("e => e.closest('tr')?.dataset.id") == after
        # The only document listed deleted: the focus goes to the table's heading.
        name = page.locator("#filters").get_by_label("Name")
        name.fill("gasket")
        name.press("Enter")
        expect(rows).to_have_count(1)
        page.once("dialog", lambda dialog: dialog.accept())
        rows.get_by_role("button", name="Delete gasket-b.md").focus()
        page.keyboard.press("Enter")
        expect(page.locator("#admin-status")).to_have_text("Deleted gasket-b.md.")
        expect(rows).to_have_text(["No documents."])
        expect(page.get_by_role("heading", name="Documents", exact=True)).to_be_focused()
    finally:
        listed = {doc["id"] for doc in site.api("GET", "/documents")["documents"]}
        for doc in made:
            if doc["id"] in listed:
                site.api("DELETE", f"/documents/{doc['id']}")


def test_signing_in_with_the_keyboard_leaves_the_focus_on_the_upload(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    page.goto(site.server.url + "/admin")
    expect(page.get_by_label("API key", exact=True)).to_be_focused()
    page.keyboard.type(site.admin)
    page.keyboard.press("Enter")
    expect(page.locator("#documents tbody tr").filter(has_text="gauge.md")).to_have_count(1)
    # The sign-in form went, and the focus with it to the page's top (the body).
    expect(page.locator("#drop-zone")).to_be_focused()
    reader = site.api("POST", "/keys", json={"role": "reader", "scopes": ["nowhere"], "name": "focus reader"})
    page.get_by_role("button", name="Sign out").click()
    page.keyboard.type(reader["key"])
    page.keyboard.press("Enter")
    # A reader uploads nothing: the documents are what there is to read.
    expect(page.get_by_role("heading", name="Documents", exact=True)).to_be_focused()
