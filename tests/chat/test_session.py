"""A conversation end to end (extractive answers, no model): rewrite, search, history, answer, store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from citeline.access import Access
from citeline.answer import EVIDENCE_MISSING, CitationNumbering, Complete, Event, Start
from citeline.answer.llm import GenerationOptions, get_llm
from citeline.chat import store
from citeline.chat.events import ChatEvent, TurnStart
from citeline.chat.rewrite import Rewrite
from citeline.chat.session import ChatSession, conversations, delete_conversation
from citeline.engine import Citeline
from citeline.errors import InvalidRequestError, NotFoundError
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from tests.answer.conftest import ScriptedLLM
from tests.conftest import write

MANUAL = {
    "priming.md": (
        "# Priming\n\nPrime the centrifugal pump before first use: fill the casing with clean water through "
        "the priming plug until water flows from the vent. A pump that runs dry damages its mechanical seal "
        "within seconds.\n"
    ),
    "service.md": (
        "# Service intervals\n\nService the centrifugal pump every 500 operating hours: grease the motor "
        "bearings, check the mechanical seal for drips and clean the suction strainer.\n"
    ),
    "frost.md": (
        "# Frost\n\nBefore winter, drain the pump casing and the volute through the drain plug so that "
        "frost cannot crack them.\n"
    ),
    "bread.md": "# Bread\n\nKnead the dough for ten minutes until it is smooth, then let it rise.\n",
}


@pytest.fixture
def manual(cl: Citeline, tmp_path: Path) -> Citeline:
    for name, text in MANUAL.items():
        write(tmp_path / name, text)
    cl.ingest([tmp_path])
    return cl


def conversation_over(
    cl: Citeline, tmp_path: Path, pages: dict[str, str], persona: str = "general"
) -> ChatSession:
    """A new conversation (extractive answers) over ``pages`` (file name -> text), ingested into ``cl``."""
    for name, text in pages.items():
        write(tmp_path / name, text)
    cl.ingest([tmp_path])
    return ChatSession.start(cl, llm=None, persona=persona)


def ask(session: ChatSession, question: str, filters: Filters | None = None) -> list[Event]:
    """The answer's events of one turn, after checking the turn's own first event."""

    async def run() -> list[ChatEvent]:
        return [event async for event in session.ask(question, filters=filters)]

    turn, *events = asyncio.run(run())
    assert isinstance(turn, TurnStart) and turn.conversation_id == session.id, turn
    assert turn.question == question.strip() and turn.rewrite == session.last_rewrite
    assert all(not isinstance(e, TurnStart) for e in events)
    return events  # type: ignore[return-value]


def complete(events: list[Event]) -> Complete:
    last = events[-1]
    assert isinstance(last, Complete), last
    return last


def test_a_follow_up_is_searched_with_the_previous_topic_and_stored(manual: Citeline) -> None:
    session = ChatSession.start(manual, llm=None, persona="repair")
    first = complete(ask(session, "How do I prime the centrifugal pump?"))
    assert first.provider == "extractive"
    assert first.citations
    assert session.last_rewrite == Rewrite("How do I prime the centrifugal pump?", "unchanged")

    events = ask(session, "How often should it be serviced?")
    rewritten = session.last_rewrite
    assert rewritten is not None
    assert rewritten.method == "heuristic"
    assert "centrifugal pump" in rewritten.query
    start = events[0]
    assert isinstance(start, Start)
    assert start.question == rewritten.query
    assert "service.md" in {p.hit.document_name for p in start.passages}
    second = complete(events)

    stored = session.messages()
    assert [(m.turn, m.role) for m in stored] == [
        (1, "user"),
        (1, "assistant"),
        (2, "user"),
        (2, "assistant"),
    ]
    assert stored[2].content == "How often should it be serviced?"
    assert stored[2].standalone_query == rewritten.query
    assert stored[3].content == second.answer
    assert set(stored[3].cited_chunk_ids) == {c.chunk_id for c in second.citations}
    assert stored[3].provider == "extractive"
    assert session.conversation.persona == "repair"
    assert session.conversation.title == "How do I prime the centrifugal pump?"
    assert [c.id for c in conversations(manual)] == [session.id]


def test_a_second_question_naming_its_own_subject_is_searched_as_asked(cl: Citeline, tmp_path: Path) -> None:
    pages = {
        "scopes.md": "# Scopes\n\nEvery document carries the scopes of the care journey it belongs to, and a "
        "search only returns documents whose scopes the caller may read.\n",
        "storage.md": "# Storage\n\nciteline stores its data in PostgreSQL: documents, chunks and their "
        "embeddings live in tables, and the original files in the data directory.\n",
    }
    session = conversation_over(cl, tmp_path, pages)
    complete(ask(session, "How are documents scoped to a care journey?"))

    # It was searched as "How does citeline store its data? (documents scoped care journey)".
    events = ask(session, "How does citeline store its data?")
    assert session.last_rewrite == Rewrite("How does citeline store its data?", "unchanged")
    start = events[0]
    assert isinstance(start, Start) and start.question == "How does citeline store its data?"
    assert start.passages[0].hit.document_name == "storage.md"

    # A question that names nothing of its own still borrows the conversation's topic.
    complete(events)
    ask(session, "And how is it stored?")
    rewritten = session.last_rewrite
    assert rewritten is not None and rewritten.method == "heuristic"
    assert "citeline" in rewritten.query


def test_a_follow_ups_cited_chunks_are_scored_against_the_vector_its_search_embedded(
    manual: Citeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunks cited earlier are scored against the query vector the turn's search embedded (the
    served model's), not a second embedding of the same query."""
    session = ChatSession.start(manual, llm=None)
    complete(ask(session, "How do I prime the centrifugal pump?"))
    history = session.history()
    assert history  # the first turn cited chunks, so the lookup below runs
    embedder: Any = manual.query_embedder
    embedded: list[str] = []
    real_query, real_waited, real_embed = (
        type(embedder).embed_query,
        type(embedder).embed_waited,
        type(embedder).embed,
    )

    def spy_query(self: object, text: str, *, threads: int) -> object:
        embedded.append(text)
        return real_query(self, text, threads=threads)

    def spy_waited(self: object, texts: list[str], *, threads: int) -> object:
        embedded.extend(texts)
        return real_waited(self, texts, threads=threads)

    def spy_embed(self: object, texts: list[str]) -> object:
        embedded.extend(texts)
        return real_embed(self, texts)

    monkeypatch.setattr(type(embedder), "embed_query", spy_query)
    monkeypatch.setattr(type(embedder), "embed_waited", spy_waited)
    monkeypatch.setattr(type(embedder), "embed", spy_embed)
    query = "How often should the centrifugal pump be serviced?"
    evidence = session.evidence(query, history, Filters())
    assert embedded == [query]
    assert "priming.md" in {h.document_name for h in evidence}


