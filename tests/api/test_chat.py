"""Answers over HTTP with the extractive answerer: the SSE stream's order and citations, follow-ups,
conversations that belong to one key, and requests refused before a stream starts."""

from __future__ import annotations

import re
import uuid

from tests.api.conftest import Server, Sse, read_events

QUESTION = "When does the ACME relief valve open?"


def stream(server: Server, caller: str, body: dict[str, object]) -> list[Sse]:
    with server.as_(caller) as client, client.stream("POST", "/chat/stream", json=body) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(read_events(response.iter_lines()))


def test_a_streamed_answer_arrives_in_order_and_its_citations_resolve(server: Server) -> None:
    events = [e for e in stream(server, "reader", {"question": QUESTION}) if e.name != ":"]
    names = " ".join(e.name for e in events)
    assert re.fullmatch(r"start rewrite evidence token( token| citation)*( unsupported)* complete", names), (
        names
    )
    start, rewrite, evidence, complete = events[0], events[1], events[2], events[-1]
    assert start.data["conversation_id"] == complete.data["conversation_id"]
    assert start.data["question"] == QUESTION and start.data["turn"] == 1
    assert evidence.data["provider"] == "extractive"
    assert rewrite.data == {
        "question": QUESTION,
        "query": QUESTION,
        "method": "unchanged",
        "rewritten": False,
        "fell_back": False,
    }
    given = {p["chunk_id"]: p for p in evidence.data["passages"]}
    for copy in (c for p in given.values() for c in p["also_in"]):  # other documents holding a passage
        assert copy["download_url"] == (
            f"/documents/{copy['document_id']}/file?version={copy['version']}#page={copy['page']}"
        )
    streamed = ""
    for event in events:
        if event.name == "token":
            streamed += event.data["text"]
        elif event.name == "citation":
            # Sent right after the token in which its number first appears, with its whole passage.
            assert f"[{event.data['number']}]" in streamed
            passage = event.data["passage"]
            assert passage["chunk_id"] in given and passage["text"]
            assert passage["download_url"] == (
                f"/documents/{passage['document_id']}/file?version={passage['version']}#page={passage['page']}"
            )
    assert streamed == complete.data["answer"]
    cited = [e.data for e in events if e.name == "citation"]
    assert [c["number"] for c in cited] == [c["number"] for c in complete.data["citations"]]
    for citation in complete.data["citations"]:
        passage = given[citation["chunk_id"]]  # every citation is a passage the stream gave
        assert (citation["document_id"], citation["page"]) == (passage["document_id"], passage["page"])
        # Pinned to the version cited: it keeps opening what was cited after a re-ingest.
        assert citation["download_url"] == (
            f"/documents/{citation['document_id']}/file?version={citation['version']}#page={citation['page']}"
        )
        assert f"[{citation['number']}]" in complete.data["answer"]
    assert server.documents["acme_note"] in {c["document_id"] for c in complete.data["citations"]}


def test_a_cited_passage_is_found_in_its_pages_text(server: Server) -> None:
    events = stream(server, "admin", {"question": QUESTION})
    citation = events[-1].data["citations"][0]
    with server.as_("admin") as client:
        page = client.get(f"/documents/{citation['document_id']}/pages/{citation['page']}").json()
    assert citation["excerpt"] in page["text"][citation["start"] : citation["end"]]


def test_a_follow_up_continues_the_conversation(server: Server) -> None:
    first = stream(server, "reader", {"question": QUESTION})
    conversation = first[0].data["conversation_id"]
    second = stream(
        server, "reader", {"question": "And how often is it tested?", "conversation_id": conversation}
    )
    assert second[0].data["conversation_id"] == conversation and second[0].data["turn"] == 2
    assert second[1].name == "rewrite" and second[1].data["rewritten"]
    assert second[-1].name == "complete"
    with server.as_("reader") as client:
        stored = client.get(f"/conversations/{conversation}").json()
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant", "user", "assistant"]
    # Read back, each answer has its citations as its stream's end gave them, and where they are now.
    for message, streamed in zip(stored["messages"][1::2], (first, second), strict=True):
        shown = streamed[-1].data
        assert (message["unsupported"], message["evidence_missing"]) == (
            shown["unsupported"],
            shown["evidence_missing"],
        )
        assert [{k: c[k] for k in shown["citations"][0]} for c in message["citations"]] == shown["citations"]
        assert all(c["available"] and not c["superseded"] and c["text"] for c in message["citations"])


def test_the_whole_answer_at_once(server: Server) -> None:
    with server.as_("reader") as client:
        body = client.post("/chat", json={"question": QUESTION, "top_k": 3}).json()
    assert "6 bar" in body["answer"]
    assert {"conversation_id", "answer", "citations", "sources", "unsupported", "uncited", "query"} <= set(
        body
    )
    assert {c["chunk_id"] for c in body["citations"]} <= {s["chunk_id"] for s in body["sources"]}
    assert len(body["sources"]) <= 3


def test_a_key_sees_and_deletes_only_its_own_conversations(server: Server) -> None:
    with server.as_("admin") as admin:
        mine = admin.post("/chat", json={"question": QUESTION}).json()["conversation_id"]
    with server.as_("reader") as reader:
        assert reader.get(f"/conversations/{mine}").status_code == 404
        assert reader.delete(f"/conversations/{mine}").status_code == 404
        assert mine not in {c["id"] for c in reader.get("/conversations").json()["conversations"]}
        refused = reader.post("/chat/stream", json={"question": QUESTION, "conversation_id": mine})
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    with server.as_("admin") as admin:
        assert mine in {c["id"] for c in admin.get("/conversations").json()["conversations"]}
        assert admin.delete(f"/conversations/{mine}").status_code == 204
        assert admin.get(f"/conversations/{mine}").status_code == 404


def test_a_refused_question_gets_its_status_not_a_stream(server: Server) -> None:
    with server.as_("admin") as client:
        blank = client.post("/chat/stream", json={"question": "   "})
        unknown = client.post(
            "/chat/stream", json={"question": QUESTION, "conversation_id": str(uuid.uuid4())}
        )
        persona = client.post("/chat/stream", json={"question": QUESTION, "persona": "pirate"})
    assert blank.status_code == 422 and blank.json()["error"]["code"] == "invalid_request"
    assert unknown.status_code == 404
    assert persona.status_code == 422 and "pirate" in persona.json()["error"]["message"]
