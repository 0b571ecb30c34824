"""Names a cited sentence gives that its passage does not.

Meaning and shared words do not tell one name from another. Asked which airplanes a proposed
airworthiness directive applies to, the local model answered "The proposed airworthiness directive
applies to Pilatus Aircraft Ltd. [1]", and passage [1] (whose directive applies to "The Boeing
Company"; Pilatus was in another passage it was given) scored 0.57 for it: supported. A sentence
that names someone or something its passage never names says what the passage does not, as a
sentence stating another quantity does (:func:`citeline.answer.quantities.disagreement`).

A name is a word written as one: capitalised after the sentence's first word ("Pilatus", "Boeing"),
or with a capital after its first letter anywhere ("HNSW", "McDonald"). It is borne out when its
terms (as the keyword index stems them) are in the passage, or in what the passage is read under
(its document's title and name, its section heading) or what was asked: a manual's passage need not
name the device its title names, nor repeat the name the question gave. An acronym is also borne out
by the words it abbreviates ("AOA": "angle of attack").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from citeline.answer.quantities import UNITS
from citeline.answer.support import content_terms

if TYPE_CHECKING:
    from citeline.retrieve.search import Hit

# A word: letters and digits, joined by apostrophes and hyphens ("O'Brien", "Stop-Nut", "Boeing's").
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:['\u2019\u2010\u2011-][A-Za-z0-9]+)*")
_PARTS = re.compile(r"['\u2019\u2010\u2011-]")
_LETTERS = re.compile(r"[A-Za-z]+")
# The longest acronym read as initials.
_MAX_INITIALS = 6


def names(sentence: str) -> list[str]:
    """The words of ``sentence`` written as names, in order, once each (see the module docstring)."""
    found: list[str] = []
    for i, match in enumerate(_WORD.finditer(sentence)):
        word = match.group(0)
        capital_inside = any(c.isupper() for c in word[1:])
        if not (capital_inside or (i > 0 and word[0].isupper())):
            continue
        # A stop word capitalised is no name ("The" opening a quoted title, "It" after a colon), nor a
        # unit ("kW", "MHz", "PSI": quantities compare those) or a letter ("230 V", "grade A").
        if len(word) < 2 or word in UNITS or (len(word) >= 3 and word.lower() in UNITS):
            continue
        if content_terms(word) and word not in found:
            found.append(word)
    return found


def unnamed(sentence: str, passage: str, *, context: Iterable[str] = ()) -> list[str]:
    """The names of ``sentence`` that neither ``passage`` nor ``context`` (the title, document name and
    section it is read under, the question) bears out, in order."""
    texts = [passage, *context]
    have = frozenset().union(*(content_terms(text) for text in texts))
    missing = []
    for name in names(sentence):
        # Each part of a joined name on its own too: the passage may join it otherwise
        # ("9-FAA-SACO-AD-Inquiry@faa.gov" for "FAA-SACO-AD-Inquiry").
        if content_terms(name) <= have or all(content_terms(p) <= have for p in _PARTS.split(name)):
            continue
        if name.isupper() and len(name) <= _MAX_INITIALS and any(_abbreviates(name, t) for t in texts):
            continue
        missing.append(name)
    return missing


def read_under(hit: Hit) -> tuple[str, ...]:
    """What a retrieved passage is read under, beside its own text: its document's title and name, its
    section heading and its context (the header row of a table it continues)."""
    return tuple(t for t in (hit.title, hit.document_name, hit.section, hit.context) if t)


def _abbreviates(acronym: str, text: str) -> bool:
    """Whether ``text`` holds words whose initials spell ``acronym`` (small words such as "of" counted
    or skipped: "AOA" for "angle of attack", "FAA" for "Federal Aviation Administration")."""
    words = [w.lower() for w in _LETTERS.findall(text)]
    wanted = acronym.lower()
    every = "".join(w[0] for w in words)
    if wanted in every:
        return True
    content = "".join(w[0] for w in words if content_terms(w))
    return wanted in content