def test_citation_numbers_run_across_turns_and_processes(manual: Citeline) -> None:
    session = ChatSession.start(manual, llm=None)
    turns = [
        complete(ask(session, "How do I prime the centrifugal pump?")),
        complete(ask(session, "What about its mechanical seal?")),
    ]
    # Another process (a fresh session object) continues the same conversation.
    again = ChatSession.resume(manual, str(session.id), llm=None)
    turns.append(complete(ask(again, "How do I drain the pump casing before winter?")))

    seen: dict[int, int] = {}
    for turn in turns:
        for citation in turn.citations:
            assert seen.setdefault(citation.chunk_id, citation.number) == citation.number
    assert sorted(seen.values()) == list(range(1, len(seen) + 1))
    assert len(seen) > len({c.chunk_id for c in turns[0].citations})

    rebuilt = CitationNumbering.from_chunk_ids(store.citation_order(again.history()))
    assert {cid: rebuilt.get(cid) for cid in seen} == seen


def test_another_user_cannot_continue_or_delete_a_conversation(manual: Citeline) -> None:
    session = ChatSession.start(manual, llm=None, access=Access.admin("ana"))
    complete(ask(session, "How do I prime the centrifugal pump?"))
    with pytest.raises(NotFoundError):
        ChatSession.resume(manual, session.id, llm=None, access=Access.admin("bob"))
    with pytest.raises(NotFoundError):
        delete_conversation(manual, session.id, Access.admin("bob"))
    assert conversations(manual, Access.admin("bob")) == []
    delete_conversation(manual, session.id, Access.admin("ana"))
    with pytest.raises(NotFoundError):
        ChatSession.resume(manual, session.id, llm=None, access=Access.admin("ana"))


