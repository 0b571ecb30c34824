"""Names, codes and quantities a cited sentence gives that its passage does not.

Meaning and shared words do not tell one name from another. Asked which airplanes a proposed
airworthiness directive applies to, the local model answered "The proposed airworthiness directive
applies to Pilatus Aircraft Ltd. [1]", and passage [1] (whose directive applies to "The Boeing
Company"; Pilatus was in another passage it was given) scored 0.57 for it: supported. A sentence
naming someone or something that another passage given names and its own passage does not took it
from that passage: it says what its passage does not, as a sentence stating another quantity does
(:func:`citeline.answer.quantities.disagreement`). A name no passage gives is not judged
(:func:`unnamed` says why).

A name is a word written as one: capitalised after the sentence's first word ("Pilatus", "Boeing"),
or with a capital after its first letter anywhere ("HNSW", "McDonald"). It is borne out when its
terms (as the keyword index stems them) are in the passage, or in what the passage is read under
(its document's title and name, its section heading) or what was asked: a manual's passage need not
name the device its title names, nor repeat the name the question gave. An acronym is also borne out
by the words it abbreviates ("AOA": "angle of attack").

A code (a part or document number: letters and digits, or three or more groups of digits joined by
dashes: "HX-4000", "737-31-1860") is borne out when a text writes it, whatever its dashes; the model
cited "Service Bulletin 737-31-1860, dated 2007" to a passage giving 737-27-1318. A quantity with a
unit is borne out when a text states one of its kind or writes its number
(:func:`citeline.answer.quantities.unstated`); one of its kind stated otherwise is
:func:`~citeline.answer.quantities.disagreement`'s.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from citeline.answer.quantities import UNITS, Quantity, quantities, unstated
from citeline.answer.support import content_terms

if TYPE_CHECKING:
    from citeline.retrieve.search import Hit

# A word: letters and digits, joined by apostrophes and hyphens ("O'Brien", "Stop-Nut", "Boeing's").
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:['\u2019\u2010\u2011-][A-Za-z0-9]+)*")
_DASHES = "\u2010\u2011\u2012\u2013\u2212-"  # the hyphen last: no range in a class
# A code: letters and digits run together or joined by dashes or dots, with a digit and a letter
# ("HX-4000", "XR200", "M10", "E11.65", an ICD-10 code), or three or more groups of digits joined by
# dashes ("737-31-1860", "2018-23-51"; two are a range).
_CODE = re.compile(
    rf"(?<![\w.{_DASHES}])(?:(?=[\w.{_DASHES}]*\d)(?=[\w.{_DASHES}]*[A-Za-z])[A-Za-z0-9]+(?:[.{_DASHES}][A-Za-z0-9]+)*"
    rf"|\d+(?:[{_DASHES}]\d+){{2,}})(?![\w{_DASHES}]|\.\w)"
)
_NOT_LETTER_OR_DIGIT = re.compile(r"[\W_]+")
# Greek letters as a sentence may spell them ("AlphaBeta" for "A\u03b2", "TNF-alpha" for "TNF-\u03b1"):
# the small letters from U+03B1 (with the final sigma, U+03C2) and the capitals from U+0391.
_GREEK_NAMES = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
]
_GREEK = str.maketrans(
    {chr(0x3B1 + i): name for i, name in enumerate(_GREEK_NAMES)}
    | {chr(0x391 + i): name for i, name in enumerate(_GREEK_NAMES) if i != 17}
)
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


@dataclass(frozen=True)
class Said:
    """The names, codes and quantities (with a unit) of a sentence, read once however many passages it
    is checked against."""

    names: tuple[str, ...]
    codes: tuple[str, ...]
    quantities: tuple[Quantity, ...]

    @classmethod
    def of(cls, sentence: str) -> Said:
        return cls(tuple(names(sentence)), tuple(codes(sentence)), tuple(quantities(sentence)))


@dataclass(frozen=True)
class Reading:
    """What texts give to bear a sentence out: a passage with what it is read under, or a question. The
    texts, their terms, their squashed forms (:func:`squashed`) and the kinds of quantity they state,
    read once however many sentences are checked against them; ``|`` joins two."""

    texts: tuple[str, ...]
    terms: frozenset[str]
    squashed: tuple[str, ...]
    kinds: frozenset[str]

    @classmethod
    def of(cls, texts: Iterable[str]) -> Reading:
        kept = tuple(text for text in texts if text)
        return cls(
            kept,
            frozenset().union(*(content_terms(text) for text in kept)),
            tuple(squashed(text) for text in kept),
            frozenset(q.dimension for text in kept for q in quantities(text)),
        )

    @functools.cached_property
    def initials(self) -> tuple[str, ...]:
        """The initials of the texts' words, every word's and the content words' (small words such as
        "of" counted or skipped: "AOA" for "angle of attack", "FAA" for "Federal Aviation
        Administration"), read at the first acronym nothing else bears out."""
        out = []
        for text in self.texts:
            words = [w.lower() for w in _LETTERS.findall(text)]
            out.append("".join(w[0] for w in words))
            out.append("".join(w[0] for w in words if content_terms(w)))
        return tuple(out)

    def __or__(self, other: Reading) -> Reading:
        return Reading(
            self.texts + other.texts,
            self.terms | other.terms,
            self.squashed + other.squashed,
            self.kinds | other.kinds,
        )


