"""Conversations reopened in the chat page, in Debian's chromium, against a real ``citeline serve``
(its own embedded database, real embedder, extractive answers): their citations open exactly as live
ones do, and a citation keeps opening the text and page it cited after its document is re-ingested."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, Route, expect

from tests.api.conftest import Server, base_env, cli, create_key, ingest, start_server, stop_server
from tests.conftest import write
from tests.web.conftest import fold
from tests.web.test_pages import ask, completed_answer, marked_text, sign_in

OLD = (
    "# Relief valve\n\nThe relief valve opens at 8 bar and closes again at 7 bar. Check the relief valve "
    "every month by lifting its lever.\n\nThe drain cock sits under the tank.\n"
)
NEW = (
    "# Relief valve\n\nSince the 2026 revision the relief valve opens at 9 bar. Replace it every two "
    "years.\n\nThe drain cock sits under the tank.\n"
)
QUESTION = "At what pressure does the relief valve open?"
FOLLOW_UP = "How often is it checked?"


@dataclass
class Site:
    server: Server
    corpus: Path
    key: str
    #: The conversation asked over the API before any browser test: its id and ``complete`` payload.
    conversation_id: str
    answer: dict[str, Any]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, fresh_data_dir: Callable[[str], Path]) -> Iterator[Site]:
    env = base_env(fresh_data_dir("citeline-conversations-"), CITELINE_LLM="extractive")
    corpus = tmp_path_factory.mktemp("conversations-corpus")
    write(corpus / "valve.md", OLD)
    ingest(env, corpus)
    server = start_server(env, tmp_path_factory.mktemp("conversations-log") / "serve.log")
    try:
        key = create_key(env, "--role", "admin", "--name", "conversations")["key"]
        with (
            httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as api,
            api.stream("POST", "/chat/stream", json={"question": QUESTION}) as response,
        ):
            answer = completed_answer(response.read().decode())
        assert answer["citations"], answer
        yield Site(server, corpus, key, answer["conversation_id"], answer)
    finally:
        stop_server(server)


@pytest.fixture
def context(browser: Any) -> Iterator[BrowserContext]:
    instance: BrowserContext = browser.new_context(viewport={"width": 1280, "height": 900})
    yield instance
    instance.close()


def reopen(page: Page, site: Site) -> None:
    """Sign in and open the site's conversation from the list."""
    sign_in(page, site.server.url + "/", site.key)
    page.locator(f'#conversation-list li[data-id="{site.conversation_id}"] button.continue').click()
    expect(page.locator(".message.assistant")).to_have_count(1)


def citation_buttons(page: Page) -> list[dict[str, str]]:
    shown: list[dict[str, str]] = (
        page.locator(".message.assistant")
        .last.locator(".cite")
        .evaluate_all(
            "nodes => nodes.map(n => ({tag: n.tagName, cls: n.className, "
            "label: n.getAttribute('aria-label') ?? '', text: n.textContent}))"
        )
    )
    return shown


def open_citation(page: Page, number: int) -> None:
    page.locator(f'.message.assistant .cite[data-number="{number}"]').first.click()
    expect(page.get_by_role("complementary", name="Citation")).to_contain_text(f"Citation [{number}]")


def test_a_reopened_conversation_shows_its_citations_as_they_were_shown_live(
    site: Site, context: BrowserContext
) -> None:
    live = context.new_page()
    sign_in(live, site.server.url + "/", site.key)
    with live.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
        ask(live, QUESTION)
    answer = completed_answer(streamed.value.text())
    shown_live = citation_buttons(live)
    assert shown_live and all(b["tag"] == "BUTTON" for b in shown_live), shown_live

    again = context.new_page()
    sign_in(again, site.server.url + "/", site.key)
    again.locator(f'#conversation-list li[data-id="{answer["conversation_id"]}"] button.continue').click()
    expect(again.locator(".message.assistant")).to_have_count(1)
    assert citation_buttons(again) == shown_live
    assert again.locator(".message.assistant").inner_text() == live.locator(".message.assistant").inner_text()

    cited = answer["citations"][0]
    open_citation(again, cited["number"])
    panel = again.get_by_role("complementary", name="Citation")
    expect(panel).to_contain_text(f"{cited['score']:.2f}")
    expect(panel.locator("dd").filter(has_text="valve.md")).to_have_count(1)
    expect(again.locator("#citation-version")).to_be_hidden()
    again.get_by_role("button", name="Open at the page").click()
    expect(again.locator("#viewer mark.citeline-mark").first).to_be_visible(timeout=30_000)
    assert fold(marked_text(again)) == fold(cited["excerpt"])


