"""Prompt assembly: numbered evidence blocks and a system prompt per persona.

Each passage given to the model gets a per-turn number ``[n]`` that stands for its chunk id (the stable
source id); the citation stage maps those numbers back to chunks and on to the conversation's own
numbering. The evidence is laid out as blocks, ``[n] <title>`` then the sentences shown (see
:mod:`citeline.answer.evidence`), then the question.

Prompts are kept short on purpose: the default model is a 0.5B one on two CPU cores, where every prompt
token adds to the time before the first answer token. The system prompt depends only on the persona and
the evidence goes in the user message, so the system prefix is the same across requests and the model's
prompt cache reuses it. That is why it can afford a worked example, which is what makes a 0.5B model
cite: on 20 SciFact claims its own citations survived in 0 to 1 answers without one, 17 to 18 with it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from citeline.answer.llm import Message
from citeline.answer.support import Span, content_terms, normalise, sentence_spans, without_markers
from citeline.errors import InvalidRequestError
from citeline.retrieve.search import Hit

CHARS_PER_TOKEN = 4.6
"""Characters per token of the default model's tokenizer (Qwen2.5), measured on 300 SciFact chunks
(sentences alone: 4.58); evidence is budgeted with it, without running a tokenizer."""

MIN_EVIDENCE_TOKENS = 32
"""The smallest evidence budget accepted: room for one header and a sentence."""

TITLE_WORDS = 8
"""A longer title is cut to this many words in the evidence: scientific titles run to 20 words, and
every passage's header counts against the evidence budget."""

REFUSAL = "The sources do not answer the question."
"""What the model is told to reply, exactly, when the evidence does not answer the question."""

_SOURCES = r"(?:sources?|passages?|documents?|documentation|texts?|context|evidence|excerpts?)"
_DECLINING = re.compile(
    r"\b(?:(?:do|does|did|can|could)\s*(?:not|n't)|cannot)\s+answer\b|\bno answer\b"
    # The refusal in other words: "The passages do not say ...", "... is not mentioned in the sources".
    rf"|\b{_SOURCES}\s+(?:(?:provided|given|above|shown)\s+)?(?:do|does|did)\s*(?:not|n't)\s+"
    r"(?:say|mention|state|specify|contain|include|provide|describe|give|cover|address|discuss|explain|tell)\b"
    r"|\b(?:is|are|was|were)\s+not\s+(?:mentioned|stated|specified|given|described|discussed|covered|"
    rf"explained)\s+in\s+(?:the\s+|any\s+(?:of\s+the\s+)?)?(?:(?:provided|given)\s+)?{_SOURCES}\b"
    r"|\bthere\s+is\s+no\s+(?:information|mention)\b",
    re.IGNORECASE,
)
"""A sentence saying that something does not answer (the question), or that the sources do not say."""

# How a refusal in other words opens, before it says what it declines: the sources as its subject,
# "There is no ...", "I cannot ...", or a word of negation.
_DECLINING_OPENING = re.compile(
    r"^\W*(?:(?:the|these|those|this|our)\s+)?(?:(?:given|provided|above|available|retrieved)\s+)?"
    rf"(?:{_SOURCES}|information|manual|guide)\b|^\W*(?:there|no|none|nothing|neither|i|unfortunately|sorry)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(
    r"\b(?:not|no|cannot|never|nothing|none|neither|nor|unable)\b|n['\u2019]t\b", re.IGNORECASE
)
OPENING_WORDS = 4
"""Words of a reply held back before its opening can be told from a refusal's: a subject of up to three
words, then its verb ("Priming time is not mentioned ..."). It puts off the first word of an answer by
about 0.11 s with the default model (docs/answers.md)."""

EVIDENCE_HEADING = "Source"
"""The word the evidence opens with ("Sources:"); small models echo it, then list the sources back."""

_ELLIPSIS = "\u2026"

_RULES = (
    "Answer with 1 to 3 sentences taken from the numbered sources, each followed by the number of its "
    f"source, like [2]; use only the numbers shown. If the sources do not answer it, write: {REFUSAL}"
)

# One worked example, laid out as the real evidence is. The citation follows the full stop, the form
# a local model's output is held to (see citeline.answer.llm.AnswerShape).
_EXAMPLE = (
    "Example:\nSources:\n\n[1] Pump manual\nThe motor is rated 230 V.\n\n[2] Pump manual\n"
    "Never run the pump dry. Running without water destroys the seal within seconds.\n\n"
    "Question: What happens if the pump runs dry?\n"
    "Answer: Running without water destroys the seal within seconds. [2]"
)

