"""The events an answer streams: Start, Tokens (with a CitationEvent after the Token in which a citation
number first appears), UnsupportedClaims, then Complete (or Error). docs/answers.md lists the payloads.

Every event has ``as_dict()`` (JSON-ready, with a ``type`` key) for shells that stream them as JSON
lines or server-sent events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from citeline.answer.citations import Citation, RemovedCitation, UnsupportedSentence
from citeline.answer.prompt import Passage
from citeline.answer.stance import Stance, Verdict, verdict_of
from citeline.errors import CitelineError


@dataclass(frozen=True)
class Start:
    """The answer begins: the question, the passages given (numbered per turn), who answers."""

    question: str
    passages: tuple[Passage, ...]
    provider: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": "start",
            "question": self.question,
            "provider": self.provider,
            "passages": [
                {
                    "number": p.number,
                    "chunk_id": p.chunk_id,
                    "document_id": str(p.hit.document_id),
                    "document_name": p.hit.document_name,
                    "title": p.hit.title,
                    "version": p.hit.version,
                    "page": p.hit.page,
                    "rows": None if p.hit.rows is None else list(p.hit.rows),
                    "start": p.start,
                    "end": p.end,
                    "truncated": p.truncated,
                    # What the model read, as page spans: the passage's sentences chosen for the question.
                    "shown": None
                    if p.shown is None
                    else [[p.start + start, p.start + end] for start, end in p.shown],
                    "also_in": [copy.as_dict() for copy in p.hit.also_in],
                    "has_original": p.hit.has_original,
                    "source_url": p.hit.source_url,
                }
                for p in self.passages
            ],
        }


@dataclass(frozen=True)
class Token:
    """A piece of answer text, with conversation-wide citation numbers already in place."""

    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"type": "token", "text": self.text}


@dataclass(frozen=True)
class CitationEvent:
    """A citation number the first time it appears in the streamed text, right after that Token.

    ``passage`` is the cited passage, given the first time its chunk is cited in the conversation;
    None when an earlier turn cited it (the client has it already). The checked citation, with its
    excerpt and support score, comes with :class:`Complete`. When ``Complete.stream_replaced`` says
    the streamed text was replaced, so were its citations: Complete's are the ones that stand.
    """

    number: int
    passage: Passage | None
    stance: Stance = "neutral"

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": "citation",
            "number": self.number,
            "stance": self.stance,
            "passage": None if self.passage is None else passage_dict(self.passage),
        }


def passage_dict(passage: Passage) -> dict[str, Any]:
    """A cited passage as a citation event sends it: where it is and its whole text."""
    hit = passage.hit
    return {
        "chunk_id": hit.chunk_id,
        "document_id": str(hit.document_id),
        "document_name": hit.document_name,
        "title": hit.title,
        "version": hit.version,
        "page": hit.page,
        "rows": None if hit.rows is None else list(hit.rows),
        "start": passage.start,
        "end": passage.end,
        "text": passage.text,
        "also_in": [copy.as_dict() for copy in hit.also_in],
        "has_original": hit.has_original,
        "source_url": hit.source_url,
    }


@dataclass(frozen=True)
class UnsupportedClaim:
    """A cited sentence of the answer that its passages do not back, flagged once the answer is checked."""

    sentence: UnsupportedSentence

    def as_dict(self) -> dict[str, Any]:
        return {"type": "unsupported", **_unsupported_dict(self.sentence)}


def _unsupported_dict(sentence: UnsupportedSentence) -> dict[str, Any]:
    return {"text": sentence.text, "numbers": list(sentence.numbers), "score": round(sentence.score, 4)}


@dataclass(frozen=True)
class AnswerTimings:
    """Milliseconds from the start of the answer (retrieval already done).

    ``first_token`` is when the first Token event was ready (None when none was sent); ``generation`` is
    the model's whole reply, 0 without a model.
    """

    prompt: float
    first_token: float | None
    generation: float
    verify: float
    total: float


@dataclass(frozen=True)
class Complete:
    """The finished answer.

    ``answer`` is the final text. It equals the Token texts joined, except when ``stream_replaced``:
    the model had already streamed text when it failed or turned out to cite nothing, and the
    extractive ``answer`` replaces what was shown. ``fell_back`` says the extractive answerer answered
    instead of the model, ``fallback_reason`` why. ``evidence_missing`` says no passage was found, so
    nothing was generated. ``removed`` lists citations the model wrote to passages it was not given;
    ``unsupported`` the cited sentences their passages do not back; ``uncited`` the claims with no
    citation. ``claim`` is the claim the question put to the evidence, when it put one and a judge
    assessed it; the answer then opens with :attr:`verdict` in plain words.
    """

    answer: str
    citations: tuple[Citation, ...]
    removed: tuple[RemovedCitation, ...]
    unsupported: tuple[UnsupportedSentence, ...]
    uncited: tuple[str, ...]
    provider: str
    fell_back: bool
    fallback_reason: str | None
    stream_replaced: bool
    evidence_missing: bool
    timings: AnswerTimings
    claim: str | None = None

    @property
    def verdict(self) -> Verdict | None:
        """What the cited passages say of ``claim`` (None when the question put no claim to them).

        Computed from the citations' stances, so a verdict always has a citation that bears it out.
        """
        return None if self.claim is None else verdict_of(c.stance for c in self.citations)

    @property
    def cited_chunk_ids(self) -> list[int]:
        """What a conversation stores for this message: the chunks cited, in order of first citation."""
        return [c.chunk_id for c in self.citations]

    def as_dict(self) -> dict[str, Any]:
        first_token = self.timings.first_token
        return {
            "type": "complete",
            "answer": self.answer,
            "claim": self.claim,
            "verdict": self.verdict,
            "citations": [c.as_dict() for c in self.citations],
            "removed": [
                {"number": r.number, "occurrences": r.occurrences, "reason": r.reason} for r in self.removed
            ],
            "unsupported": [_unsupported_dict(u) for u in self.unsupported],
            "uncited": list(self.uncited),
            "provider": self.provider,
            "fell_back": self.fell_back,
            "fallback_reason": self.fallback_reason,
            "stream_replaced": self.stream_replaced,
            "evidence_missing": self.evidence_missing,
            "timings_ms": {
                "prompt": round(self.timings.prompt, 2),
                "first_token": None if first_token is None else round(first_token, 2),
                "generation": round(self.timings.generation, 2),
                "verify": round(self.timings.verify, 2),
                "total": round(self.timings.total, 2),
            },
        }


@dataclass(frozen=True)
class Error:
    """The answer failed after it started; ``message`` names the request and the reason."""

    message: str
    exception: CitelineError | None = field(default=None, compare=False, repr=False)

    def as_dict(self) -> dict[str, Any]:
        status = self.exception.http_status if self.exception is not None else 500
        return {"type": "error", "message": self.message, "http_status": status}


Event = Start | Token | CitationEvent | UnsupportedClaim | Complete | Error
"""Anything an answer stream yields."""