def test_a_citation_keeps_opening_what_it_cited_after_a_reingest(site: Site, context: BrowserContext) -> None:
    cited = site.answer["citations"][0]
    # A page left open across the re-ingest: its citation panel must learn of the new version too.
    open_before = context.new_page()
    reopen(open_before, site)
    open_citation(open_before, cited["number"])
    expect(open_before.locator("#citation-version")).to_be_hidden()
    write(site.corpus / "valve.md", NEW)
    done = cli(site.server.env, "ingest", str(site.corpus), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["outcome"] == "updated", done.stdout

    # The links the answer gave: the original and the page text of the version cited, not the new one.
    with httpx.Client(
        base_url=site.server.url, headers={"Authorization": f"Bearer {site.key}"}, timeout=60
    ) as api:
        assert cited["download_url"].startswith(f"/documents/{cited['document_id']}/file?version=1#page=")
        assert api.get(cited["download_url"].split("#")[0]).text == OLD
        assert api.get(f"/documents/{cited['document_id']}/file").text == NEW
        old_page = api.get(f"/documents/{cited['document_id']}/pages/{cited['page']}", params={"version": 1})
        page_text = old_page.json()["text"]
        assert page_text[cited["excerpt_start"] : cited["excerpt_end"]] == cited["excerpt"]
        stored = api.get(f"/conversations/{site.conversation_id}").json()["messages"][1]["citations"][0]
        assert (stored["version"], stored["superseded"], stored["current_version"]) == (1, True, 2)

    # Past the few seconds a current version is reused for, the open page asks again.
    open_before.wait_for_timeout(5_500)
    open_citation(open_before, cited["number"])
    expect(open_before.locator("#citation-version")).to_contain_text("newer version (2)")

    page = context.new_page()
    reopen(page, site)
    open_citation(page, cited["number"])
    expect(page.locator("#citation-version")).to_be_visible()
    expect(page.locator("#citation-version")).to_contain_text("newer version (2)")
    page.get_by_role("button", name="Open at the page").click()
    expect(page.locator("#viewer mark.citeline-mark").first).to_be_visible(timeout=30_000)
    assert fold(marked_text(page)) == fold(cited["excerpt"])
    page.get_by_role("button", name="Open the current version").click()
    expect(page.locator("#viewer")).to_contain_text("Since the 2026 revision", timeout=30_000)


def test_a_table_rows_citation_reads_under_its_headers_and_opens_on_the_row_itself(
    site: Site, context: BrowserContext, tmp_path: Path
) -> None:
    write(
        tmp_path / "devices.md",
        "# Device table\n\n| Model | Max pressure (bar) | Flow (L/min) |\n| --- | --- | --- |\n"
        "| HX-2000 | 10 | 40 |\n| HX-4000 | 16 | 60 |\n| HX-6000 | 25 | 90 |\n",
    )
    done = cli(site.server.env, "ingest", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    page = context.new_page()
    sign_in(page, site.server.url + "/", site.key)
    with page.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
        ask(page, "What is the max pressure of the HX-4000?")
    answer = completed_answer(streamed.value.text())
    [cited] = [c for c in answer["citations"] if c["document_name"] == "devices.md"]
    assert cited["excerpt"] == "Model: HX-4000; Max pressure (bar): 16; Flow (L/min): 60."

    open_citation(page, cited["number"])
    page.get_by_role("button", name="Open at the page").click()
    expect(page.locator("#viewer mark.citeline-mark").first).to_be_visible(timeout=30_000)
    # The row as stored is marked, not the headers' words the readable excerpt borrowed.
    assert fold(marked_text(page)) == fold("| HX-4000 | 16 | 60 |")


def test_a_follow_ups_search_is_said_with_the_answer_it_belongs_to_live_and_reopened(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/", site.key)
    ask(page, QUESTION)
    with page.expect_response(lambda r: r.url.endswith("/chat/stream")) as streamed:
        ask(page, "And how often is it checked?")
    query = next(
        json.loads(block.split("data:", 1)[1])["query"]
        for block in streamed.value.text().replace("\r\n", "\n").split("\n\n")
        if block.startswith("event: rewrite")
    )
    assert query != "And how often is it checked?", query  # the follow-up was searched rewritten
    said = f"Searched for: {query}"
    # The search is said inside the follow-up's answer, under its heading and above its text: above
    # the heading it read as a note on the question before.
    answer = page.locator(".message.assistant").last
    expect(answer.locator(".rewrite")).to_have_text(said)
    assert answer.evaluate("a => [...a.children].map(c => c.className || c.tagName)")[:3] == [
        "H3",
        "rewrite",
        "message-text",
    ]
    expect(page.locator(".message.assistant").first.locator(".rewrite")).to_have_count(0)
    live = answer.inner_text()

    # Reopened from the list, the follow-up's answer says its search as it did live.
    again = context.new_page()
    sign_in(again, site.server.url + "/", site.key)
    conversation_id = page.evaluate("sessionStorage.getItem('citeline.conversation')")
    again.locator(f'#conversation-list li[data-id="{conversation_id}"] button.continue').click()
    expect(again.locator(".message.assistant")).to_have_count(2)
    expect(again.locator(".message.assistant").last.locator(".rewrite")).to_have_text(said)
    expect(again.locator(".message.assistant").first.locator(".rewrite")).to_have_count(0)
    assert again.locator(".message.assistant").last.inner_text() == live


def test_each_conversation_has_its_own_answer_on_its_way_and_stop_stops_only_the_one_on_screen(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    sign_in(page, site.server.url + "/", site.key)
    ask(page, QUESTION)
    first = page.evaluate("sessionStorage.getItem('citeline.conversation')")
    question, ask_button, stop = (
        page.get_by_label("Question"),
        page.get_by_role("button", name="Ask"),
        page.get_by_role("button", name="Stop"),
    )
    # A follow-up in the first conversation, its answer on its way (held) when a new one is begun.
    held: list[Route] = []
    page.route("**/chat/stream", lambda route: held.append(route))
    question.fill(FOLLOW_UP)
    ask_button.click()
    while not held:
        page.wait_for_timeout(50)
    expect(stop).to_be_enabled()
    page.get_by_role("button", name="New conversation").click()

    # The new conversation is ready to ask: nothing of the first one's answer holds it, nor sits in its box.
    expect(page.locator(".message")).to_have_count(0)
    expect(ask_button).to_be_enabled()
    expect(stop).to_be_disabled()
    expect(question).to_have_value("")
    expect(page.locator("#chat-status")).to_be_hidden()  # "Searching the documents…" is not this one's
    question.fill("Where is the drain cock?")
    ask_button.click()
    while len(held) < 2:
        page.wait_for_timeout(50)
    # Stop stops this conversation's answer, and says so here.
    stop.click()
    expect(page.locator(".message.assistant .stopped")).to_have_text("Stopped.")
    expect(ask_button).to_be_enabled()

    # Back in the first conversation, its follow-up is still on its way, and Stop is its own again.
    page.locator(f'#conversation-list li[data-id="{first}"] button.continue').click()
    expect(page.locator(".message.user")).to_have_text([f"You{QUESTION}", f"You{FOLLOW_UP}"])
    expect(page.locator(".message.assistant").last).to_have_attribute("aria-busy", "true")
    expect(stop).to_be_enabled()
    expect(ask_button).to_be_disabled()
    # Its answer was never stopped: it comes, is written where it belongs, and is stored.
    held[0].fulfill(response=held[0].fetch())
    page.unroute("**/chat/stream")
    answer = page.locator(".message.assistant").last
    expect(answer).not_to_have_attribute("aria-busy", "true", timeout=60_000)
    expect(answer.locator(".error, .stopped")).to_have_count(0)
    expect(answer.locator(".message-text")).not_to_be_empty()
    expect(ask_button).to_be_enabled()
    expect(stop).to_be_disabled()
    with httpx.Client(
        base_url=site.server.url, headers={"Authorization": f"Bearer {site.key}"}, timeout=60
    ) as api:
        stored = api.get(f"/conversations/{first}").json()["messages"]
    assert [m["content"] for m in stored if m["role"] == "user"] == [QUESTION, FOLLOW_UP], stored
    assert answer.locator(".message-text").inner_text() == stored[-1]["content"]


def _asked_then_follow_up_held(page: Page, site: Site) -> tuple[str, list[Route]]:
    """Sign in, ask QUESTION and wait for its answer, then ask FOLLOW_UP with its answer held on its way
    (the request kept, never answered): the conversation's id and the held request."""
    sign_in(page, site.server.url + "/", site.key)
    ask(page, QUESTION)
    first: str = page.evaluate("sessionStorage.getItem('citeline.conversation')")
    held: list[Route] = []
    page.route("**/chat/stream", lambda route: held.append(route))
    page.get_by_label("Question").fill(FOLLOW_UP)
    page.get_by_role("button", name="Ask").click()
    while not held:
        page.wait_for_timeout(50)
    return first, held


def test_an_answer_failing_in_a_conversation_left_is_said_and_its_question_given_back_there(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    first, held = _asked_then_follow_up_held(page, site)
    question = page.get_by_label("Question")
    page.get_by_role("button", name="New conversation").click()
    # The follow-up fails while another conversation is on screen.
    failure = {"error": {"code": "internal", "message": "internal error", "request_id": "5e1f0c"}}
    held[0].fulfill(status=500, json=failure)
    page.unroute("**/chat/stream")
    why = "The answer failed: internal error (HTTP 500, request 5e1f0c)"
    expect(page.locator("#chat-status")).to_have_text(
        f'Not answered in a conversation you left: "{FOLLOW_UP}": {why}'
    )
    expect(page.locator(".message")).to_have_count(0)
    expect(question).to_have_value("")

    # Back in its conversation, the question is there with why it was not answered, and in its box.
    page.locator(f'#conversation-list li[data-id="{first}"] button.continue').click()
    expect(page.locator(".message.user")).to_have_text([f"You{QUESTION}", f"You{FOLLOW_UP}"])
    expect(page.locator(".message.assistant").last.locator(".error")).to_have_text(why)
    expect(question).to_have_value(FOLLOW_UP)
    expect(page.get_by_role("button", name="Ask")).to_be_enabled()


def test_deleting_a_conversation_stops_its_answer_on_its_way(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    failed: list[str] = []
    page.on("requestfailed", lambda request: failed.append(request.url))
    first, held = _asked_then_follow_up_held(page, site)
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f'#conversation-list li[data-id="{first}"] button.delete').click()
    expect(page.locator(f'#conversation-list li[data-id="{first}"]')).to_have_count(0)
    expect(page.locator(".message")).to_have_count(0)
    expect(page.get_by_role("button", name="Ask")).to_be_enabled()
    # The follow-up's request is given up by the page; one left to go on reaches the server, which has
    # no conversation to answer in.
    for _ in range(50):
        if failed:
            break
        page.wait_for_timeout(100)
    else:
        held[0].fulfill(response=held[0].fetch())
    page.unroute("**/chat/stream")
    page.wait_for_timeout(500)
    expect(page.locator("#chat-status")).to_be_hidden()
    assert [url for url in failed if url.endswith("/chat/stream")], failed


def test_a_reload_gives_back_a_question_left_on_its_way_in_another_conversation_when_it_is_opened(
    site: Site, context: BrowserContext
) -> None:
    page = context.new_page()
    first, _ = _asked_then_follow_up_held(page, site)
    question = page.get_by_label("Question")
    page.get_by_role("button", name="New conversation").click()
    # The reload stops the follow-up's answer (the server stores no turn it did not finish).
    page.reload()
    page.unroute("**/chat/stream")
    expect(page.locator(f'#conversation-list li[data-id="{first}"]')).to_have_count(1)
    expect(question).to_have_value("")  # not given back here, where Ask would ask it
    page.locator(f'#conversation-list li[data-id="{first}"] button.continue').click()
    expect(page.locator(".message.user")).to_have_text([f"You{QUESTION}", f"You{FOLLOW_UP}"])
    expect(page.locator(".message.assistant").last.locator(".error")).to_have_text(
        "Not answered: the page was reloaded before its answer was complete. Ask it again."
    )
    expect(question).to_have_value(FOLLOW_UP)
    # Asked again, it is answered in its own conversation.
    with page.expect_request("**/chat/stream") as asked:
        page.get_by_role("button", name="Ask").click()
    assert json.loads(asked.value.post_data or "{}")["conversation_id"] == first
    expect(page.locator(".message.assistant").last).not_to_have_attribute("aria-busy", "true", timeout=60_000)