_INTROS: Mapping[str, tuple[str, str]] = {
    "general": ("You answer questions from documents.", ""),
    "clinical": (
        "You summarise clinical evidence for health professionals.",
        " Report what the studies found and their limits, cautiously. Give no advice, diagnosis or dosing "
        "beyond what the sources state.",
    ),
    "repair": (
        "You assist a repair technician, answering from device manuals.",
        " Give procedures step by step, in order, and put any safety warning from the sources first.",
    ),
}
"""Each persona's role, then its guidance, which both kinds of system prompt carry."""

PERSONAS: Mapping[str, str] = {
    name: f"{intro} {_RULES}{guidance}\n\n{_EXAMPLE}" for name, (intro, guidance) in _INTROS.items()
}
"""The system prompt of each persona, by name."""

_CLAIM_RULES = (
    "Write 1 to 3 sentences saying what the numbered source found, taken from it, each followed by the "
    "number of its source, like [1]."
)

_CLAIM_EXAMPLE = (
    "Example:\nSource:\n\n[1] Pump manual\nThe pump was tested dry. Running without water destroyed the "
    "seal within seconds.\n\nWhat did [1] find?\n"
    "Answer: Running without water destroyed the seal within seconds. [1]"
)

CLAIM_PERSONAS: Mapping[str, str] = {
    name: f"{intro} {_CLAIM_RULES}{guidance}\n\n{_CLAIM_EXAMPLE}"
    for name, (intro, guidance) in _INTROS.items()
}
"""The system prompt of each persona for a claim whose verdict is decided (:func:`build_findings_prompt`)."""


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
    """One passage as given to the model: its per-turn number, its hit, and the part of it shown.

    A citation of the passage resolves to the whole chunk: ``text`` is the chunk's text and
    ``start``/``end`` its character span in its page. ``shown`` lists the spans of ``text`` (its
    sentences, in page order) that the model was given when the evidence was focused on the question;
    None means the model read the whole chunk, and an empty tuple that it read none of it (the passage
    is given for the extractive answer only).
    """

    number: int
    hit: Hit
    shown: tuple[Span, ...] | None = None

    @property
    def chunk_id(self) -> int:
        return self.hit.chunk_id

    @property
    def text(self) -> str:
        return self.hit.text

    @property
    def start(self) -> int:
        return self.hit.start

    @property
    def end(self) -> int:
        return self.hit.end

    @property
    def truncated(self) -> bool:
        """Whether the model was given only some sentences of the chunk."""
        return self.shown is not None

    @property
    def title(self) -> str:
        """The title the model reads: the hit's title (or document name), cut to its first words."""
        words = (self.hit.title or self.hit.document_name).split()
        return " ".join(words[:TITLE_WORDS]) + (f" {_ELLIPSIS}" if len(words) > TITLE_WORDS else "")

    @property
    def shown_text(self) -> str:
        """What the model reads of the chunk: all of it, or the sentences shown on one line, with `` … ``
        where sentences were left out. The source's own reference markers are dropped: beside the
        passages' numbers, a paper's "[2]" would read as passage 2."""
        if self.shown is None:
            return without_markers(self.text).strip()
        ends = {end for _, end in sentence_spans(self.text)}
        runs: list[str] = []
        previous_end: int | None = None
        for start, end in self.shown:
            gap = "" if previous_end is None else self.text[previous_end:start]
            if runs and not gap.strip():
                runs[-1] += gap + self.text[start:end]
            else:
                runs.append(self.text[start:end])
            # A sentence cut short to fit the budget ends with the mark too.
            runs[-1] += "" if end in ends else _ELLIPSIS
            previous_end = end
        return f" {_ELLIPSIS} ".join(normalise(without_markers(run)) for run in runs)

    @property
    def block(self) -> str:
        """The evidence block: ``[n] <title>``, then the text shown, after the chunk's context on a line
        of its own (the header row of the table whose rows it holds, which names their cells)."""
        context = f"{self.hit.context}\n" if self.hit.context else ""
        return f"[{self.number}] {self.title}\n{context}{self.shown_text}"


@dataclass(frozen=True)
class Prompt:
    """The messages for the model and the passages they number, in order (``passages[i].number == i + 1``).

    ``refusal`` is the reply the model is told to give when the passages do not answer; empty when it
    is given no such way out (:func:`build_claim_prompt`).
    """

    persona: str
    messages: tuple[Message, ...]
    passages: tuple[Passage, ...]
    refusal: str = REFUSAL

    def passage(self, number: int) -> Passage | None:
        """The passage numbered ``number`` in this prompt, or None when no such passage was given."""
        return self.passages[number - 1] if 1 <= number <= len(self.passages) else None

    @property
    def approx_tokens(self) -> int:
        return approx_tokens("".join(m.content for m in self.messages))


