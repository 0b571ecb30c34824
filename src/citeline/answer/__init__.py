"""The answer stage: evidence in, a streamed answer with verified, numbered citations out.

evidence -> prompt (:mod:`.prompt`) -> LLM (:mod:`.llm`) or extractive (:mod:`.extractive`) -> citations
parsed, numbered and verified (:mod:`.citations`) -> events (:mod:`.events`), all run by :mod:`.answer`.

The sync ``answer()`` is imported from :mod:`citeline.answer.answer`, not from here: under the
package's name it would hide that module.
"""

from citeline.answer.answer import EVIDENCE_MISSING, EXTRACTIVE, NO_PASSAGES, answer_stream
from citeline.answer.citations import Citation, CitationNumbering, RemovedCitation, UnsupportedSentence
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
from citeline.answer.prompt import PERSONAS, Passage, Prompt, build_prompt

__all__ = [
    "EVIDENCE_MISSING",
    "EXTRACTIVE",
    "NO_PASSAGES",
    "PERSONAS",
    "AnswerTimings",
    "Citation",
    "CitationEvent",
    "CitationNumbering",
    "Complete",
    "Error",
    "Event",
    "Passage",
    "Prompt",
    "RemovedCitation",
    "Start",
    "Token",
    "UnsupportedClaim",
    "UnsupportedSentence",
    "answer_stream",
    "build_prompt",
]
