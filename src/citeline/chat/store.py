"""Conversations in the catalog: create, read (only by their owner), list, append turns, delete, expire.

A conversation belongs to one user: asking for another user's conversation is answered exactly as for
one that does not exist. It lives ``conversation_ttl_days`` after its last message; an expired one is
invisible at once and deleted by :func:`expire_conversations`.

Times come from the application's clock (``now``, UTC by default), so expiry can be reasoned about and
tested without waiting.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

import sqlalchemy as sa

from citeline.access import FULL_ACCESS, Access
from citeline.checks import refuse_nul
from citeline.errors import InvalidRequestError, NotFoundError
from citeline.store import catalog
from citeline.store.models import Conversation, Message

_conversations = cast(sa.Table, Conversation.__table__)
_messages = cast(sa.Table, Message.__table__)

TITLE_CHARS = 80


@dataclass(frozen=True)
class ConversationInfo:
    """A conversation as the catalog holds it."""

    id: uuid.UUID
    user_id: str
    title: str | None
    persona: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["id"] = str(self.id)
        for key in ("created_at", "updated_at", "expires_at"):
            out[key] = out[key].isoformat()
        return out


@dataclass(frozen=True)
class MessageInfo:
    """One stored message. A turn is a user message and the assistant message answering it.

    ``checks`` is what citeline checked of an answer when it was given (see :func:`append_turn`);
    ``citations`` is empty until :func:`with_citations` resolves them for showing.
    """

    id: int
    conversation_id: uuid.UUID
    turn: int
    role: Literal["user", "assistant"]
    content: str
    standalone_query: str | None
    cited_chunk_ids: tuple[int, ...]
    provider: str | None
    created_at: datetime
    checks: dict[str, Any] | None = None
    citations: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields: the message, its resolved ``citations``, and for an answer the sentences
        found ``unsupported`` and whether ``evidence_missing`` (as the answer's ``complete`` event had
        them)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "checks"}
        out["conversation_id"] = str(self.conversation_id)
        out["cited_chunk_ids"] = list(self.cited_chunk_ids)
        out["created_at"] = self.created_at.isoformat()
        out["citations"] = [dict(c) for c in self.citations]
        checks = self.checks or {}
        out["unsupported"] = list(checks.get("unsupported", []))
        out["evidence_missing"] = bool(checks.get("evidence_missing", False))
        return out


@dataclass(frozen=True)
class Turn:
    """One question and its answer, as :func:`turns` pairs them.

    ``answered`` is false when the answer said the documents hold no evidence for the question.
    """

    number: int
    question: str
    standalone_query: str
    answer: str
    cited_chunk_ids: tuple[int, ...]
    answered: bool = True


def parse_id(ref: str | uuid.UUID) -> uuid.UUID:
    """A conversation id from user input."""
    if isinstance(ref, uuid.UUID):
        return ref
    refuse_nul(ref, "conversation id")
    try:
        return uuid.UUID(ref)
    except ValueError:
        raise InvalidRequestError(f"conversation id {ref!r} is not a UUID") from None


def create_conversation(
    conn: sa.Connection,
    *,
    user_id: str,
    persona: str,
    ttl: timedelta,
    title: str | None = None,
    now: datetime | None = None,
) -> ConversationInfo:
    """A new, empty conversation owned by ``user_id``."""
    if not user_id:
        raise InvalidRequestError("a conversation needs a user id")
    now = now or datetime.now(UTC)
    row = conn.execute(
        sa.insert(_conversations)
        .values(
            id=uuid.uuid4(),
            user_id=user_id,
            title=_title(title) if title else None,
            persona=persona,
            created_at=now,
            updated_at=now,
            expires_at=now + ttl,
        )
        .returning(*_conversations.c)
    ).one()
    return _conversation(row)


def get_conversation(
    conn: sa.Connection, conversation_id: uuid.UUID, user_id: str, *, now: datetime | None = None
) -> ConversationInfo:
    """The conversation, if ``user_id`` owns it and it has not expired; otherwise :class:`NotFoundError`."""
    row = conn.execute(
        sa.select(_conversations).where(
            _conversations.c.id == conversation_id,
            _conversations.c.user_id == user_id,
            _conversations.c.expires_at > (now or datetime.now(UTC)),
        )
    ).first()
    if row is None:
        # Same answer whether it never existed, expired or is someone else's: ids reveal nothing.
        raise NotFoundError(f"no conversation {conversation_id} for user {user_id!r}")
    return _conversation(row)


def list_conversations(
    conn: sa.Connection, user_id: str, *, limit: int = 50, now: datetime | None = None
) -> list[ConversationInfo]:
    """The user's live conversations that hold a turn, most recently updated first.

    A conversation is made when its first question is asked and holds nothing until that turn is
    stored; a first answer the client stopped reading, or that failed, leaves it empty. Such a
    conversation is not listed (it can still be asked in by its id, and expires like any other).
    """
    has_turn = sa.exists().where(_messages.c.conversation_id == _conversations.c.id)
    rows = conn.execute(
        sa.select(_conversations)
        .where(
            _conversations.c.user_id == user_id,
            _conversations.c.expires_at > (now or datetime.now(UTC)),
            has_turn,
        )
        .order_by(_conversations.c.updated_at.desc(), _conversations.c.id)
        .limit(limit)
    )
    return [_conversation(r) for r in rows]


def messages(conn: sa.Connection, conversation_id: uuid.UUID) -> list[MessageInfo]:
    """Every message of a conversation, in order (check ownership with :func:`get_conversation` first)."""
    rows = conn.execute(
        sa.select(_messages)
        .where(_messages.c.conversation_id == conversation_id)
        # 'user' sorts before 'assistant' descending: the question comes before its answer.
        .order_by(_messages.c.turn, _messages.c.role.desc())
    )
    return [_message(r) for r in rows]


def append_turn(
    conn: sa.Connection,
    conversation_id: uuid.UUID,
    user_id: str,
    *,
    question: str,
    standalone_query: str,
    answer: str,
    cited_chunk_ids: Sequence[int],
    provider: str | None,
    ttl: timedelta,
    checks: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> int:
    """Store one question and its answer as the next turn; returns the turn number (1-based).

    The conversation's expiry moves to ``now + ttl``, and a conversation without a title takes the
    first question's start. ``cited_chunk_ids`` must be in the order of their citation numbers.
    ``checks`` is what the answer's reader was shown of its checks: ``citations`` (each as
    :meth:`~citeline.answer.Citation.as_dict` gives it), ``unsupported`` and ``evidence_missing``.
    """
    now = now or datetime.now(UTC)
    # The row lock serialises concurrent turns of one conversation, so turn numbers never collide.
    locked = conn.execute(
        sa.select(_conversations.c.id)
        .where(
            _conversations.c.id == conversation_id,
            _conversations.c.user_id == user_id,
            _conversations.c.expires_at > now,
        )
        .with_for_update()
    ).first()
    if locked is None:
        raise NotFoundError(f"no conversation {conversation_id} for user {user_id!r}")
    last = conn.execute(
        sa.select(sa.func.coalesce(sa.func.max(_messages.c.turn), 0)).where(
            _messages.c.conversation_id == conversation_id
        )
    ).scalar_one()
    turn = int(last) + 1
    conn.execute(
        sa.insert(_messages),
        [
            {
                "conversation_id": conversation_id,
                "turn": turn,
                "role": "user",
                "content": question,
                "standalone_query": standalone_query,
                "cited_chunk_ids": [],
                "provider": None,
                "checks": None,
                "created_at": now,
            },
            {
                "conversation_id": conversation_id,
                "turn": turn,
                "role": "assistant",
                "content": answer,
                "standalone_query": None,
                "cited_chunk_ids": list(dict.fromkeys(cited_chunk_ids)),
                "provider": provider,
                "checks": checks,
                "created_at": now,
            },
        ],
    )
    conn.execute(
        sa.update(_conversations)
        .where(_conversations.c.id == conversation_id)
        .values(
            updated_at=now,
            expires_at=now + ttl,
            title=sa.func.coalesce(_conversations.c.title, _title(question)),
        )
    )
    return turn


def delete_conversation(conn: sa.Connection, conversation_id: uuid.UUID, user_id: str) -> None:
    """Delete a conversation and its messages; :class:`NotFoundError` if ``user_id`` has no such one."""
    deleted = conn.execute(
        sa.delete(_conversations).where(
            _conversations.c.id == conversation_id, _conversations.c.user_id == user_id
        )
    ).rowcount
    if not deleted:
        raise NotFoundError(f"no conversation {conversation_id} for user {user_id!r}")


def expire_conversations(conn: sa.Connection, *, now: datetime | None = None) -> int:
    """Delete every conversation whose expiry has passed (messages cascade); returns how many."""
    result = conn.execute(
        sa.delete(_conversations).where(_conversations.c.expires_at <= (now or datetime.now(UTC)))
    )
    return int(result.rowcount)


def turns(stored: Sequence[MessageInfo]) -> list[Turn]:
    """Messages paired into turns, oldest first; a turn missing either message is left out."""
    by_turn: dict[int, dict[str, MessageInfo]] = {}
    for message in stored:
        by_turn.setdefault(message.turn, {})[message.role] = message
    out = []
    for number in sorted(by_turn):
        pair = by_turn[number]
        if "user" in pair and "assistant" in pair:
            question, answer = pair["user"], pair["assistant"]
            out.append(
                Turn(
                    number=number,
                    question=question.content,
                    standalone_query=question.standalone_query or question.content,
                    answer=answer.content,
                    cited_chunk_ids=answer.cited_chunk_ids,
                    answered=not (answer.checks or {}).get("evidence_missing", False),
                )
            )
    return out


def citation_order(history: Sequence[Turn]) -> list[int]:
    """Every chunk cited in the conversation, in order of first citation.

    A chunk's position (1-based) is its conversation-wide citation number. Retired chunks keep their
    place, so the numbers in earlier answers never shift.
    """
    return list(dict.fromkeys(cid for turn in history for cid in turn.cited_chunk_ids))


def recently_cited(history: Sequence[Turn]) -> list[int]:
    """Every chunk cited in the conversation, the most recently cited first."""
    newest_first = sorted(history, key=lambda t: -t.number)
    return list(dict.fromkeys(cid for turn in newest_first for cid in turn.cited_chunk_ids))


def with_citations(
    conn: sa.Connection, stored: Sequence[MessageInfo], *, access: Access = FULL_ACCESS
) -> list[MessageInfo]:
    """``stored`` (a conversation's messages, in order) with each answer's citations resolved as a
    reader can open them now.

    A citation is the one shown with the answer (number, passage, excerpt, support score...; for an
    answer stored before these were kept, the number and passage alone), plus where its passage is
    now: ``text`` (the whole passage), ``content_type``, ``available``, ``has_original`` and
    ``source_url`` (where it can be opened), and when the document has a
    newer version than the one cited, ``superseded`` and ``current_version``. A citation keeps
    opening the version it cited (kept while the conversation lives, see ``catalog.activate``). One
    whose document was deleted, or is outside ``access``, shows only its number, ``chunk_id`` and
    ``available: false``. ``also_in`` keeps the passage's copies named with the answer that are
    still there and within ``access``.
    """
    numbers = {cid: n for n, cid in enumerate(citation_order(turns(stored)), start=1)}
    shown_copies = [
        int(copy["chunk_id"])
        for message in stored
        for citation in (message.checks or {}).get("citations", ())
        for copy in citation.get("also_in", ())
    ]
    passages = catalog.cited_passages(conn, [*numbers, *shown_copies], access=access)
    out = []
    for message in stored:
        if message.role != "assistant":
            out.append(message)
            continue
        shown = (message.checks or {}).get("citations")
        if shown is None:
            shown = [
                {"number": numbers[cid], "chunk_id": cid} for cid in message.cited_chunk_ids if cid in numbers
            ]
        citations = []
        for citation in shown:
            passage = passages.get(int(citation["chunk_id"]))
            if passage is None:
                citations.append(
                    {"number": citation["number"], "chunk_id": citation["chunk_id"], "available": False}
                )
                continue
            citations.append(
                {
                    "document_id": str(passage.document_id),
                    "document_name": passage.document_name,
                    "title": passage.title,
                    "version": passage.version,
                    "page": passage.page,
                    "rows": passage.rows,
                    "start": passage.start,
                    "end": passage.end,
                    "section": passage.section,
                    **citation,
                    # The copies named with the answer that the reader can still open: a copy's document
                    # may have been deleted or replaced since. Whether each has its original is read now:
                    # an answer stored before citeline recorded it does not say.
                    "also_in": [
                        {**c, "has_original": passages[int(c["chunk_id"])].has_original}
                        for c in citation.get("also_in", ())
                        if int(c["chunk_id"]) in passages
                    ],
                    "has_original": passage.has_original,
                    "source_url": passage.source_url,
                    "text": passage.text,
                    "content_type": passage.content_type,
                    "available": True,
                    "superseded": passage.superseded,
                    "current_version": passage.current_version,
                }
            )
        out.append(replace(message, citations=tuple(citations)))
    return out


def _title(question: str) -> str:
    text = " ".join(question.split())
    if len(text) <= TITLE_CHARS:
        return text
    cut = text[:TITLE_CHARS]
    # End on a whole word when there is one to end on.
    cut = cut[: cut.rfind(" ")] if " " in cut else cut[: TITLE_CHARS - 1]
    return cut.rstrip() + "\u2026"


def _conversation(row: sa.Row[Any]) -> ConversationInfo:
    return ConversationInfo(**row._asdict())


def _message(row: sa.Row[Any]) -> MessageInfo:
    values = row._asdict()
    values["cited_chunk_ids"] = tuple(int(c) for c in values["cited_chunk_ids"])
    return MessageInfo(**values)
