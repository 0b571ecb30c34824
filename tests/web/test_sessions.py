"""The pages over a session, in Debian's chromium, against a real ``citeline serve`` (its own embedded
database, real embedder, extractive answers) whose jobs go to a real Redis with no worker reading it, so
a build the admin page starts stays ``queued`` until it is cancelled: a re-ingest shows its new version
live and can be cancelled; a reload keeps the conversation open; a key revoked mid-session signs the
pages out, saying why; a failed upload is said once, in words; the pages log no console error."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import APIResponse, Browser, BrowserContext, ConsoleMessage, Page, Route, expect

from tests.api.conftest import Server, base_env, create_key, ingest, start_server, stop_server
from tests.conftest import write
from tests.web.test_pages import ask, sign_in

VALVE = (
    "# Relief valve\n\nThe relief valve opens at 12 bar. It is tested every quarter by lifting its lever."
    "\n\nThe drain cock sits under the tank.\n"
)


@dataclass
class Site:
    server: Server
    admin: str
    document_id: str

    def new_key(self, role: str = "reader") -> tuple[str, str]:
        """A key made over the API: (key, id)."""
        with self.server.client(self.admin) as api:
            body: dict[str, object] = {"role": role, "name": f"session {role}"}
            if role == "reader":
                body["all_scopes"] = True
            made = api.post("/keys", json=body).raise_for_status().json()
        return made["key"], made["id"]

    def revoke(self, key_id: str) -> None:
        with self.server.client(self.admin) as api:
            api.delete(f"/keys/{key_id}").raise_for_status()


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory, fresh_data_dir: Callable[[str], Path], redis_server: str
) -> Iterator[Site]:
    data = fresh_data_dir("citeline-sessions-")
    corpus = tmp_path_factory.mktemp("sessions-corpus")
    write(corpus / "valve.md", VALVE)
    ids = ingest(base_env(data), corpus)
    # Builds the API starts go to Redis, and no worker takes them: they stay queued.
    env = base_env(
        data, CITELINE_LLM="extractive", CITELINE_JOB_RUNNER="celery", CITELINE_REDIS_URL=redis_server
    )
    server = start_server(env, tmp_path_factory.mktemp("sessions-log") / "serve.log")
    try:
        admin = create_key(env, "--role", "admin", "--name", "sessions admin")["key"]
        yield Site(server, admin, ids["valve.md"])
    finally:
        stop_server(server)


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    instance = browser.new_context(viewport={"width": 1280, "height": 900})
    yield instance
    instance.close()


def console_errors(page: Page) -> list[str]:
    """The console errors ``page`` logs from now on (a list that fills as they come)."""
    errors: list[str] = []

    def keep(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", keep)
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def test_a_reingest_shows_its_new_version_live_and_can_be_cancelled(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    errors = console_errors(page)
    sign_in(page, site.server.url + "/admin", site.admin)
    row = page.locator("#documents tbody tr").filter(has_text="valve.md")
    expect(row).to_have_attribute("data-status", "completed")
    page.get_by_role("button", name="Re-ingest valve.md").click()
    # The list still shows version 1 (it serves until version 2 is built); the row says version 2 is
    # being built and offers to cancel it rather than to re-ingest again.
    expect(row).to_have_attribute("data-next", "queued")
    expect(row.locator(".next-version")).to_have_text("version 2: queued")
    expect(row).to_have_attribute("data-status", "completed")
    expect(row.get_by_role("button", name="Re-ingest valve.md")).to_have_count(0)
    row.get_by_role("button", name="Cancel valve.md").click()
    expect(page.locator("#admin-status")).to_have_text("Cancelled re-ingesting valve.md (version 2).")
    expect(row.locator(".next-version")).to_have_count(0)
    expect(row.get_by_role("button", name="Re-ingest valve.md")).to_be_visible()
    with site.server.client(site.admin) as api:
        versions = api.get(f"/documents/{site.document_id}/versions").json()["versions"]
    assert [(v["version"], v["status"]) for v in versions] == [(1, "completed"), (2, "failed")], versions
    assert not errors, errors


def test_a_failed_upload_is_said_once(site: Site, context: BrowserContext, tmp_path: Path) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    expect(page.locator("#documents tbody tr").first).to_be_visible()
    page.get_by_label("Files to upload").set_input_files(write(tmp_path / "tool.exe", "MZ"))
    page.get_by_role("button", name="Upload", exact=True).click()
    status = page.locator("#add-status")
    expect(status).to_contain_text("unsupported file type")
    expect(status).to_contain_text("Uploaded none of 1 file. Not uploaded: tool.exe: unsupported file type")
    assert status.inner_text().count("tool.exe") == 1, status.inner_text()


def test_a_reload_keeps_the_conversation_open(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    errors = console_errors(page)
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    ask(page, "At what pressure does the relief valve open?")
    expect(page.locator(".message.assistant").last).to_contain_text("12 bar")
    page.reload()
    # The answer is back, its citations open, and a follow-up continues the same conversation.
    expect(page.locator(".message.assistant")).to_have_count(1)
    expect(page.locator(".message.assistant")).to_contain_text("12 bar")
    expect(page.locator("#conversation-list li.current")).to_have_count(1)
    page.locator(".message.assistant button.cite").first.click()
    expect(page.get_by_role("complementary", name="Citation")).to_contain_text("valve.md")
    ask(page, "How often is it tested?")
    expect(page.locator(".message.assistant")).to_have_count(2)
    expect(page.locator("#conversation-list li")).to_have_count(1)
    # A new conversation is what a reload then shows: none.
    page.get_by_role("button", name="New conversation").click()
    page.reload()
    expect(page.get_by_label("Question")).to_be_focused()
    expect(page.locator(".message")).to_have_count(0)
    assert not errors, errors


def test_a_key_revoked_mid_session_signs_the_pages_out(site: Site, context: BrowserContext) -> None:
    key, key_id = site.new_key("admin")
    chat = context.new_page()
    sign_in(chat, site.server.url + "/", key)
    ask(chat, "At what pressure does the relief valve open?")
    admin = context.new_page()
    sign_in(admin, site.server.url + "/admin", key)
    expect(admin.locator("#documents tbody tr").first).to_be_visible()
    site.revoke(key_id)

    chat.get_by_label("Question").fill("How often is it tested?")
    chat.get_by_role("button", name="Ask").click()
    expect(chat.locator("#sign-in")).to_be_visible()
    expect(chat.locator("#sign-in-status")).to_contain_text("Signed out: API key")
    expect(chat.locator("#sign-in-status")).to_contain_text("revoked (HTTP 401). Sign in again")
    expect(chat.locator("#chat")).to_be_hidden()
    assert chat.evaluate("sessionStorage.getItem('citeline.key')") is None

    # The admin page meets the refusal without a click: it reads the statistics every 5 seconds.
    expect(admin.locator("#sign-in")).to_be_visible(timeout=10_000)
    expect(admin.locator("#sign-in-status")).to_contain_text("revoked (HTTP 401). Sign in again")
    expect(admin.locator("#admin")).to_be_hidden()
    # Signing in again with a good key works as before.
    sign_in(admin, site.server.url + "/admin", site.admin)
    expect(admin.locator("#documents tbody tr").first).to_be_visible()
    with httpx.Client(base_url=site.server.url, timeout=30) as anonymous:
        assert anonymous.get("/keys/me", headers={"Authorization": f"Bearer {key}"}).status_code == 401


def test_escape_closes_a_documents_detail_and_gives_the_focus_back(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/admin", site.admin)
    name = page.locator("#documents tbody tr").filter(has_text="valve.md").locator("button.link")
    name.focus()
    page.keyboard.press("Enter")
    detail = page.locator("#detail")
    expect(detail).to_be_focused()
    expect(page.locator("#chunks tbody")).to_contain_text("12 bar")
    page.keyboard.press("Escape")
    expect(detail).to_be_hidden()
    expect(name).to_be_focused()


def test_a_failed_ask_keeps_the_question_and_says_why(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    question = page.get_by_label("Question")
    asked = "At what pressure does the relief valve open?"
    failures = [
        (
            lambda route: route.fulfill(
                status=500,
                json={"error": {"code": "internal", "message": "internal error", "request_id": "5e1f0c"}},
            ),
            # A server-side failure names its request, which the server's log lines carry.
            "The answer failed: internal error (HTTP 500, request 5e1f0c)",
        ),
        (
            lambda route: route.abort("internetdisconnected"),
            "The answer failed: the server could not be reached",
        ),
    ]
    for failure, words in failures:
        page.route("**/chat/stream", failure)
        question.fill(asked)
        page.get_by_role("button", name="Ask").click()
        expect(page.locator(".message.assistant").last.locator(".error")).to_have_text(words)
        expect(question).to_have_value(asked)
        page.unroute("**/chat/stream")
    # A key refused on asking signs the page out; signed in again, the question is there to send.
    page.route(
        "**/chat/stream",
        lambda route: route.fulfill(status=401, json={"error": {"code": "x", "message": "no"}}),
    )
    question.press("Enter")
    expect(page.locator("#sign-in-status")).to_contain_text("Signed out")
    page.unroute("**/chat/stream")
    page.get_by_label("API key", exact=True).fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(question).to_have_value(asked)
    # Once the server has taken the question, the box is cleared for the next one.
    ask(page, asked)
    expect(page.locator(".message.assistant").last).to_contain_text("12 bar")
    expect(question).to_have_value("")


def test_the_conversation_picked_last_is_shown_whichever_answers_first(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    for question in ("At what pressure does the relief valve open?", "Where is the drain cock?"):
        ask(page, question)
        page.get_by_role("button", name="New conversation").click()
    items = page.locator("#conversation-list li")
    expect(items).to_have_count(2)
    first, second = (items.nth(i).get_attribute("data-id") or "" for i in (0, 1))
    # The conversation picked first answers late, after the one picked next is on screen.
    held: list[Route] = []
    page.route(lambda url: url.endswith(f"/conversations/{second}"), lambda route: held.append(route))
    items.nth(1).get_by_role("button").first.click()
    items.nth(0).get_by_role("button").first.click()
    expect(page.locator(".message.user .message-text")).to_have_text(["Where is the drain cock?"])
    while not held:
        page.wait_for_timeout(50)
    held[0].continue_()
    page.wait_for_timeout(500)  # the late answer arrives, and is not shown over the newer pick
    expect(page.locator(".message.user .message-text")).to_have_text(["Where is the drain cock?"])
    expect(page.locator("#conversation-list li.current")).to_have_attribute("data-id", first)


def test_on_a_slow_network_the_viewer_says_the_page_is_coming(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    ask(page, "At what pressure does the relief valve open?")
    held: list[Route] = []
    page.route("**/pages/*", lambda route: held.append(route))
    page.locator(".message.assistant button.cite").first.click()
    page.get_by_role("button", name="Open at the page").click()
    viewer = page.locator("#viewer")
    # An empty viewer, busy: its placeholder says what is coming.
    before = "box => box.matches(':empty') && getComputedStyle(box, '::before').content"
    expect(viewer).to_have_attribute("aria-busy", "true")
    assert viewer.evaluate(before) == '"Opening the cited page…"'
    while held:
        held.pop().continue_()
    page.unroute("**/pages/*")
    expect(viewer.locator("mark").first).to_be_visible()
    expect(viewer).to_have_attribute("aria-busy", "false")


def test_an_answer_cut_off_says_so_and_gives_the_question_back(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    asked = "At what pressure does the relief valve open?"
    # The connection closes (a proxy's timeout, a server restart) after the server took the question and
    # a few words came: no complete event and no error event.
    cut = (
        'event: start\ndata: {"conversation_id": "0b0e5c1e-0000-4000-8000-000000000000", "turn": 1}\n\n'
        'event: token\ndata: {"text": "The relief valve opens at"}\n\n'
    )
    page.route(
        "**/chat/stream",
        lambda route: route.fulfill(status=200, content_type="text/event-stream", body=cut),
    )
    page.get_by_label("Question").fill(asked)
    page.get_by_role("button", name="Ask").click()
    answer = page.locator(".message.assistant").last
    expect(answer.locator(".error")).to_have_text(
        "The answer was cut off: the connection closed before it was complete. Ask again."
    )
    expect(page.get_by_label("Question")).to_have_value(asked)


def _send_events(client: socket.socket, body: bytes) -> None:
    """Answer the request on ``client`` with an event stream of ``body`` as one chunk, left open."""
    client.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n"
    )


def _forwarded(client: socket.socket, site: Site) -> bytes:
    """Read the page's ask on ``client`` and send it on to the site's server: its whole answer (which the
    server has stored by then)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += client.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    fields = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    named = {name.lower(): value for name, value in fields.items()}
    while len(body) < int(named["content-length"]):
        body += client.recv(65536)
    return httpx.post(
        site.server.url + "/chat/stream",
        content=body,
        headers={"Authorization": named["authorization"], "Content-Type": "application/json"},
        timeout=120,
    ).content


