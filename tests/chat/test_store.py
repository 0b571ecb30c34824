"""Conversations in PostgreSQL: round trip, one owner each, expiry, and numbering rebuilt from turns."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from citeline.chat import store
from citeline.engine import Citeline
from citeline.errors import InvalidRequestError, NotFoundError

TTL = timedelta(days=30)
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def add_turn(
    conn: sa.Connection,
    conversation: store.ConversationInfo,
    question: str,
    cited: list[int],
    *,
    now: datetime | None = None,
) -> int:
    return store.append_turn(
        conn,
        conversation.id,
        conversation.user_id,
        question=question,
        standalone_query=question.lower(),
        answer=f"answer to {question}",
        cited_chunk_ids=cited,
        provider="extractive",
        ttl=TTL,
        now=now or T0,
    )


def test_a_conversation_round_trips_with_its_turns(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        created = store.create_conversation(conn, user_id="ana", persona="repair", ttl=TTL, now=T0)
        assert add_turn(conn, created, "How do I prime the pump?", [42, 7]) == 1
        assert add_turn(conn, created, "And the impeller?", [7, 99]) == 2
    with cl.engine.connect() as conn:
        got = store.get_conversation(conn, created.id, "ana", now=T0)
        stored = store.messages(conn, created.id)
    assert got.persona == "repair"
    assert got.title == "How do I prime the pump?"
    assert [(m.turn, m.role) for m in stored] == [
        (1, "user"),
        (1, "assistant"),
        (2, "user"),
        (2, "assistant"),
    ]
    question, answer = stored[0], stored[1]
    assert question.standalone_query == "how do i prime the pump?"
    assert question.cited_chunk_ids == ()
    assert answer.content == "answer to How do I prime the pump?"
    assert answer.cited_chunk_ids == (42, 7)
    assert answer.provider == "extractive"
    assert answer.as_dict()["cited_chunk_ids"] == [42, 7]
    turns = store.turns(stored)
    assert [(t.number, t.question, t.cited_chunk_ids) for t in turns] == [
        (1, "How do I prime the pump?", (42, 7)),
        (2, "And the impeller?", (7, 99)),
    ]


def test_citation_numbers_are_rebuilt_in_order_of_first_citation(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        conversation = store.create_conversation(conn, user_id="ana", persona="general", ttl=TTL, now=T0)
        add_turn(conn, conversation, "first", [30, 10])
        add_turn(conn, conversation, "second", [10, 20])
        add_turn(conn, conversation, "third", [])
        add_turn(conn, conversation, "fourth", [40, 30])
    with cl.engine.connect() as conn:
        history = store.turns(store.messages(conn, conversation.id))
    # [1] stays chunk 30 and [2] chunk 10 for the whole conversation; new chunks take the next numbers.
    assert store.citation_order(history) == [30, 10, 20, 40]
    assert store.recently_cited(history) == [40, 30, 10, 20]


def test_another_users_conversation_does_not_exist_for_them(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        mine = store.create_conversation(conn, user_id="ana", persona="general", ttl=TTL, now=T0)
        add_turn(conn, mine, "private question", [1])
    with cl.engine.begin() as conn:
        with pytest.raises(NotFoundError, match=f"no conversation {mine.id} for user 'bob'"):
            store.get_conversation(conn, mine.id, "bob", now=T0)
        assert store.list_conversations(conn, "bob", now=T0) == []
        with pytest.raises(NotFoundError):
            add_turn(conn, store.ConversationInfo(**{**mine.__dict__, "user_id": "bob"}), "sneak in", [2])
        with pytest.raises(NotFoundError):
            store.delete_conversation(conn, mine.id, "bob")
    with cl.engine.connect() as conn:
        assert len(store.messages(conn, mine.id)) == 2
        assert store.get_conversation(conn, mine.id, "ana", now=T0).id == mine.id


def test_conversations_are_listed_per_user_most_recent_first(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        older = store.create_conversation(conn, user_id="ana", persona="general", ttl=TTL, now=T0)
        newer = store.create_conversation(
            conn, user_id="ana", persona="general", ttl=TTL, now=T0 + timedelta(minutes=1)
        )
        bob = store.create_conversation(conn, user_id="bob", persona="general", ttl=TTL, now=T0)
        add_turn(conn, newer, "first", [], now=T0 + timedelta(minutes=1))
        add_turn(conn, bob, "first", [], now=T0 + timedelta(minutes=1))
        add_turn(conn, older, "back to this one", [], now=T0 + timedelta(minutes=2))
        empty = store.create_conversation(
            conn, user_id="ana", persona="general", ttl=TTL, now=T0 + timedelta(minutes=2)
        )
        listed = store.list_conversations(conn, "ana", now=T0 + timedelta(minutes=3))
    # A conversation with no stored turn yet (its first answer stopped or failed) is not listed.
    assert [c.id for c in listed] == [older.id, newer.id] and empty.id not in {c.id for c in listed}


def test_deleting_a_conversation_deletes_its_messages(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        conversation = store.create_conversation(conn, user_id="ana", persona="general", ttl=TTL, now=T0)
        add_turn(conn, conversation, "q", [1])
        store.delete_conversation(conn, conversation.id, "ana")
        assert conn.execute(sa.text("SELECT count(*) FROM messages")).scalar_one() == 0
        with pytest.raises(NotFoundError):
            store.get_conversation(conn, conversation.id, "ana", now=T0)


def test_each_turn_extends_expiry_and_expired_conversations_are_deleted(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        quiet = store.create_conversation(conn, user_id="ana", persona="general", ttl=TTL, now=T0)
        active = store.create_conversation(conn, user_id="ana", persona="general", ttl=TTL, now=T0)
        add_turn(conn, active, "still here", [1], now=T0 + timedelta(days=20))
    after_quiet_expiry = T0 + TTL + timedelta(seconds=1)
    with cl.engine.begin() as conn:
        # Expired conversations are invisible even before they are deleted.
        with pytest.raises(NotFoundError):
            store.get_conversation(conn, quiet.id, "ana", now=after_quiet_expiry)
        assert store.get_conversation(conn, active.id, "ana", now=after_quiet_expiry).expires_at == (
            T0 + timedelta(days=20) + TTL
        )
        assert store.expire_conversations(conn, now=after_quiet_expiry) == 1
        assert conn.execute(sa.text("SELECT id FROM conversations")).scalars().all() == [active.id]
        assert store.expire_conversations(conn, now=T0 + timedelta(days=51)) == 1
        assert conn.execute(sa.text("SELECT count(*) FROM messages")).scalar_one() == 0


def test_a_turn_cannot_be_added_to_an_expired_conversation(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        conversation = store.create_conversation(conn, user_id="ana", persona="general", ttl=TTL, now=T0)
        with pytest.raises(NotFoundError):
            add_turn(conn, conversation, "too late", [], now=T0 + TTL)


def test_a_long_first_question_makes_a_short_title(cl: Citeline) -> None:
    question = "How do I " + "really " * 30 + "prime the pump?"
    with cl.engine.begin() as conn:
        conversation = store.create_conversation(conn, user_id="ana", persona="general", ttl=TTL, now=T0)
        add_turn(conn, conversation, question, [])
        add_turn(conn, conversation, "second question", [])
        title = store.get_conversation(conn, conversation.id, "ana", now=T0).title
    assert title is not None
    assert len(title) <= store.TITLE_CHARS
    assert title.startswith("How do I really")
    assert title.endswith(" really\u2026")


def test_conversation_ids_must_be_uuids() -> None:
    assert store.parse_id(str(uuid.UUID(int=5))) == uuid.UUID(int=5)
    with pytest.raises(InvalidRequestError, match="conversation id 'nope' is not a UUID"):
        store.parse_id("nope")


def test_a_conversation_needs_an_owner(cl: Citeline) -> None:
    with cl.engine.begin() as conn, pytest.raises(InvalidRequestError, match="needs a user id"):
        store.create_conversation(conn, user_id="", persona="general", ttl=TTL)