def test_the_request_scopes_bound_every_turn(cl: Citeline, tmp_path: Path) -> None:
    write(tmp_path / "a" / "ward_a.md", "# Ward A\n\nThe infusion pump on ward A is serviced on Mondays.\n")
    write(tmp_path / "b" / "ward_b.md", "# Ward B\n\nThe infusion pump on ward B is serviced on Fridays.\n")
    cl.ingest([tmp_path / "a"], IngestOptions(scopes=("ward-a",)))
    cl.ingest([tmp_path / "b"], IngestOptions(scopes=("ward-b",)))
    session = ChatSession.start(cl, llm=None)
    first = complete(ask(session, "When is the infusion pump serviced?", Filters(scopes=("ward-a",))))
    assert {c.document_name for c in first.citations} == {"ward_a.md"}
    # The same conversation asked under another scope must not bring ward A's cited passage back.
    events = ask(session, "And which day is it?", Filters(scopes=("ward-b",)))
    start = events[0]
    assert isinstance(start, Start)
    assert {p.hit.document_name for p in start.passages} == {"ward_b.md"}


def test_bad_requests_fail_before_anything_is_stored(manual: Citeline) -> None:
    with pytest.raises(InvalidRequestError, match="unknown persona 'pirate'"):
        ChatSession.start(manual, llm=None, persona="pirate")
    session = ChatSession.start(manual, llm=None)
    with pytest.raises(InvalidRequestError, match=r"^the question is empty$"):
        ask(session, "   ")
    # The conversation started for the refused question is not left behind, empty, in the user's list.
    with manual.engine.connect() as conn:
        assert store.list_conversations(conn, session.conversation.user_id) == []
    # An empty question in a conversation that holds turns names it, and leaves it as it was.
    kept = ChatSession.start(manual, llm=None)
    complete(ask(kept, "How do I prime the centrifugal pump?"))
    with pytest.raises(InvalidRequestError, match=f"the question to conversation {kept.id} is empty"):
        ask(kept, "")
    assert len(kept.history()) == 1


def test_a_conversation_whose_first_answer_was_stopped_is_not_listed_until_a_turn_is_stored(
    manual: Citeline,
) -> None:
    session = ChatSession.start(manual, llm=None)

    async def stop_after_the_first_event() -> None:
        events = session.ask("How do I prime the centrifugal pump?")
        assert isinstance(await anext(events), TurnStart)
        await events.aclose()  # the client went away: the turn is not stored

    asyncio.run(stop_after_the_first_event())
    user = session.conversation.user_id
    with manual.engine.connect() as conn:
        assert store.list_conversations(conn, user) == []
    # It is still there to ask in by its id, and listed once a turn is stored.
    again = ChatSession.resume(manual, session.id, llm=None)
    complete(ask(again, "How do I prime the centrifugal pump?"))
    with manual.engine.connect() as conn:
        assert [c.id for c in store.list_conversations(conn, user)] == [session.id]


def test_starting_a_conversation_clears_expired_ones(manual: Citeline) -> None:
    ttl = timedelta(days=manual.settings.conversation_ttl_days)
    with manual.engine.begin() as conn:
        long_ago = datetime.now(UTC) - ttl - timedelta(minutes=1)
        store.create_conversation(conn, user_id="ana", persona="general", ttl=ttl, now=long_ago)
    session = ChatSession.start(manual, llm=None)
    with manual.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT id FROM conversations")).scalars().all() == [session.id]


@pytest.mark.parametrize("mode", ["llm", "heuristic"])
def test_the_setting_decides_whether_the_model_rewrites_follow_ups(manual: Citeline, mode: str) -> None:
    # A real provider whose server is down: answers fall back to extractive, rewrites to the heuristic.
    settings = manual.settings.model_copy(
        update={"follow_up_rewrite": mode, "llm_base_url": "http://127.0.0.1:1/v1"}
    )
    llm = get_llm("openai:any-model", settings)
    with Citeline(settings) as cl:
        try:
            session = ChatSession.start(cl, llm=llm, options=GenerationOptions(timeout=5))
            complete(ask(session, "How do I prime the centrifugal pump?"))
            second = complete(ask(session, "What about its mechanical seal?"))
        finally:
            llm.close()
    assert second.fell_back
    assert second.provider == "extractive"
    expected = "What about its mechanical seal? (prime centrifugal pump)"
    assert session.last_rewrite == Rewrite(expected, "heuristic", fell_back=mode == "llm")