def unnamed(
    sentence: str,
    passage: str,
    *,
    context: Iterable[str] = (),
    elsewhere: Iterable[Sequence[str]] | None = None,
) -> list[str]:
    """The names, codes and quantities of ``sentence`` that neither ``passage`` nor ``context`` (the
    title, document name and section it is read under, the question) bears out, in that order; with
    ``elsewhere`` (the other passages given, each with what it is read under), only those one of them
    bears out (:func:`taken_elsewhere`, which checks many sentences against the same passages)."""
    others = None if elsewhere is None else [Reading.of(texts) for texts in elsewhere]
    return taken_elsewhere(Said.of(sentence), Reading.of((passage, *context)), others)


def taken_elsewhere(said: Said, reading: Reading, elsewhere: Sequence[Reading] | None) -> list[str]:
    """What ``said`` names that ``reading`` does not bear out; with ``elsewhere``, only what one of those
    readings does: what the sentence took from another passage than the one it cites.

    A name no passage gives may be the writer's own words for what the passage says ("AMP-activated
    protein kinase" for its "AMPK"): on SciFact's claims against their own abstracts, written apart
    from them, names missing from the abstract were as common (22%) as against another abstract on the
    subject (25%), so a name missing alone tells nothing.
    """
    missing = _missing(said, reading)
    if elsewhere is None or not missing:
        return missing
    taken: set[str] = set()
    for other in elsewhere:
        taken.update(set(missing) - set(_missing(said, other)))
    return [item for item in missing if item in taken]


def _missing(said: Said, reading: Reading) -> list[str]:
    """The names, codes and quantities of ``said`` that ``reading`` does not bear out."""
    # A name or code is also borne out written with other punctuation ("PGE2" for "PGE(2)", "B12" for
    # "B(12)", "XR-200" for "XR200", "AlphaBeta" for "A\u03b2"), or joined otherwise
    # ("9-FAA-SACO-AD-Inquiry@faa.gov").
    missing = []
    for name in said.names:
        if _CODE.fullmatch(name):
            continue  # "XR-200": a code (below)
        terms, squashed = _read(name)
        if terms <= reading.terms or any(squashed in text for text in reading.squashed):
            continue
        if name.isupper() and len(name) <= _MAX_INITIALS and any(squashed in i for i in reading.initials):
            continue
        missing.append(name)
    for code in said.codes:
        if not any(_read(code)[1] in text for text in reading.squashed):
            missing.append(code)
    missing.extend(q.text for q in unstated(said.quantities, reading.kinds, reading.texts))
    return missing


def codes(sentence: str) -> list[str]:
    """The codes of ``sentence`` (see the module docstring), in order, once each; not a quantity's
    number with its unit run on ("10mg", "5kW")."""
    found: list[str] = []
    for match in _CODE.finditer(sentence):
        code = match.group(0)
        letters = _LETTERS.findall(code)
        if len(letters) == 1 and code.endswith(letters[0]) and letters[0] in UNITS:
            continue
        if code not in found:
            found.append(code)
    return found


def written_codes(text: str) -> frozenset[str]:
    """The codes ``text`` writes (:func:`codes`), each as it is compared: whatever its dashes and case
    ("737\u201331\u20131860" and "737-31-1860" are one code)."""
    return frozenset(squashed(code) for code in codes(text))


def squashed(text: str) -> str:
    """``text`` casefolded, Greek letters spelled out, with only its letters and digits (compatibility
    forms read as what they stand for: "B\u2081\u2082" as "b12")."""
    return _NOT_LETTER_OR_DIGIT.sub("", unicodedata.normalize("NFKC", text).casefold().translate(_GREEK))


def read_under(hit: Hit) -> tuple[str, ...]:
    """What a retrieved passage is read under, beside its own text: its document's title and name, its
    section heading and its context (the header row of a table it continues)."""
    return tuple(t for t in (hit.title, hit.document_name, hit.section, hit.context) if t)


@functools.lru_cache(maxsize=4096)
def _read(word: str) -> tuple[frozenset[str], str]:
    """A name's or code's terms and squashed form, read once for every passage it is checked against."""
    return content_terms(word), squashed(word)