def _streaming_from(listener: socket.socket, context: BrowserContext, site: Site) -> Page:
    """A page signed in with a key of its own, whose answers stream from ``listener`` instead."""
    page = context.new_page()
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    port = listener.getsockname()[1]
    page.route("**/chat/stream", lambda route: route.continue_(url=f"http://127.0.0.1:{port}/chat/stream"))
    return page


def test_an_answer_whose_connection_breaks_says_it_was_cut_off(site: Site, context: BrowserContext) -> None:
    # A server that answers, sends a few words and dies (as citeline serve killed mid-answer does): the
    # response's chunked body ends without its last chunk, and reading it fails in the browser.
    listener = socket.create_server(("127.0.0.1", 0))
    words = (
        b'event: start\ndata: {"conversation_id": "0b0e5c1e-0000-4000-8000-000000000002", "turn": 1}\n\n'
        b'event: token\ndata: {"text": "The relief valve opens at"}\n\n'
    )

    def answer_and_die() -> None:
        client, _ = listener.accept()
        with client:
            client.recv(65536)
            _send_events(client, words)
            time.sleep(0.5)

    dying = threading.Thread(target=answer_and_die, daemon=True)
    dying.start()
    try:
        page = _streaming_from(listener, context, site)
        asked = "At what pressure does the relief valve open?"
        page.get_by_label("Question").fill(asked)
        page.get_by_role("button", name="Ask").click()
        answer = page.locator(".message.assistant").last
        # The server was reached and began; it is not said to be unreachable.
        expect(answer.locator(".error")).to_have_text(
            "The answer was cut off: the connection closed before it was complete. Ask again."
        )
        expect(page.get_by_label("Question")).to_have_value(asked)
    finally:
        dying.join(timeout=10)
        listener.close()


