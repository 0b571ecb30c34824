"""Answering: evidence -> prompt -> LLM -> answer -> cite (parse, verify, number) -> a stream of events.

:func:`answer_stream` is the one implementation; :func:`answer` runs it for callers without an event loop.
It runs in stages, each a small function of its own:

1. :func:`_prepare`: check the request, focus the evidence, build the prompt and the passages given;
2. :func:`_assess`: for a question that puts a claim, the stance of the passages judged and the
   verdict, which the answer opens with (:class:`_Opening`, see :mod:`citeline.answer.stance`); the
   model is then asked only what the passages bearing the verdict out found (:func:`_for_claim`);
3. :class:`_Draft`: generate, rewriting citations to conversation numbers and attributing uncited
   sentences as the reply streams, holding back what may be a refusal;
4. :meth:`_Draft.failure`: check the finished reply (a refusal, nothing cited, nothing said);
5. :func:`_ground`: verify its citations; a reply none of whose citations is backed fails;
6. :func:`_extract`: the extractive answer, when there is no model or the model's reply failed;
7. :func:`_opened`: the opening put before the answer, the whole checked again;
8. :func:`_finish`: the flags of unsupported sentences, then :class:`Complete` with the stances.

:class:`_Announcer` turns each citation number, the first time it appears in the streamed text, into a
:class:`CitationEvent`.

The model's streaming iterator is synchronous (a local model computes in the calling thread), so it runs
in a worker thread that hands pieces to the event loop through a queue; embedding (extractive answers,
citation checks) runs in worker threads too. The loop is never blocked: other requests go on while the
model thinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from citeline.answer.attribution import Attributor
from citeline.answer.citations import (
    CitationNumbering,
    CitationRewriter,
    RemovedCitation,
    Verification,
    cited_numbers,
    claims,
    has_cited_statement,
    verify,
)
from citeline.answer.events import (
    AnswerTimings,
    CitationEvent,
    Complete,
    Error,
    Event,
    Start,
    Token,
    UnsupportedClaim,
)
from citeline.answer.evidence import check_evidence_budget, focus_passages
from citeline.answer.extractive import extractive_answer
from citeline.answer.llm import LLM, AnswerShape, GenerationOptions, Message
from citeline.answer.nli import default_judge
from citeline.answer.prompt import (
    EVIDENCE_HEADING,
    Passage,
    Prompt,
    build_findings_prompt,
    build_prompt,
    check_request,
    declines,
    may_decline,
    select_passages,
)
from citeline.answer.relevance import answerable
from citeline.answer.stance import (
    Assessment,
    Stance,
    StanceJudge,
    asks_yes_no,
    assess,
    claim_of,
    verdict_sentence,
)
from citeline.answer.support import VectorCache, content_terms
from citeline.embed.base import Embedder
from citeline.errors import CitelineError, GenerationError
from citeline.retrieve.search import Hit

EXTRACTIVE = "extractive"
"""The provider name of answers built without a model."""

EVIDENCE_MISSING = (
    "No passage in the documents matches this question closely enough, so there is no evidence to "
    "answer it from."
)
"""What citeline says, without calling the model, when no passage found is close enough to answer from."""

NO_PASSAGES = (
    "The search found no passage at all in the documents it may read (check the scope and the filters "
    "asked for, and that documents are ingested), so there is no evidence to answer from."
)
"""What citeline says, without calling the model, when the search found nothing to weigh: the filters
matched no document, or there are none (told apart from passages found and judged too far)."""


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
    judge: StanceJudge | None = None,
    claim_text: str | None = None,
    model_question: str | None = None,
) -> AsyncGenerator[Event, None]:
    """Answer ``question`` from ``evidence`` (retrieved hits, best first), as a stream of events.

    ``llm`` None means the extractive answerer. ``numbering`` is the conversation's citation numbering;
    it gains numbers for the chunks this answer cites (and only those: a reply that is thrown away
    leaves it unchanged). ``embedder`` scores sentences: to focus the evidence, to attribute uncited
    sentences, to check citations and to pick extractive sentences. ``max_evidence_tokens`` bounds
    the evidence the model reads (see :mod:`citeline.answer.evidence`); None gives it whole chunks.
    Evidence that fails :func:`~citeline.answer.relevance.answerable` at ``min_similarity`` (with
    ``claim_text`` as the user's own words) counts as none: the answer says the documents hold no
    evidence, and no model is called.

    ``claim_text`` is what the user typed when it is not ``question`` itself: a conversation searches a
    follow-up with terms borrowed from earlier turns, but judges the claim the user made, and the
    extractive answer weighs the user's own words (see :func:`~citeline.answer.extractive.extractive_answer`).
    ``model_question`` is the question the model reads, when it is not ``question``: a search query such as
    "can they be reused? (elastic stop nut)" finds and focuses the evidence, and the model is asked a
    question (:func:`~citeline.chat.rewrite.asked_of_model`).
    A question that puts a claim (:func:`~citeline.answer.stance.claim_of`) is assessed by ``judge``
    (default: the packaged NLI classifier, whichever ``llm`` writes): the answer opens with the verdict
    and every citation carries its passage's stance (see :mod:`citeline.answer.stance`); the model
    reads only the passages that bear the verdict out, and says what they found. When judging fails,
    the answer has no verdict and the model is asked the question.

    Yields :class:`Start` (with every passage given: those the model reads, numbered first, then any the
    evidence budget left out, with nothing shown), :class:`Token` pieces, a :class:`CitationEvent` the
    first time each citation number appears in them, an :class:`UnsupportedClaim` per cited sentence
    its passages do not back, then :class:`Complete` with the answer and all its citations. When
    something other than the model fails, an :class:`Error` ends the stream (before :class:`Start` if
    focusing the evidence failed). A bad request (unknown persona, empty question, too small a budget)
    raises :class:`~citeline.errors.InvalidRequestError` before anything is yielded.
    """
    clock = _Clock()
    # A bad request fails before anything is yielded: checked before the evidence is focused.
    check_request(question, persona=persona)
    check_evidence_budget(max_evidence_tokens)
    cache = VectorCache(embedder)
    try:
        prepared = await _prepare(
            question,
            evidence
            if answerable(
                question, evidence, min_similarity=min_similarity, own_words=claim_text, cache=cache
            )
            else [],
            focus=llm is not None,
            cache=cache,
            persona=persona,
            max_evidence_tokens=max_evidence_tokens,
            model_question=model_question,
        )
        assessment = await _assess(
            question if claim_text is None else claim_text, prepared.prompt, judge or default_judge(), cache
        )
        if llm is not None and assessment is not None:
            prepared = await _for_claim(question, prepared, assessment, cache, max_evidence_tokens)
    except CitelineError as exc:
        yield Error(message=str(exc), exception=exc)
        return
    prompt_ms = clock.ms()
    provider = llm.model_id if llm is not None else EXTRACTIVE
    yield Start(question=question, passages=prepared.given, provider=provider)
    if not prepared.given:
        said = EVIDENCE_MISSING if evidence else NO_PASSAGES
        yield Token(said)
        yield _missing(provider, said, AnswerTimings(prompt_ms, clock.ms(), 0.0, 0.0, clock.ms()))
        return

    result: _Result | None = None
    first_token: float | None = None
    try:
        working = numbering.copy()
        asked = asks_yes_no(question if claim_text is None else claim_text)
        opening = _Opening.of(assessment, prepared.given, working, asked=asked)
        announcer = _Announcer(prepared.given, numbered_before=len(numbering), assessment=assessment)
        if opening is not None:
            first_token = clock.ms()
            yield Token(opening.text + " ")
            for citation in announcer.announce(opening.text, working):
                yield citation
        draft: _Draft | None = None
        if llm is not None:
            # Asked for findings, the model may restate the claim the verdict judged: not checked then.
            draft = _Draft(
                prepared.prompt,
                working,
                cache,
                question=question if assessment is None else None,
                asked=model_question or question,
            )
            async for text in draft.generate(llm, options):
                first_token = first_token if first_token is not None else clock.ms()
                yield Token(text)
                for citation in announcer.announce(text, draft.numbering):
                    yield citation
            result = await _ground(draft, numbering, cache, clock, prompt_ms)
        if result is None or result.failure is not None:
            # The opening's chunks keep the numbers already shown, ahead of the extract's.
            for chunk_id in opening.chunk_ids if opening is not None else ():
                numbering.number(chunk_id)
            lead = opening.chunk_ids if opening is not None else ()
            extract = await _extract(question, prepared.given, numbering, cache, clock, claim_text, lead)
            if draft is None or draft.sent == 0:
                first_token = first_token if first_token is not None else clock.ms()
                yield Token(extract.text)
                for citation in announcer.announce(extract.text, numbering):
                    yield citation
            result = extract.after(result, streamed=draft is not None and draft.sent > 0)
        if opening is not None:
            result = await _opened(result, opening, prepared.given, numbering, cache)
    except CitelineError as exc:
        yield Error(message=str(exc), exception=exc)
        return
    for event in _finish(result, assessment, provider, prompt_ms, first_token, clock):
        yield event


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


class _Clock:
    """Milliseconds since the answer began."""

    def __init__(self) -> None:
        self._began = time.perf_counter()

    def ms(self) -> float:
        return (time.perf_counter() - self._began) * 1e3


@dataclass(frozen=True)
class _Prepared:
    """The prompt (the passages the model reads) and every passage given (the rest, unread, after)."""

    prompt: Prompt
    given: tuple[Passage, ...]


async def _prepare(
    question: str,
    evidence: Sequence[Hit],
    *,
    focus: bool,
    cache: VectorCache,
    persona: str,
    max_evidence_tokens: int | None,
    model_question: str | None = None,
) -> _Prepared:
    """Stage 1: the passages the model reads (focused on the question when ``focus``) and all given;
    the prompt asks ``model_question``, or the question itself."""
    if focus:
        passages = await asyncio.to_thread(
            focus_passages, question, evidence, cache, max_tokens=max_evidence_tokens
        )
    else:
        # The extractive answerer quotes whole chunks and reads no prompt: nothing to focus.
        passages = select_passages(evidence)
    prompt = build_prompt(model_question or question, passages, persona=persona)
    return _Prepared(prompt=prompt, given=_given(prompt, evidence))


def _given(prompt: Prompt, evidence: Sequence[Hit]) -> tuple[Passage, ...]:
    """The prompt's passages, then the rest of the evidence, numbered after them, with nothing shown."""
    # The passages the prompt leaves out are given too, with nothing shown to the model: the model
    # cannot cite them, but the extractive answer quotes whole chunks and may (of 100 SciFact claims,
    # the gold abstract was among the 5 retrieved passages for 81 and among those the model read for 76).
    read = {p.chunk_id for p in prompt.passages}
    unread = (p for p in select_passages(evidence) if p.chunk_id not in read)
    return (
        *prompt.passages,
        *(Passage(number=len(read) + i, hit=p.hit, shown=()) for i, p in enumerate(unread, start=1)),
    )


async def _assess(question: str, prompt: Prompt, judge: StanceJudge, cache: VectorCache) -> Assessment | None:
    """Stage 2: the stances of the passages the model reads towards the question's claim, if it puts one.

    None when the question puts no claim, or when judging fails: the answer goes on without a verdict.
    """
    claim = claim_of(question)
    if claim is None or not prompt.passages:
        return None
    try:
        return await asyncio.to_thread(assess, claim, prompt.passages, judge, cache)
    except GenerationError:
        return None


async def _for_claim(
    question: str,
    prepared: _Prepared,
    assessment: Assessment,
    cache: VectorCache,
    max_evidence_tokens: int | None,
) -> _Prepared:
    """Stage 2, for a model: the prompt asking what the passages that bear out the verdict found.

    The verdict is decided, so the model reads only those passages (their sentences that best match
    the question, within the budget all five passages had) and reports their findings, with no way to
    decline: asked the open question with five passages, the 0.5B model declined 29 of 30 SciFact
    claims. Unchanged when no passage bears the verdict out (``not_enough_evidence``).
    """
    bearing = assessment.bearing(prepared.prompt.passages)
    if not bearing:
        return prepared
    hits = [p.hit for p in bearing]
    passages = await asyncio.to_thread(focus_passages, question, hits, cache, max_tokens=max_evidence_tokens)
    prompt = build_findings_prompt(passages, persona=prepared.prompt.persona)
    return _Prepared(prompt=prompt, given=_given(prompt, [p.hit for p in prepared.given]))


@dataclass(frozen=True)
class _Opening:
    """The verdict sentence the answer opens with, the chunks it cites (numbered in that order), and the
    claim it judges."""

    text: str
    chunk_ids: tuple[int, ...]
    claim: str

    @classmethod
    def of(
        cls,
        assessment: Assessment | None,
        given: Sequence[Passage],
        working: CitationNumbering,
        *,
        asked: bool = False,
    ) -> _Opening | None:
        """The opening for ``assessment``, numbering the passages it cites in ``working``; ``asked``: the
        question asked yes or no, and the opening answers it (:func:`verdict_sentence`)."""
        if assessment is None:
            return None
        bearing = assessment.bearing(given)
        numbers: dict[Stance, list[int]] = {}
        for passage in bearing:
            numbers.setdefault(assessment.stance(passage.chunk_id), []).append(
                working.number(passage.chunk_id)
            )
        # A passage whose numbers differ from the claim's is cited for them, with a neutral stance.
        differing = assessment.differing(given)
        noted = [(working.number(p.chunk_id), assessment.disagreements[p.chunk_id]) for p in differing]
        return cls(
            text=verdict_sentence(assessment.verdict, numbers, noted, asked=asked),
            chunk_ids=tuple(p.chunk_id for p in [*bearing, *differing]),
            claim=assessment.claim,
        )


class _Draft:
    """Stage 3: the model's reply as it streams, rewritten and attributed, into a working numbering.

    The working numbering is a copy of the conversation's (holding the opening's numbers, if any): the
    reply's numbers reach the conversation only if the reply stands (:func:`_ground`). ``sent`` counts
    the characters of the reply shown so far.
    """

    def __init__(
        self,
        prompt: Prompt,
        working: CitationNumbering,
        cache: VectorCache,
        *,
        question: str | None = None,
        asked: str = "",
    ) -> None:
        self.prompt = prompt
        self.question = question
        self.asked = asked
        self.numbering = working
        self.rewriter = CitationRewriter(prompt.passages, self.numbering)
        self.attributor = Attributor(
            prompt.passages,
            self.numbering,
            cache,
            never=(prompt.refusal,) if prompt.refusal else (),
            question=asked,
        )
        self.reply = ""
        self.sent = 0
        self.error: str | None = None
        self.generation_ms = 0.0

    async def generate(self, llm: LLM, options: GenerationOptions) -> AsyncGenerator[str, None]:
        """The text to show, piece by piece; a failed generation is recorded in ``error``, not raised.

        A reply that may still turn out to be the refusal, in its words or in others, is held back: it
        is replaced by the extractive answer, so it is never shown (:meth:`_held`).
        """
        began = time.perf_counter()
        refusal = self.prompt.refusal
        shape = AnswerShape(
            passages=len(self.prompt.passages),
            refusal=refusal,
            not_opening=EVIDENCE_HEADING,
        )
        try:
            # Closed on the way out, however it is left, so the worker stops at its next piece.
            async with contextlib.aclosing(
                _generate(llm, self.prompt.messages, replace(options, shape=shape))
            ) as pieces:
                async for piece in pieces:
                    shown = self.rewriter.feed(piece)
                    if shown:
                        # Scoring an uncited sentence embeds it: off the event loop.
                        self.reply += await asyncio.to_thread(self.attributor.feed, shown)
                    if len(self.reply) > self.sent and not self._held():
                        yield self._unsent()
            rest = self.rewriter.finish()
            attributor = self.attributor
            self.reply += await asyncio.to_thread(lambda: attributor.feed(rest) + attributor.finish())
            if len(self.reply) > self.sent and not declines(self.reply, refusal):
                yield self._unsent()
        except GenerationError as exc:
            self.error = f"generation failed: {exc}"
        finally:
            self.generation_ms = (time.perf_counter() - began) * 1e3

    def _held(self) -> bool:
        """Whether the reply so far is held back: it may still be the refusal, word for word or in
        other words ("The passages do not say ..."), and what is shown is never taken back for it."""
        if _may_be(self.prompt.refusal, self.reply):
            return True
        # Once part of the reply is shown, it is no refusal: the rest streams.
        return self.sent == 0 and may_decline(self.reply, self.prompt.refusal, self.asked)

    def _unsent(self) -> str:
        text, self.sent = self.reply[self.sent :], len(self.reply)
        return text

    @property
    def removed(self) -> tuple[RemovedCitation, ...]:
        return (*self.rewriter.removed, *self.attributor.removed)

    def failure(self) -> str | None:
        """Stage 4: why the finished reply cannot stand on its face, or None."""
        if self.error is not None:
            return self.error
        # The refusal, word for word or bent ("Citeline does not answer the question. [1]").
        if declines(self.reply, self.prompt.refusal):
            return "the model found no answer in the passages"
        if not self.rewriter.cited and not self.attributor.attributions:
            return "the model's reply cited no given passage, and no passage backs its sentences"
        if not has_cited_statement(self.reply):
            return "the model's reply made no statement with a citation"
        if self.question is not None and _restates(self.reply, self.question):
            return "the model's reply only repeats the question's words"
        return None


@dataclass(frozen=True)
class _Result:
    """The answer decided on: its text and checked citations, or the reason the model's reply failed.

    ``verification`` is None only for a failed reply (the fallback replaces it).
    """

    text: str
    verification: Verification | None
    removed: tuple[RemovedCitation, ...]
    failure: str | None
    stream_replaced: bool
    generation_ms: float
    verify_ms: float


async def _ground(
    draft: _Draft, numbering: CitationNumbering, cache: VectorCache, clock: _Clock, prompt_ms: float
) -> _Result:
    """Stage 5: verify the reply's citations; a reply with no backed citation fails.

    A reply that stands gives its numbers to the conversation's ``numbering``.
    """

    def failed(reason: str, verify_ms: float = 0.0) -> _Result:
        return _Result("", None, draft.removed, reason, False, draft.generation_ms, verify_ms)

    reason = draft.failure()
    if reason is not None:
        return failed(reason)
    began = clock.ms()
    numbered = _numbered(draft.prompt.passages, draft.numbering)
    checked = await asyncio.to_thread(
        verify,
        draft.reply,
        numbered,
        cache,
        attributed=draft.attributor.attributed_numbers,
        question=draft.asked,
        instructions="\n".join(m.content for m in draft.prompt.messages if m.role == "system"),
    )
    verify_ms = clock.ms() - began
    # A reply whose every citation is flagged says things its passages do not (a 0.5B model copies its
    # prompt's example, or answers a question the passages are not about).
    if not any(c.supported for c in checked.citations):
        return failed("no sentence of the model's reply is backed by the passage it cites", verify_ms)
    # The same chunks in the same order as the working copy: the caller's numbers match.
    for chunk_id in draft.numbering.chunk_ids[len(numbering) :]:
        numbering.number(chunk_id)
    return _Result(draft.reply, checked, draft.removed, None, False, draft.generation_ms, verify_ms)


@dataclass(frozen=True)
class _Extract:
    """Stage 6's answer: the extractive text and its checked citations."""

    text: str
    verification: Verification
    verify_ms: float

    def after(self, failed: _Result | None, *, streamed: bool) -> _Result:
        """The result once this answer stands in for ``failed`` (None: there was no model).

        ``streamed``: the model's text was already shown, so this answer replaces it.
        """
        if failed is None:
            return _Result(self.text, self.verification, (), None, False, 0.0, self.verify_ms)
        return replace(
            failed,
            text=self.text,
            verification=self.verification,
            stream_replaced=streamed,
            verify_ms=self.verify_ms,
        )


async def _extract(
    question: str,
    given: Sequence[Passage],
    numbering: CitationNumbering,
    cache: VectorCache,
    clock: _Clock,
    own_words: str | None = None,
    lead: Sequence[int] = (),
) -> _Extract:
    """Stage 6: the extractive answer from every passage given, its citations checked; the passages
    ``lead`` names (those bearing out the opening's verdict) are quoted first."""
    extract = await asyncio.to_thread(
        partial(extractive_answer, question, given, numbering, cache, own_words=own_words, lead=lead)
    )
    began = clock.ms()
    checked = await asyncio.to_thread(verify, extract.text, _numbered(given, numbering), cache)
    return _Extract(text=extract.text, verification=checked, verify_ms=clock.ms() - began)


async def _opened(
    result: _Result,
    opening: _Opening,
    given: Sequence[Passage],
    numbering: CitationNumbering,
    cache: VectorCache,
) -> _Result:
    """Stage 7: the answer with its opening, checked again as a whole.

    The opening's citations are backed by their stances, not by its wording: it is never flagged, and
    its citations are scored, and their excerpts chosen, for the claim it judges ("Yes: the sources
    support this claim" is not what a passage says).
    """
    text = f"{opening.text} {result.text}"
    before = result.verification.citations if result.verification is not None else ()
    attributed = {c.number for c in before if c.attributed}
    own = {c.sentence for c in claims(opening.text)}
    checked = await asyncio.to_thread(
        verify,
        text,
        _numbered(given, numbering),
        cache,
        attributed=attributed,
        read_as=dict.fromkeys(own, opening.claim),
    )
    checked = replace(
        checked,
        unsupported=tuple(u for u in checked.unsupported if u.text not in own),
        uncited=tuple(u for u in checked.uncited if u not in own),
    )
    return replace(result, text=text, verification=checked)


def _finish(
    result: _Result,
    assessment: Assessment | None,
    provider: str,
    prompt_ms: float,
    first_token: float | None,
    clock: _Clock,
) -> Iterator[Event]:
    """Stage 8: a flag per unsupported sentence, then :class:`Complete` with each citation's stance."""
    checked = result.verification
    assert checked is not None
    for sentence in checked.unsupported:
        yield UnsupportedClaim(sentence)
    citations = checked.citations
    if assessment is not None:
        citations = tuple(replace(c, stance=assessment.stance(c.chunk_id)) for c in citations)
    yield Complete(
        claim=assessment.claim if assessment is not None else None,
        answer=result.text,
        citations=citations,
        removed=result.removed,
        unsupported=checked.unsupported,
        uncited=checked.uncited,
        provider=provider if result.failure is None else EXTRACTIVE,
        fell_back=result.failure is not None,
        fallback_reason=result.failure,
        stream_replaced=result.stream_replaced,
        evidence_missing=False,
        timings=AnswerTimings(prompt_ms, first_token, result.generation_ms, result.verify_ms, clock.ms()),
    )


class _Announcer:
    """A :class:`CitationEvent` for each citation number the first time it appears in the streamed text.

    The event carries the whole passage when its chunk is new to the conversation (numbered after the
    ``numbered_before`` numbers earlier turns gave), and only the number otherwise: the client has the
    passage from an earlier turn.
    """

    def __init__(
        self, given: Sequence[Passage], *, numbered_before: int, assessment: Assessment | None
    ) -> None:
        self._passages = {p.chunk_id: p for p in given}
        self._assessment = assessment
        self._numbered_before = numbered_before
        self._announced: set[int] = set()

    def announce(self, text: str, numbering: CitationNumbering) -> Iterator[CitationEvent]:
        """Events for the numbers in ``text`` (written with ``numbering``) not announced before."""
        ids = numbering.chunk_ids
        for number in cited_numbers(text):
            if number in self._announced or not 1 <= number <= len(ids):
                continue
            self._announced.add(number)
            chunk_id = ids[number - 1]
            yield CitationEvent(
                number=number,
                passage=self._passages.get(chunk_id) if number > self._numbered_before else None,
                stance=self._assessment.stance(chunk_id) if self._assessment is not None else "neutral",
            )


def _numbered(passages: Sequence[Passage], numbering: CitationNumbering) -> Mapping[int, Passage]:
    """The passages given this turn that ``numbering`` cites, by their conversation number."""
    return {n: p for p in passages if (n := numbering.get(p.chunk_id)) is not None}


def _restates(reply: str, question: str) -> bool:
    """Whether every sentence of ``reply`` is made of ``question``'s words alone: it answers nothing.

    A 0.5B model echoes what it was asked ("The Boots self-locking nut work. [1]", asked "Can it be
    reused? (Boots self-locking nut work)"), and the echo scores well against any passage on the topic.
    """
    if _OFFERS_CHOICE.search(question):
        # "Which is larger, the M10 or the M12 bolt?" is answered in its own words: "The M12 bolt is
        # larger [1]." picks one of what it offered.
        return False
    asked = content_terms(question)
    sentences = claims(reply)
    said = [content_terms(c.text) for c in sentences]
    if bool(said) and all(terms <= asked for terms in said):
        return True
    # A question quoted whole inside a sentence ('... ask "how do I keep documents of one journey
    # apart?" is a command-line tool ...', from a passage showing the command that asks it) answers it
    # no more than the echo does. (A claim restated whole may open a reply that then judges it.)
    if not question.rstrip().endswith("?"):
        return False
    whole = " ".join(_WORD.findall(question.casefold()))
    return len(whole.split()) >= _QUOTED_QUESTION_WORDS and any(
        whole in " ".join(_WORD.findall(c.text.casefold())) for c in sentences
    )


#: A question this long, quoted whole in a reply's sentence, is the reply's echo of it.
_QUOTED_QUESTION_WORDS = 5
_WORD = re.compile(r"[^\W_]+")


_OFFERS_CHOICE = re.compile(r"\bor\b", re.IGNORECASE)


def _may_be(refusal: str, reply: str) -> bool:
    """Whether ``reply`` may still turn out to be ``refusal`` (never, when there is none)."""
    return bool(refusal) and refusal.casefold().startswith(reply.strip().casefold())


def _missing(provider: str, said: str, timings: AnswerTimings) -> Complete:
    return Complete(
        answer=said,
        citations=(),
        removed=(),
        unsupported=(),
        uncited=(),
        provider=provider,
        fell_back=False,
        fallback_reason=None,
        stream_replaced=False,
        evidence_missing=True,
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
