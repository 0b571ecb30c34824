"""``POST /chat`` (the whole answer at once) and ``POST /chat/stream`` (server-sent events).

The library streams an answer as events (:mod:`citeline.answer.events`); this module only names them
for SSE, adds links to the API's file route, and stops the generation when the client goes away
(from either route). Event names and payloads are documented in docs/api.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncGenerator, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import APIRouter, Request
from pydantic import Field
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from citeline.access import Access
from citeline.answer import CitationEvent, Complete, Error, Start, Token
from citeline.api.bodies import Count, Text
from citeline.api.deps import AccessDep, CitelineDep, SlotsDep
from citeline.api.errors import error_code
from citeline.api.limits import GenerationSlot, GenerationSlots, check_text_length
from citeline.api.request_id import current_request_id
from citeline.api.routes.links import with_download_links
from citeline.api.routes.search import FilterFields
from citeline.api.schemas import KEYED, SSE_EVENTS, ChatAnswer, PersonaName, answers, errors, sse_description
from citeline.chat.events import ChatEvent, TurnStart
from citeline.chat.session import ChatSession
from citeline.engine import Citeline
from citeline.errors import CitelineError, GenerationError

router = APIRouter(tags=["chat"])
log = logging.getLogger("citeline.api")


class ChatBody(FilterFields):
    question: Text = Field(min_length=1, description="The question, in the conversation's language.")
    conversation_id: uuid.UUID | None = Field(
        default=None, description="Continue this conversation of the key's; unset starts a new one."
    )
    persona: PersonaName | None = Field(
        default=None, description="general, clinical or repair (a new conversation only)."
    )
    top_k: Count | None = Field(default=None, ge=1, le=50, description="Fresh passages to answer from.")


@dataclass
class _Answer:
    """An answer under way: its conversation, its event stream and the generation slot it holds."""

    session: ChatSession
    question: str
    events: AsyncGenerator[ChatEvent, None]
    slot: GenerationSlot


async def _begin(cl: Citeline, access: Access, slots: GenerationSlots, body: ChatBody) -> _Answer:
    check_text_length(body.question, "question", cl.settings)
    # Everything refused without the model is refused before the request waits for a slot: a request
    # that can never be answered must not get a 503 meanwhile, nor count among the answers.
    await asyncio.to_thread(
        cl.check_chat, body.question, body.conversation_id, access=access, persona=body.persona
    )
    filters = await asyncio.to_thread(body.filters, cl, access)
    slot = await slots.acquire(access.user_id)
    try:
        session = await asyncio.to_thread(cl.chat, body.conversation_id, access=access, persona=body.persona)
        events = session.ask(body.question, filters=filters, top_k=body.top_k)
    except BaseException:
        slot.release()
        raise
    return _Answer(session, body.question, events, slot)


def sse_events(event: ChatEvent, answer: _Answer) -> Iterator[tuple[str, dict[str, Any]]]:
    """The server-sent events (name, payload) one library event becomes."""
    data = event.as_dict()
    name = str(data.pop("type"))
    if isinstance(event, TurnStart):
        yield (
            "start",
            {"conversation_id": data["conversation_id"], "turn": event.turn, "question": event.question},
        )
        yield (
            "rewrite",
            {
                "question": event.question,
                "query": data["query"],
                "method": data["rewrite"],
                "rewritten": data["rewritten"],
                "fell_back": data["rewrite_fell_back"],
            },
        )
    elif isinstance(event, Start):
        yield (
            "evidence",
            {"provider": event.provider, "passages": [with_download_links(p) for p in data["passages"]]},
        )
    elif isinstance(event, Token):
        yield ("token", data)
    elif isinstance(event, CitationEvent):
        if data["passage"] is not None:
            with_download_links(data["passage"])
        yield ("citation", data)
    elif isinstance(event, Complete):
        data["conversation_id"] = str(answer.session.id)
        data["citations"] = [with_download_links(c) for c in data["citations"]]
        yield ("complete", data)
    elif isinstance(event, Error):
        yield ("error", _error_payload(event))
    elif "document_id" in data:
        yield (name, with_download_links(data))
    else:
        yield (name, data)


def _error_payload(event: Error) -> dict[str, Any]:
    exc = event.exception or GenerationError(event.message)
    return _with_request_id({"code": error_code(exc), "message": event.message, "status": exc.http_status})


def _with_request_id(payload: dict[str, Any]) -> dict[str, Any]:
    """An error event names its request as an error response does (the stream's headers carry it too)."""
    request_id = current_request_id()
    return payload if request_id is None else {**payload, "request_id": request_id}


def _format(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, default=str)}\n\n"