def test_a_failed_asks_reason_is_brought_into_view(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    # A question taller than the page: the reason it failed comes under it.
    asked = "\n".join(f"Line {n} of a long question about the relief valve." for n in range(80))
    page.route(
        "**/chat/stream",
        lambda route: route.fulfill(
            status=413, json={"error": {"code": "too_large", "message": "the question is too long"}}
        ),
    )
    page.get_by_label("Question").fill(asked)
    page.get_by_role("button", name="Ask").click()
    error = page.locator(".message.assistant").last.locator(".error")
    expect(error).to_have_text("The answer failed: the question is too long (HTTP 413)")
    expect(error).to_be_in_viewport(ratio=1)


def test_a_reload_mid_answer_gives_the_question_back_unless_it_was_answered(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    ask(page, "At what pressure does the relief valve open?")
    question = page.get_by_label("Question")
    asked = "How often is the relief valve tested?"
    # Reloaded while the question is on its way: the server never finishes it, so nothing is stored.
    held: list[Route] = []
    page.route("**/chat/stream", lambda route: held.append(route))
    question.fill(asked)
    page.get_by_role("button", name="Ask").click()
    while not held:
        page.wait_for_timeout(50)
    page.reload()
    expect(page.locator(".message.assistant")).to_have_count(1)
    expect(question).to_have_value(asked)
    expect(page.locator("#chat-status")).to_have_text(
        "Your last question was not answered: the page was reloaded before its answer was complete. "
        "Ask it again."
    )
    page.unroute("**/chat/stream")
    # The server finished and stored the answer while the page was still reading it (a slow network):
    # the reload shows that answer, and gives nothing back to ask again. The stream is read whole here,
    # so the server has stored the turn, and never handed to the page, so to it the answer is on its
    # way. (Chromium's network throttling let the whole stream through at once: the page then had the
    # answer before the reload, and this half passed whatever a reload did.)
    finished: list[APIResponse] = []
    page.route("**/chat/stream", lambda route: finished.append(route.fetch()))
    page.get_by_role("button", name="Ask").click()
    while not finished:
        page.wait_for_timeout(50)
    assert "event: complete" in finished[0].text()
    expect(question).to_have_value(asked)  # still on its way: the page has not even read "start"
    page.reload()
    expect(page.locator(".message.assistant")).to_have_count(2)
    expect(page.locator(".message.user").last).to_have_text(f"You{asked}")
    expect(question).to_have_value("")
    expect(page.locator("#chat-status")).not_to_contain_text("not answered")


def test_a_conversations_title_cut_in_the_list_can_be_read_whole(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    asked = "At what pressure does the relief valve open, and how is it tested?"
    ask(page, asked)
    item = page.locator("#conversation-list li button.continue").first
    expect(item).to_have_text(asked)
    # The column cuts the title ("At what pre…"); hovering it shows it whole. Asked until true: the
    # list is drawn again when the server lists the new conversation, and a button measured as it is
    # replaced (detached) measures 0 by 0, which failed a fresh-clone run.
    page.wait_for_function(
        """() => {
          const button = document.querySelector("#conversation-list li button.continue");
          return button !== null && button.isConnected && button.scrollWidth > button.clientWidth;
        }""",
        timeout=10_000,
    )
    expect(item).to_have_attribute("title", asked)


def test_an_answer_comes_into_view_as_it_is_written_and_when_reopened(site: Site, browser: Browser) -> None:
    # A short window: from the third turn on, a new answer starts near the foot of the conversation.
    context = browser.new_context(viewport={"width": 1280, "height": 520})
    try:
        page = context.new_page()
        key, _ = site.new_key()
        sign_in(page, site.server.url + "/", key)
        for question in (
            "At what pressure does the relief valve open?",
            "How often is the relief valve tested?",
            "Where does the drain cock sit?",
            "How is the relief valve tested?",
        ):
            ask(page, question)
            # Its text is read where it is written, not below the fold of the conversation.
            expect(page.locator(".message.assistant").last.locator(".message-text")).to_be_in_viewport(
                ratio=1
            )
        page.reload()
        expect(page.locator(".message.assistant")).to_have_count(4)
        expect(page.locator(".message.assistant").last.locator(".message-text")).to_be_in_viewport(ratio=1)

        # An answer taller than the conversation's view is followed until its question reaches the top,
        # then left for the reader to scroll: its beginning stays on screen.
        long_answer = " ".join(f"Sentence {n} about the relief valve and its lever." for n in range(120))
        stream = (
            'event: start\ndata: {"conversation_id": "0b0e5c1e-0000-4000-8000-000000000001", "turn": 5}\n\n'
            + "".join(
                f"event: token\ndata: {json.dumps({'text': word + ' '})}\n\n" for word in long_answer.split()
            )
            + "event: complete\ndata: "
            + json.dumps(
                {"answer": long_answer, "citations": [], "unsupported": [], "evidence_missing": False}
            )
            + "\n\n"
        )
        page.route(
            "**/chat/stream",
            lambda route: route.fulfill(status=200, content_type="text/event-stream", body=stream),
        )
        ask(page, "Tell me everything about the relief valve.")
        expect(page.locator(".message.user").last).to_be_in_viewport(ratio=1)
        expect(page.locator(".message.assistant").last.locator("h3")).to_be_in_viewport(ratio=1)
    finally:
        context.close()


def test_the_chat_fits_the_window_with_its_ask_box_whole(site: Site, browser: Browser) -> None:
    for width, height in ((1280, 900), (1024, 600)):
        context = browser.new_context(viewport={"width": width, "height": height})
        try:
            page = context.new_page()
            key, _ = site.new_key()
            sign_in(page, site.server.url + "/", key)
            ask(page, "At what pressure does the relief valve open?")
            # The conversation scrolls in its own box; the page itself has nothing to scroll, and the
            # ask box and its buttons are whole at the foot of the window.
            assert page.evaluate("document.documentElement.scrollHeight") <= height, (width, height)
            expect(page.get_by_role("button", name="Stop")).to_be_in_viewport(ratio=1)
            expect(page.get_by_label("Question")).to_be_in_viewport(ratio=1)
        finally:
            context.close()


def test_the_conversation_list_reaches_past_the_apis_first_fifty(site: Site, context: BrowserContext) -> None:
    key, _ = site.new_key()
    with site.server.client(key) as api:
        for n in range(52):
            body = {"question": f"Where does the drain cock sit? ({n})"}
            with api.stream("POST", "/chat/stream", json=body) as answer:
                answer.read()
    page = context.new_page()
    sign_in(page, site.server.url + "/", key)
    # The API lists 50 unless asked for more; the oldest two were out of the page's reach.
    expect(page.locator("#conversation-list li button.continue")).to_have_count(52, timeout=20_000)
    oldest = page.locator("#conversation-list li button.continue").last
    expect(oldest).to_have_text("Where does the drain cock sit? (0)")
    oldest.click()
    expect(page.locator(".message.user")).to_have_text(["YouWhere does the drain cock sit? (0)"])


def test_a_server_out_of_reach_is_said_so_and_a_fault_in_the_page_is_not(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    errors = console_errors(page)
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    asked = "At what pressure does the relief valve open?"
    # Nothing listens where the question goes (a server stopped): fetch itself fails.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    page.route("**/chat/stream", lambda route: route.continue_(url=f"http://127.0.0.1:{port}/chat/stream"))
    page.get_by_label("Question").fill(asked)
    page.get_by_role("button", name="Ask").click()
    error = page.locator(".message.assistant").last.locator(".error")
    expect(error).to_have_text("The answer failed: the server could not be reached")
    page.unroute("**/chat/stream")
    assert not any("TypeError" in text for text in errors), errors  # the browser logs the refusal only

    # The server answers, and the page's own code trips on what came (an evidence event without its
    # passages: reading their length throws a TypeError in the page). That is no server out of reach.
    tripping = (
        'event: start\ndata: {"conversation_id": "0b0e5c1e-0000-4000-8000-000000000003", "turn": 1}\n\n'
        "event: evidence\ndata: {}\n\n"
    )
    page.route(
        "**/chat/stream",
        lambda route: route.fulfill(status=200, content_type="text/event-stream", body=tripping),
    )
    page.get_by_role("button", name="Ask").click()
    error = page.locator(".message.assistant").last.locator(".error")
    expect(error).to_contain_text("The answer failed: an error in this page (TypeError: ")
    expect(error).not_to_contain_text("could not be reached")
    expect(page.get_by_label("Question")).to_have_value(asked)
    assert any("TypeError" in text for text in errors), errors


def test_a_cited_page_out_of_reach_says_the_server_could_not_be_reached(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    ask(page, "At what pressure does the relief valve open?")
    page.locator(".message.assistant button.cite").first.click()
    # The network goes as the page is opened: its text cannot be read.
    page.route("**/pages/*", lambda route: route.abort("internetdisconnected"))
    page.get_by_role("button", name="Open at the page").click()
    expect(page.locator("#viewer")).to_have_text(
        "Could not open the cited page: the server could not be reached."
    )


def test_asking_and_stopping_with_the_keyboard_keeps_the_focus_on_the_form(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    held: list[Route] = []
    page.route("**/chat/stream", lambda route: held.append(route))
    page.get_by_label("Question").fill("At what pressure does the relief valve open?")
    page.keyboard.press("Tab")  # to Ask
    expect(page.get_by_role("button", name="Ask")).to_be_focused()
    page.keyboard.press("Enter")
    while not held:
        page.wait_for_timeout(50)
    # Ask is disabled while the answer comes: the focus is on Stop, where Enter stops it.
    expect(page.get_by_role("button", name="Stop")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".message.assistant .stopped")).to_have_text("Stopped.")
    # Stop is disabled once stopped: the focus is back in the question box, not lost to the page.
    expect(page.get_by_label("Question")).to_be_focused()


def test_an_event_that_is_not_json_is_said_as_the_servers_fault(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    errors = console_errors(page)
    key, _ = site.new_key()
    sign_in(page, site.server.url + "/", key)
    garbled = (
        'event: start\ndata: {"conversation_id": "0b0e5c1e-0000-4000-8000-000000000004", "turn": 1}\n\n'
        "event: token\ndata: {The relief valve\n\n"
    )
    page.route(
        "**/chat/stream",
        lambda route: route.fulfill(status=200, content_type="text/event-stream", body=garbled),
    )
    asked = "At what pressure does the relief valve open?"
    page.get_by_label("Question").fill(asked)
    page.get_by_role("button", name="Ask").click()
    expect(page.locator(".message.assistant").last.locator(".error")).to_have_text(
        "The answer failed: the server sent a token event that is not JSON"
    )
    expect(page.get_by_label("Question")).to_have_value(asked)
    assert not errors, errors


def test_an_answer_stopped_after_the_server_stored_it_is_shown_whole(
    site: Site, context: BrowserContext
) -> None:
    # A slow network between the page and the server, as a proxy: it takes the server's whole answer
    # (the server has finished and stored it) and passes the page all of it but its last event.
    listener = socket.create_server(("127.0.0.1", 0))
    stopped = threading.Event()

    def pass_all_but_the_end() -> None:
        client, _ = listener.accept()
        with client:
            answer = _forwarded(client, site)
            kept = answer[: answer.rindex(b"event: complete")]
            _send_events(client, kept)
            stopped.wait(30)

    proxy = threading.Thread(target=pass_all_but_the_end, daemon=True)
    proxy.start()
    try:
        page = _streaming_from(listener, context, site)
        page.get_by_label("Question").fill("At what pressure does the relief valve open?")
        page.get_by_role("button", name="Ask").click()
        expect(page.locator(".message.assistant .message-text")).to_contain_text("12 bar")
        page.get_by_role("button", name="Stop").click()
        stopped.set()
        # Stopped too late: the answer the conversation holds is shown, not "Stopped." over part of it.
        expect(page.locator("#chat-status")).to_have_text(
            "Stopped too late: the server had finished and stored the answer, shown here whole."
        )
        answer = page.locator(".message.assistant")
        expect(answer).to_have_count(1)
        expect(answer).to_contain_text("12 bar")
        expect(answer.locator(".stopped")).to_have_count(0)
        expect(answer.locator(".cite").first).to_have_attribute("title", re.compile("valve.md"))
    finally:
        stopped.set()
        proxy.join(timeout=10)
        listener.close()


def test_a_new_conversation_is_listed_as_soon_as_the_server_has_started_it(
    site: Site, context: BrowserContext
) -> None:
    key, _ = site.new_key()
    first = "Where does the drain cock sit?"
    with site.server.client(key) as api, api.stream("POST", "/chat/stream", json={"question": first}) as done:
        done.read()
    # A slow network between the page and the server: the page is passed the answer's start event (its
    # conversation id), and the rest only once the test lets it go.
    listener = socket.create_server(("127.0.0.1", 0))
    started: dict[str, str] = {}
    go = threading.Event()

    def pass_the_start_then_hold() -> None:
        client, _ = listener.accept()
        with client:
            answer = _forwarded(client, site).replace(b"\r\n", b"\n")
            start_end = answer.index(b"\n\n", answer.index(b"event: start")) + 2
            started.update(json.loads(answer[:start_end].split(b"data:", 1)[1]))
            _send_events(client, answer[:start_end])
            go.wait(60)
            rest = answer[start_end:]
            client.sendall(f"{len(rest):x}\r\n".encode() + rest + b"\r\n0\r\n\r\n")

    proxy = threading.Thread(target=pass_the_start_then_hold, daemon=True)
    proxy.start()
    try:
        page = context.new_page()
        sign_in(page, site.server.url + "/", key)
        items = page.locator("#conversation-list li")
        expect(items.locator("button.continue")).to_have_text([first])
        port = listener.getsockname()[1]
        page.route(
            "**/chat/stream", lambda route: route.continue_(url=f"http://127.0.0.1:{port}/chat/stream")
        )
        # Longer than a title: the server lists it cut (at a word, with "…"), the page whole meanwhile.
        asked = (
            "At what pressure does the relief valve open, and how often is it tested by lifting its lever?"
        )
        page.get_by_label("Question").fill(asked)
        page.get_by_role("button", name="Ask").click()
        wait_for = time.monotonic() + 60
        while not started and time.monotonic() < wait_for:
            page.wait_for_timeout(50)
        assert started, "the server never started the answer"

        # Listed while its answer is on its way, first, titled by its question, as the one on screen.
        expect(items.locator("button.continue")).to_have_text([asked, first])
        expect(items.first).to_have_attribute("data-id", started["conversation_id"])
        expect(items.first).to_have_class("current")
        expect(page.locator(".message.assistant")).to_have_attribute("aria-busy", "true")
        # The list read again meanwhile (another conversation deleted) keeps it, once: as the server
        # lists it if the server has stored its turn by then (this proxy waits for the whole answer).
        page.once("dialog", lambda dialog: dialog.accept())
        items.nth(1).get_by_role("button", name=f"Delete the conversation {first}").click()
        expect(items).to_have_count(1)
        expect(items.first).to_have_attribute("data-id", started["conversation_id"])

        go.set()
        expect(page.locator(".message.assistant")).not_to_have_attribute("aria-busy", "true", timeout=60_000)
        # Its answer complete, the list is the server's: one entry, with the server's title.
        with site.server.client(key) as api:
            listed = api.get("/conversations").json()["conversations"]
        assert [c["id"] for c in listed] == [started["conversation_id"]], listed
        assert listed[0]["title"] != asked, listed
        expect(items.locator("button.continue")).to_have_text([c["title"] for c in listed])
        assert items.evaluate_all("nodes => nodes.map(n => n.dataset.id)") == [c["id"] for c in listed]
    finally:
        go.set()
        proxy.join(timeout=10)
        listener.close()


def test_a_question_stopped_after_the_server_took_it_is_given_back(
    site: Site, context: BrowserContext
) -> None:
    # The server took the question (its start event came, which empties the box) and a few words
    # came; then the reader stops it. The server stores no turn it did not finish.
    listener = socket.create_server(("127.0.0.1", 0))
    words = (
        b'event: start\ndata: {"conversation_id": "0b0e5c1e-0000-4000-8000-000000000005", "turn": 1}\n\n'
        b'event: token\ndata: {"text": "The relief valve opens at"}\n\n'
    )
    stopped = threading.Event()

    def answer_and_hold() -> None:
        client, _ = listener.accept()
        with client:
            client.recv(65536)
            _send_events(client, words)
            stopped.wait(30)

    server = threading.Thread(target=answer_and_hold, daemon=True)
    server.start()
    try:
        page = _streaming_from(listener, context, site)
        asked = "At what pressure does the relief valve open?"
        box = page.get_by_label("Question")
        box.fill(asked)
        page.get_by_role("button", name="Ask").click()
        expect(page.locator(".message.assistant .message-text")).to_contain_text("opens at")
        expect(box).to_have_value("")
        page.get_by_role("button", name="Stop").click()
        expect(page.locator(".message.assistant .stopped")).to_have_text("Stopped.")
        # Before, the box stayed empty: the question was lost with the turn the server did not store.
        expect(box).to_have_value(asked)
    finally:
        stopped.set()
        server.join(timeout=10)
        listener.close()