def test_the_model_is_asked_the_follow_up_as_a_question_not_the_search_query(manual: Citeline) -> None:
    model = ScriptedLLM("Service the centrifugal pump every 500 operating hours. [1]")
    session = ChatSession.start(manual, llm=model, persona="repair")
    complete(ask(session, "How do I prime the centrifugal pump?"))

    complete(ask(session, "How often should it be serviced?"))

    rewritten = session.last_rewrite
    assert rewritten is not None and rewritten.method == "heuristic" and "(" in rewritten.query
    # The search borrowed the first turn's terms; the model reads the question as it was asked.
    prompt = model.calls[-1][-1].content
    assert prompt.endswith("\n\nQuestion: How often should it be serviced?"), prompt
    assert "every 500 operating hours" in prompt


def test_a_follow_up_claim_is_judged_in_the_user_s_words_not_with_the_search_s_borrowed_terms(
    manual: Citeline,
) -> None:
    session = ChatSession.start(manual, llm=None, persona="repair")
    complete(ask(session, "How do I prime the centrifugal pump?"))
    # "its" is the pump of the first turn ("A pump that runs dry damages its ..." names its own pump).
    said = "Running dry damages its mechanical seal (within seconds)"

    done = complete(ask(session, said))

    rewritten = session.last_rewrite
    assert rewritten is not None and rewritten.method == "heuristic" and rewritten.query != said
    # The search borrowed terms from the first turn; the claim judged is what the user said, its own
    # closing parenthesis included.
    assert done.claim == said


def test_a_question_the_documents_do_not_touch_is_not_answered_and_reaches_no_model(
    manual: Citeline,
) -> None:
    model = ScriptedLLM("The 2018 world cup was won by France [1].")
    session = ChatSession.start(manual, llm=model)

    events = ask(session, "Who won the 2018 football world cup?")

    done = complete(events)
    # Passages were found and judged too far from the question: said as such.
    assert done.evidence_missing and not done.citations and done.answer == EVIDENCE_MISSING
    start = events[0]
    assert isinstance(start, Start) and start.passages == ()
    assert model.calls == []
    # The same documents answer a question they do touch.
    assert not complete(ask(session, "How often is the centrifugal pump serviced?")).evidence_missing


def test_a_follow_ups_extractive_answer_quotes_what_its_own_words_ask_about(
    cl: Citeline, tmp_path: Path
) -> None:
    pages = {
        "preflight.txt": "Torque the wheel nut to 12 Nm before flight. The relief valve opens at 3 bar.",
        "wheels.md": "# Wheel nuts\n\nA wheel nut torqued past 12 Nm cracks the hub. Replace a wheel nut "
        "whose thread is damaged. Tighten the wheel nuts in a star pattern. Check the torque of each wheel "
        "nut after the first flight.",
    }
    session = conversation_over(cl, tmp_path, pages, persona="repair")
    complete(ask(session, "What torque for the wheel nut?"))

    done = complete(ask(session, "And the relief valve?"))

    rewritten = session.last_rewrite
    assert rewritten is not None and rewritten.method == "heuristic" and "nut" in rewritten.query
    # The search borrowed "wheel nut" from the first turn; quoting by the search's words alone led
    # with the nut's sentences again ("A wheel nut torqued past 12 Nm cracks the hub [2]. Torque the
    # wheel nut ...") and gave the valve last.
    assert done.answer.startswith("The relief valve opens at 3 bar") and "wheel nut" not in done.answer


def test_a_generic_follow_up_is_answered_from_the_drug_the_conversation_is_about(
    cl: Citeline, tmp_path: Path
) -> None:
    pages = {
        "metformin.md": "# Metformin\n\nMetformin lowers blood glucose in type 2 diabetes. The usual "
        "starting dose of metformin is 500 mg twice daily with meals, raised by 500 mg each week to at "
        "most 2000 mg.\n",
        "warfarin.md": "# Warfarin\n\nWarfarin prevents blood clots. The dose of warfarin should be used as "
        "the INR test dictates: most adults need 2 to 10 mg a day.\n",
    }
    session = conversation_over(cl, tmp_path, pages)
    complete(ask(session, "What does metformin treat?"))

    done = complete(ask(session, "What dose should be used?"))

    rewritten = session.last_rewrite
    assert rewritten is not None and rewritten.method == "heuristic" and "metformin" in rewritten.query
    # Searched alone, "what dose should be used" matched the warfarin page's own words best.
    assert done.answer.startswith("The usual starting dose of metformin is 500 mg"), done.answer
    assert done.citations[0].title == "Metformin"
