"""Answering: evidence -> prompt -> LLM -> answer -> cite (parse, verify, number) -> a stream of events.

:func:`answer_stream` is the one implementation; :func:`answer` runs it for callers without an event loop.

The model's streaming iterator is synchronous (a local model computes in the calling thread), so it runs
in a worker thread that hands pieces to the event loop through a queue; embedding (extractive answers,
citation checks) runs in worker threads too. The loop is never blocked: other requests go on while the
model thinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace

from citeline.answer.attribution import Attributor
from citeline.answer.citations import (
    CitationNumbering,
    CitationRewriter,
    RemovedCitation,
    Verification,
    has_cited_statement,
    verify,
)
from citeline.answer.events import AnswerTimings, CitationEvent, Complete, Error, Event, Start, Token
from citeline.answer.evidence import check_evidence_budget, focus_passages
from citeline.answer.extractive import extractive_answer
from citeline.answer.llm import LLM, AnswerShape, GenerationOptions, Message
from citeline.answer.prompt import (
    EVIDENCE_HEADING,
    REFUSAL,
    Passage,
    build_prompt,
    check_request,
    select_passages,
)
from citeline.answer.relevance import answerable
from citeline.answer.support import VectorCache
from citeline.embed.base import Embedder
from citeline.errors import CitelineError, GenerationError
from citeline.retrieve.search import Hit

EXTRACTIVE = "extractive"
"""The provider name of answers built without a model."""

EVIDENCE_MISSING = (
    "No passage in the documents matches this question closely enough, so there is no evidence to "
    "answer it from."
)
"""What citeline says, without calling the model, when retrieval found nothing."""


async def answer_stream(
    question: str,
    evidence: Sequence[Hit],
    *,
    llm: LLM | None,
    embedder: Embedder,
    numbering: CitationNumbering,
    persona: str,
    options: GenerationOptions,
    max_evidence_tokens: int | None = None,
    min_similarity: float = 0.0,
) -> AsyncGenerator[Event, None]:
    """Answer ``question`` from ``evidence`` (retrieved hits, best first), as a stream of events.

    ``llm`` None means the extractive answerer. ``numbering`` is the conversation's citation numbering;
    it gains numbers for the chunks this answer cites (and only those: a reply that is thrown away
    leaves it unchanged). ``embedder`` scores sentences: to focus the evidence, to attribute uncited
    sentences, to check citations and to pick extractive sentences. ``max_evidence_tokens`` bounds
    the evidence the model reads (see :mod:`citeline.answer.evidence`); None gives it whole chunks.
    Evidence that fails :func:`~citeline.answer.relevance.answerable` at ``min_similarity`` counts as
    none: the answer says the documents hold no evidence, and no model is called.

    Yields :class:`Start` (with every passage given: those the model reads, numbered first, then any the
    evidence budget left out, with nothing shown), :class:`Token` pieces, one :class:`CitationEvent`
    per citation, then :class:`Complete`. When something other than the model fails, an
    :class:`Error` ends the stream (before :class:`Start` if focusing the evidence failed). A bad
    request (unknown persona, empty question, too small a budget) raises
    :class:`~citeline.errors.InvalidRequestError` before anything is yielded.
    """
    began = time.perf_counter()

    def elapsed() -> float:
        return (time.perf_counter() - began) * 1e3

    # A bad request fails before anything is yielded: checked before the evidence is focused.
    check_request(question, persona=persona)
    check_evidence_budget(max_evidence_tokens)
    if not answerable(question, evidence, min_similarity=min_similarity):
        evidence = []
    cache = VectorCache(embedder)
    try:
        if llm is None:
            # The extractive answerer quotes whole chunks and reads no prompt: nothing to focus.
            passages = select_passages(evidence)
        else:
            passages = await asyncio.to_thread(
                focus_passages, question, evidence, cache, max_tokens=max_evidence_tokens
            )
    except CitelineError as exc:
        yield Error(message=str(exc), exception=exc)
        return
    prompt = build_prompt(question, passages, persona=persona)
    # The passages the budget left out are given too, with nothing shown to the model: the model
    # cannot cite them, but the extractive answer quotes whole chunks and may (of 100 SciFact claims,
    # the gold abstract was among the 5 retrieved passages for 81 and among those the model read for 76).
    read = {p.chunk_id for p in prompt.passages}
    given = (
        *prompt.passages,
        *(
            Passage(number=len(read) + i, hit=p.hit, shown=())
            for i, p in enumerate((p for p in select_passages(evidence) if p.chunk_id not in read), start=1)
        ),
    )
    prompt_ms = elapsed()
    provider = llm.model_id if llm is not None else EXTRACTIVE
    yield Start(question=question, passages=given, provider=provider)
    if not given:
        yield Token(EVIDENCE_MISSING)
        yield _complete(
            EVIDENCE_MISSING, provider, AnswerTimings(prompt_ms, elapsed(), 0.0, 0.0, elapsed()), missing=True
        )
        return

    first_token: float | None = None
    generation_ms = 0.0
    removed: tuple[RemovedCitation, ...] = ()
    attributed: frozenset[int] = frozenset()
    failure: str | None = None
    checked: Verification | None = None
    verify_ms = 0.0
    text = ""
    try:
        if llm is not None:
            working = numbering.copy()
            rewriter = CitationRewriter(prompt.passages, working)
            attributor = Attributor(prompt.passages, working, cache, never=(REFUSAL,))
            parts: list[str] = []
            sent = 0  # characters of the reply passed on so far
            shape = AnswerShape(passages=len(prompt.passages), refusal=REFUSAL, not_opening=EVIDENCE_HEADING)
            try:
                # Closed on the way out, however it is left, so the worker stops at its next piece.
                async with contextlib.aclosing(
                    _generate(llm, prompt.messages, replace(options, shape=shape))
                ) as pieces:
                    async for piece in pieces:
                        shown = rewriter.feed(piece)
                        if shown:
                            # Scoring an uncited sentence embeds it: off the event loop.
                            shown = await asyncio.to_thread(attributor.feed, shown)
                        if shown:
                            parts.append(shown)
                            reply = "".join(parts)
                            # A refusal is replaced by the extractive answer: not shown while it may be one.
                            if len(reply) > sent and not _may_be_refusal(reply):
                                first_token = first_token if first_token is not None else elapsed()
                                yield Token(reply[sent:])
                                sent = len(reply)
                rest = rewriter.finish()
                parts.append(await asyncio.to_thread(lambda: attributor.feed(rest) + attributor.finish()))
                reply = "".join(parts)
                if len(reply) > sent and reply.strip() != REFUSAL:
                    first_token = first_token if first_token is not None else elapsed()
                    yield Token(reply[sent:])
                    sent = len(reply)
            except GenerationError as exc:
                failure = f"generation failed: {exc}"
            generation_ms = elapsed() - prompt_ms
            removed = tuple(rewriter.removed)
            if failure is None and "".join(parts).strip() == REFUSAL:
                failure = "the model found no answer in the passages"
            if failure is None and not rewriter.cited and not attributor.attributions:
                failure = "the model's reply cited no given passage, and no passage backs its sentences"
            if failure is None and not has_cited_statement("".join(parts)):
                failure = "the model's reply made no statement with a citation"
            if failure is None:
                verify_start = elapsed()
                reply = "".join(parts)
                numbered = _numbered(prompt.passages, working)
                attributed = attributor.attributed_numbers
                checked = await asyncio.to_thread(verify, reply, numbered, cache, attributed=attributed)
                verify_ms = elapsed() - verify_start
                # A reply whose every citation is flagged says things its passages do not (a 0.5B model
                # copies its prompt's example, or answers a question the passages are not about).
                if not any(c.supported for c in checked.citations):
                    failure = "no sentence of the model's reply is backed by the passage it cites"
            if failure is None:
                text = reply
                # The same chunks in the same order as the working copy: the caller's numbers match.
                for chunk_id in working.chunk_ids[len(numbering) :]:
                    numbering.number(chunk_id)
        streamed = first_token is not None
        if llm is None or failure is not None:
            extract = await asyncio.to_thread(extractive_answer, question, given, numbering, cache)
            text = extract.text
            if not streamed:
                first_token = elapsed()
                yield Token(text)
            verify_start = elapsed()
            checked = await asyncio.to_thread(verify, text, _numbered(given, numbering), cache)
            verify_ms = elapsed() - verify_start
        assert checked is not None
    except CitelineError as exc:
        yield Error(message=str(exc), exception=exc)
        return
    for citation in checked.citations:
        yield CitationEvent(citation)
    yield Complete(
        answer=text,
        citations=checked.citations,
        removed=removed,
        unsupported=checked.unsupported,
        uncited=checked.uncited,
        provider=provider if failure is None else EXTRACTIVE,
        fell_back=failure is not None,
        fallback_reason=failure,
        stream_replaced=failure is not None and streamed,
        evidence_missing=False,
        timings=AnswerTimings(prompt_ms, first_token, generation_ms, verify_ms, elapsed()),
    )


def answer(
    question: str,
    evidence: Sequence[Hit],
    *,
    llm: LLM | None,
    embedder: Embedder,
    numbering: CitationNumbering,
    persona: str,
    options: GenerationOptions,
    max_evidence_tokens: int | None = None,
    min_similarity: float = 0.0,
) -> Complete:
    """:func:`answer_stream` run to the end, for callers without an event loop.

    It starts its own loop, so it cannot be called from inside a running one (use the stream there).
    An :class:`Error` event is raised as the error it carries.
    """

    async def run() -> Complete:
        stream = answer_stream(
            question,
            evidence,
            llm=llm,
            embedder=embedder,
            numbering=numbering,
            persona=persona,
            options=options,
            max_evidence_tokens=max_evidence_tokens,
            min_similarity=min_similarity,
        )
        async for event in stream:
            if isinstance(event, Error):
                raise event.exception or CitelineError(event.message)
            if isinstance(event, Complete):
                return event
        raise CitelineError(f"the answer to {question!r} ended without completing")

    return asyncio.run(run())


def _numbered(passages: Sequence[Passage], numbering: CitationNumbering) -> dict[int, Passage]:
    """The passages given this turn that ``numbering`` cites, by their conversation number."""
    return {n: p for p in passages if (n := numbering.get(p.chunk_id)) is not None}


def _may_be_refusal(reply: str) -> bool:
    return REFUSAL.casefold().startswith(reply.strip().casefold())


def _complete(text: str, provider: str, timings: AnswerTimings, *, missing: bool) -> Complete:
    return Complete(
        answer=text,
        citations=(),
        removed=(),
        unsupported=(),
        uncited=(),
        provider=provider,
        fell_back=False,
        fallback_reason=None,
        stream_replaced=False,
        evidence_missing=missing,
        timings=timings,
    )


async def _generate(
    llm: LLM, messages: Sequence[Message], options: GenerationOptions
) -> AsyncGenerator[str, None]:
    """The model's pieces, produced in a worker thread and awaited here.

    ``options.timeout`` bounds the wait for each piece: a model silent that long is a failed generation.
    Leaving early (the client went away) tells the worker to stop at its next piece.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, str | BaseException | None]] = asyncio.Queue()
    stop = threading.Event()

    def put(kind: str, value: str | BaseException | None) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, value))
        except RuntimeError:
            # The loop has closed: nobody is listening any more.
            stop.set()

    def work() -> None:
        try:
            pieces = llm.stream(messages, options)
            try:
                for piece in pieces:
                    if stop.is_set():
                        break
                    put("piece", piece)
            finally:
                close = getattr(pieces, "close", None)
                if callable(close):
                    close()
        except BaseException as exc:
            # Raised again on the event loop, where the caller can handle it.
            put("error", exc)
            return
        put("done", None)

    threading.Thread(target=work, name=f"citeline-llm-{llm.model_id}", daemon=True).start()
    try:
        while True:
            try:
                kind, value = await asyncio.wait_for(queue.get(), timeout=options.timeout)
            except TimeoutError:
                raise GenerationError(
                    f"{llm.model_id}: no output for {options.timeout:g} s (CITELINE_LLM_TIMEOUT)"
                ) from None
            if isinstance(value, BaseException):
                raise value
            if kind == "done":
                return
            assert isinstance(value, str)
            yield value
    finally:
        stop.set()