class EventStream(StreamingResponse):
    """A text/event-stream response that closes its event source however the response ends."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncGenerator[str, None]) -> None:
        super().__init__(
            events,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # A client that went away ends the response early: closing the source stops the model.
            with anyio.CancelScope(shield=True):
                await self._events.aclose()


async def _stream(answer: _Answer, first: ChatEvent, heartbeat: float) -> AsyncGenerator[str, None]:
    """The answer as SSE text; a comment line every ``heartbeat`` seconds the model is silent."""
    ended = False
    pending: asyncio.Future[ChatEvent] | None = None
    try:
        event: ChatEvent = first
        while True:
            for name, data in sse_events(event, answer):
                yield _format(name, data)
            if isinstance(event, Complete | Error):
                ended = True
                break
            pending = asyncio.ensure_future(anext(answer.events))
            while not pending.done():
                await asyncio.wait({pending}, timeout=heartbeat)
                if not pending.done():
                    yield ": heartbeat\n\n"
            try:
                event = pending.result()
            except StopAsyncIteration:
                ended = True
                break
            except CitelineError as exc:
                ended = True
                yield _format("error", _error_payload(Error(str(exc), exc)))
                break
            except Exception:
                # A bug: the client learns that the answer failed, the log has the stack trace.
                log.exception("answer in conversation %s failed", answer.session.id)
                ended = True
                internal = {"code": "internal", "message": "internal error", "status": 500}
                yield _format("error", _with_request_id(internal))
                break
            finally:
                pending = None
    finally:
        with anyio.CancelScope(shield=True):
            if pending is not None:
                pending.cancel()
                with suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                    await pending
            await answer.events.aclose()
        answer.slot.release(stopped_early=not ended)
        if not ended:
            log.info("answer in conversation %s stopped: the client went away", answer.session.id)


async def _first(answer: _Answer) -> ChatEvent:
    """The stream's first event, read before the response starts: a request the library refuses (an
    empty question, an unknown conversation) gets its own status, not a stream holding an error."""
    try:
        first = await anext(answer.events)
    except StopAsyncIteration:
        answer.slot.release()
        raise GenerationError("the answer stream ended before it started") from None
    except BaseException:
        answer.slot.release()
        raise
    if isinstance(first, Error):
        answer.slot.release()
        await answer.events.aclose()
        raise first.exception or GenerationError(first.message)
    return first


@router.post(
    "/chat/stream",
    summary="Answer a question as server-sent events (see docs/api.md)",
    response_class=EventStream,
    status_code=200,
    operation_id="chat_stream",
    responses={
        200: {
            "description": sse_description(),
            "content": {
                "text/event-stream": {
                    "schema": {"type": "string"},
                    "x-events": {
                        name: {"$ref": f"#/components/schemas/{model.__name__}"}
                        for name, (model, _) in SSE_EVENTS.items()
                    },
                }
            },
        },
        **errors(*KEYED, 404, 502),
    },
)
async def chat_stream(body: ChatBody, cl: CitelineDep, access: AccessDep, slots: SlotsDep) -> EventStream:
    answer = await _begin(cl, access, slots, body)
    first = await _first(answer)
    return EventStream(_stream(answer, first, cl.settings.api_heartbeat_seconds))


async def _collect(answer: _Answer) -> dict[str, dict[str, Any]]:
    """The answer's events as their SSE payloads by name (the last of each name)."""
    parts: dict[str, dict[str, Any]] = {}
    async for event in answer.events:
        if isinstance(event, Error):
            raise event.exception or GenerationError(event.message)
        parts.update(sse_events(event, answer))
    return parts


async def _client_gone(request: Request) -> None:
    """Return once the client has closed its connection (the body was read already, so the next ASGI
    message a request receives is its disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@router.post(
    "/chat",
    summary="Answer a question; the whole answer at once",
    response_model=None,
    operation_id="chat",
    # 499 is not sent: it names, in the access log, an answer whose client went away.
    responses=answers(ChatAnswer, *KEYED, 404, 502),
)
async def chat(
    body: ChatBody, request: Request, cl: CitelineDep, access: AccessDep, slots: SlotsDep
) -> dict[str, Any] | Response:
    answer = await _begin(cl, access, slots, body)
    collecting = asyncio.ensure_future(_collect(answer))
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait({collecting, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # A client that went away (or a server shutting down) stops the model, as the stream does.
        stopped = not collecting.done()
        with anyio.CancelScope(shield=True):
            for task in (collecting, gone):
                task.cancel()
            with suppress(asyncio.CancelledError):
                await gone
            if stopped:
                with suppress(asyncio.CancelledError, Exception):
                    await collecting
            await answer.events.aclose()
        answer.slot.release(stopped_early=stopped)
    if stopped:
        log.info("answer in conversation %s stopped: the client went away", answer.session.id)
        # Nobody reads it; 499 (nginx's "client closed request") says so in the access log.
        return Response(status_code=499)
    parts = collecting.result()
    if "complete" not in parts:
        raise GenerationError("the answer ended without completing")
    return {**parts["complete"], "query": parts["rewrite"]["query"], "sources": parts["evidence"]["passages"]}