def declines(reply: str, refusal: str) -> bool:
    """Whether ``reply`` is ``refusal``, the reply a prompt offers for evidence that does not answer, word
    for word or in other words: every sentence of it says that something does not answer. A 0.5B model
    bends the refusal it was given ("Citeline does not answer the question. [1]", asked how to answer
    without a model) and cites a passage that shares the words, so the citation check alone lets it
    through. Never, for a prompt that offers no refusal (``refusal`` empty).
    """
    text = without_markers(reply).strip()
    if not refusal or not text:
        return False
    if normalise(text) == normalise(refusal):
        return True
    sentences = [text[start:end] for start, end in sentence_spans(text)] or [text]
    return all(_DECLINING.search(sentence) for sentence in sentences)


def may_decline(reply: str, refusal: str, question: str) -> bool:
    """Whether ``reply``, still being written, may yet turn out to be ``refusal`` in other words
    (:func:`declines`), so that showing it could mean taking it back: every sentence finished so far
    declines, and the unfinished one has fewer than :data:`OPENING_WORDS` words, opens as a refusal
    does ("The passages ...", "There is no ..."), holds a negation, or is made of ``question``'s words
    alone (a refusal bent around the question's subject: "The pump does not answer the question.").
    Never, for a prompt that offers no refusal (``refusal`` empty).
    """
    text = without_markers(reply).strip()
    if not refusal:
        return False
    spans = sentence_spans(text) or [(0, len(text))]
    finished = text.endswith((".", "!", "?"))
    if not all(_DECLINING.search(text[start:end]) for start, end in (spans if finished else spans[:-1])):
        return False
    if finished:
        return True
    # The last word may be cut short ("Priming is n"): judged once it is whole.
    unfinished = text[spans[-1][0] :] if reply[-1:].isspace() else text[spans[-1][0] :].rpartition(" ")[0]
    return (
        len(unfinished.split()) < OPENING_WORDS
        or _DECLINING_OPENING.search(unfinished) is not None
        or _NEGATION.search(unfinished) is not None
        or content_terms(unfinished) <= content_terms(question)
    )


def approx_tokens(text: str) -> int:
    """Tokens in ``text``, estimated as characters / :data:`CHARS_PER_TOKEN`."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def select_passages(evidence: Sequence[Hit]) -> list[Passage]:
    """Number the evidence, best first, each chunk whole; a chunk retrieved twice is given once."""
    passages: list[Passage] = []
    seen: set[int] = set()
    for hit in evidence:
        if hit.chunk_id not in seen:
            seen.add(hit.chunk_id)
            passages.append(Passage(number=len(passages) + 1, hit=hit))
    return passages


def evidence_text(passages: Sequence[Passage]) -> str:
    """The evidence as the prompt lays it out: one block per passage."""
    return "\n\n".join(p.block for p in passages)


def evidence_chars(passages: Sequence[Passage]) -> int:
    """The length of :func:`evidence_text`, which the evidence budget counts."""
    return len(evidence_text(passages))


def check_request(question: str, *, persona: str) -> str:
    """The system prompt of ``persona``; :class:`InvalidRequestError` for an unknown persona or an
    empty question."""
    system = system_prompt(persona)
    if not question.strip():
        raise InvalidRequestError("the question is empty")
    return system


def build_prompt(question: str, passages: Sequence[Passage], *, persona: str) -> Prompt:
    """The system and user messages answering ``question`` from ``passages`` (numbered, best first)."""
    system = check_request(question, persona=persona)
    user = f"{EVIDENCE_HEADING}s:\n\n{evidence_text(passages)}\n\nQuestion: {question.strip()}"
    return Prompt(
        persona=persona,
        messages=(Message("system", system), Message("user", user)),
        passages=tuple(passages),
    )


def build_findings_prompt(passages: Sequence[Passage], *, persona: str) -> Prompt:
    """The messages asking the model what ``passages`` (numbered from 1, in order) found.

    For a claim whose verdict is decided (:mod:`citeline.answer.stance`): the passages are the ones
    that bear the verdict out, shown as the sentences that best match the claim, and the model only
    reports their findings. The claim itself is not shown: given it, the 0.5B model restated it as the
    finding (6 of 6 SciFact claims, three of them contradicted). The model is given no way to decline.
    Over several passages it is asked what "these sources" found, not "[1] and [2]": it copied that
    "and [2]" after its first citation, which the citation grammar turned into a sentence "and 2." of
    its own (28 of 60 SciFact claims, claims 91 to 150; 1 asked this way).
    """
    system_prompt(persona)  # an unknown persona is refused as for any prompt
    system = CLAIM_PERSONAS[persona]
    asked = f"[{passages[0].number}]" if len(passages) == 1 else "these sources"
    user = f"{EVIDENCE_HEADING}:\n\n{evidence_text(passages)}\n\nWhat did {asked} find?"
    return Prompt(
        persona=persona,
        messages=(Message("system", system), Message("user", user)),
        passages=tuple(passages),
        refusal="",
    )
