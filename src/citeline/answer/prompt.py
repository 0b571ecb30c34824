"""Prompt assembly: numbered evidence blocks and a system prompt per persona.

Each retrieved passage given to the model gets a per-turn number ``[n]`` that stands for its chunk id
(the stable source id); the citation stage maps those numbers back to chunks and on to the
conversation's own numbering. Prompts are kept short on purpose: the default model is a 0.5B one on
two CPU cores, where every prompt token adds to the time before the first answer token.

The system prompt depends only on the persona and the evidence goes in the user message, so the
system prefix is the same across requests and a server with a prompt cache can reuse it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from citeline.answer.llm import Message
from citeline.errors import InvalidRequestError
from citeline.retrieve.search import Hit

CHARS_PER_TOKEN = 4
"""The rough size of a token in English text, used to budget evidence without running a tokenizer."""

MIN_EVIDENCE_TOKENS = 32
"""The smallest evidence budget accepted: room for one header and a sentence or two."""

# A truncated passage shorter than this is dropped rather than given: a fragment invites misreading.
_MIN_TRUNCATED_CHARS = 120
_ELLIPSIS = "\u2026"

_RULES = (
    "Answer only from the numbered sources. After each claim, cite its source number in brackets, "
    "like [1] or [1][3]; use only the numbers shown. If the sources do not answer the question, say so "
    "plainly. Do not list the sources at the end."
)

PERSONAS: Mapping[str, str] = {
    "general": f"You answer questions from documents. {_RULES} Be brief.",
    "clinical": (
        f"You summarise clinical evidence for health professionals. {_RULES} Report what the studies "
        "found and their limits, cautiously. Give no advice, diagnosis or dosing beyond what the sources "
        "state."
    ),
    "repair": (
        f"You assist a repair technician, answering from device manuals. {_RULES} Give procedures as "
        "numbered steps, and put any safety warning from the sources first."
    ),
}
"""The system prompt of each persona, by name."""


def system_prompt(persona: str) -> str:
    """The system prompt of ``persona``; an unknown name is an :class:`InvalidRequestError`."""
    try:
        return PERSONAS[persona]
    except KeyError:
        raise InvalidRequestError(
            f"unknown persona {persona!r}; known personas: {', '.join(PERSONAS)}"
        ) from None


@dataclass(frozen=True)
class Passage:
    """One passage as given to the model: its per-turn number, its hit, and the text actually shown.

    ``start`` and ``end`` are the character span of ``text`` in its page: the hit's own span, or a
    shorter one when the evidence budget truncated the passage.
    """

    number: int
    hit: Hit
    text: str
    start: int
    end: int

    @property
    def chunk_id(self) -> int:
        return self.hit.chunk_id

    @property
    def truncated(self) -> bool:
        return self.end - self.start < self.hit.end - self.hit.start

    @property
    def header(self) -> str:
        return f"[{self.number}] {self.hit.title or self.hit.document_name} (p. {self.hit.page})"

    @property
    def block(self) -> str:
        """The evidence block: ``[n] <title> (p. <page>)`` then the text."""
        return f"{self.header}\n{self.text}"


@dataclass(frozen=True)
class Prompt:
    """The messages for the model and the passages they number, in order (``passages[i].number == i + 1``)."""

    persona: str
    messages: tuple[Message, ...]
    passages: tuple[Passage, ...]

    def passage(self, number: int) -> Passage | None:
        """The passage numbered ``number`` in this prompt, or None when no such passage was given."""
        return self.passages[number - 1] if 1 <= number <= len(self.passages) else None

    @property
    def approx_tokens(self) -> int:
        return approx_tokens("".join(m.content for m in self.messages))


def approx_tokens(text: str) -> int:
    """Tokens in ``text``, estimated as characters / 4."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def select_passages(evidence: Sequence[Hit], max_evidence_tokens: int | None = None) -> list[Passage]:
    """Number the evidence, best first, and trim it to the budget.

    Repeated chunks are given once. With a budget (in approximate tokens over the evidence blocks),
    passages are kept in order while they fit; the first that does not fit is truncated at a word
    boundary (or dropped when too little of it would remain) and the rest are left out. The first
    passage is always given, truncated if need be.
    """
    if max_evidence_tokens is not None and max_evidence_tokens < MIN_EVIDENCE_TOKENS:
        raise InvalidRequestError(
            f"max_evidence_tokens must be at least {MIN_EVIDENCE_TOKENS}, got {max_evidence_tokens}"
        )
    budget = math.inf if max_evidence_tokens is None else max_evidence_tokens * CHARS_PER_TOKEN
    passages: list[Passage] = []
    seen: set[int] = set()
    for hit in evidence:
        if hit.chunk_id in seen:
            continue
        seen.add(hit.chunk_id)
        passage = Passage(number=len(passages) + 1, hit=hit, text=hit.text, start=hit.start, end=hit.end)
        # Blocks are separated by a blank line.
        cost = len(passage.block) + 2
        if cost <= budget:
            passages.append(passage)
            budget -= cost
            continue
        room = int(budget) - len(passage.header) - 3 - len(_ELLIPSIS)
        if room >= _MIN_TRUNCATED_CHARS or (not passages and room > 0):
            passages.append(_truncate(passage, room))
        break
    return passages


def _truncate(passage: Passage, room: int) -> Passage:
    text = passage.text[:room]
    cut = text.rfind(" ")
    if cut > room // 2:
        text = text[:cut]
    text = text.rstrip()
    return Passage(
        number=passage.number,
        hit=passage.hit,
        text=text + _ELLIPSIS,
        start=passage.start,
        end=passage.start + len(text),
    )


def build_prompt(
    question: str, evidence: Sequence[Hit], *, persona: str, max_evidence_tokens: int | None = None
) -> Prompt:
    """The system and user messages answering ``question`` from ``evidence`` (best first)."""
    system = system_prompt(persona)
    if not question.strip():
        raise InvalidRequestError("the question is empty")
    passages = select_passages(evidence, max_evidence_tokens)
    sources = "\n\n".join(p.block for p in passages)
    user = f"Sources:\n\n{sources}\n\nQuestion: {question.strip()}"
    return Prompt(
        persona=persona,
        messages=(Message("system", system), Message("user", user)),
        passages=tuple(passages),
    )
