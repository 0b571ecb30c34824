"""Citations: parse the model's ``[n]`` markers, keep only real ones, renumber them, check their support.

The model cites per-turn numbers: ``[n]`` is the n-th passage of this turn's prompt. Readers see
conversation-wide numbers instead: each chunk gets the next number the first time any answer of the
conversation cites it and keeps it for later turns (:class:`CitationNumbering`).

:class:`CitationRewriter` reads the reply as it streams and

- rewrites ``[1]``, ``[1, 3]``, ``[1][2]``, ``[1-3]`` to conversation numbers (``[2]``, ``[2, 4]``...);
- removes, and reports, any number that names no given passage (``[7]`` when 4 were given);
- drops a citation repeating one just given (``[1][1]``, ``[1, 1]``);
- strips headings the model writes for structure (``## Answer``, ``**Answer:**``);
- drops lines that repeat a source's header (``[2] Pump manual (p. 1)``): small models copy evidence
  blocks, and a list of sources without a heading looks the same;
- stops at a references or sources section (``## References``, ``Sources:``): only the answer section
  is parsed, so a list of sources after the answer neither shows nor counts as citing.

:func:`verify` then scores every cited sentence against the passages it cites (see
:mod:`citeline.answer.support`) and builds the :class:`Citation` records readers open.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from citeline.answer.dates import WrittenDates, stated_dates, unwritten
from citeline.answer.names import Reading, Said, read_under, taken_elsewhere
from citeline.answer.prompt import Passage
from citeline.answer.quantities import disagreement
from citeline.answer.rows import names_a_row, row_keys, taken_from_other_rows
from citeline.answer.stance import Stance
from citeline.answer.support import (
    SUPPORT_THRESHOLD,
    PassageSentences,
    Support,
    VectorCache,
    content_terms,
    normalise,
    sentence_spans,
    support,
)
from citeline.errors import NotFoundError
from citeline.retrieve.search import Copy

EXCERPT_CHARS = 300
"""The longest excerpt a citation carries; a longer best sentence is cut at a word boundary."""

# Ranges wider than this are taken as their two ends: "[1-2020]" is a year range, not 2,020 citations.
_MAX_RANGE = 50
MIN_CLAIM_TERMS = 3
"""An uncited sentence with fewer content terms than this is a connective ("In short:"), not a claim."""

# The text a citation group may hold before its closing bracket; anything else means plain text.
_GROUP_PREFIX = re.compile(r"\[[ \d,;\-\u2013]{0,40}")
_GROUP = re.compile(r"\[ *\d{1,4}(?: *[,;\-\u2013] *\d{1,4})* *\]")
_ITEM = re.compile(r"(\d+)(?: *[-\u2013] *(\d+))?")
# The form the rewriter writes; in rewritten text every match is one of ours.
MARKER = re.compile(r"\[(\d+(?:, \d+)*)\]")
_SPACED_MARKER = re.compile(r" *\[\d+(?:, \d+)*\]")
_LEADING_MARKERS = re.compile(r"(?:\[\d+(?:, \d+)*\] *)+")
_LIST_MARKER = re.compile(r"^\s*(?:[-*\u2022]|\d{1,3}[.)])\s+")
_LIST_MARKER_START = re.compile(r"\s*(?:[-*\u2022]|\d{1,3}[.)]?)?\s*")
# A source header as the prompt writes it, or as a references entry: "[2] Title (p. 1)", "[2] Title, p. 1".
_HEADER_ECHO = re.compile(r"\[(\d+)\] +(.+?)(?:,? *\(?(?:p\.|page) *\d+\)?)?\.?")
# Characters a line starting with "[" may run to before it can no longer be a header echo.
_HEADER_SLACK = 24

# How the model starts a line: spaces, heading hashes, bold or italic marks.
_LINE_LEAD = re.compile(r"[ \t]*(?:#{1,6}[ \t]*)?(?:(?:\*\*|__|\*|_)[ \t]*)?")
_STRUCTURE_WORDS = ("final answer", "short answer", "answer", "response", "summary")
_REFERENCE_WORDS = (
    "references", "reference", "sources", "source", "citations", "bibliography", "works cited"
)  # fmt: skip
_LINE_WORDS = sorted((*_STRUCTURE_WORDS, *_REFERENCE_WORDS), key=len, reverse=True)


def cited_numbers(text: str) -> list[int]:
    """The numbers of the citations in ``text`` as citeline writes them (``[1]``, ``[2, 3]``), in order,
    repeats included."""
    return [int(n) for group in MARKER.findall(text) for n in group.split(", ")]


class CitationNumbering:
    """Conversation-wide citation numbers: chunk id -> number, in order of first citation.

    It serialises as :attr:`chunk_ids`, the chunk ids in number order; ``CitationNumbering(ids)``
    rebuilds it, and so does feeding it each stored message's cited chunk ids in turn order (repeats
    keep their first number).
    """

    def __init__(self, chunk_ids: Iterable[int] = ()) -> None:
        self._numbers: dict[int, int] = {}
        for chunk_id in chunk_ids:
            self.number(chunk_id)

    @classmethod
    def from_chunk_ids(cls, chunk_ids: Iterable[int]) -> CitationNumbering:
        """The numbering serialised as :attr:`chunk_ids` (repeats keep their first number)."""
        return cls(chunk_ids)

    @classmethod
    def from_messages(cls, cited_per_message: Iterable[Iterable[int]]) -> CitationNumbering:
        """The numbering of a conversation, from each message's cited chunk ids in order."""
        return cls(chunk_id for cited in cited_per_message for chunk_id in cited)

    def number(self, chunk_id: int) -> int:
        """The number of ``chunk_id``, giving it the next one if it has none yet."""
        found = self._numbers.get(chunk_id)
        if found is None:
            found = self._numbers[chunk_id] = len(self._numbers) + 1
        return found

    def release(self, chunk_id: int, *, after: int) -> bool:
        """Take back the number of ``chunk_id`` when it is the last one given and above ``after``, so
        the next chunk numbered gets it. True if it was taken back.

        For a citation dropped before it was shown: its number, given as the model wrote it, would
        otherwise leave a gap (an answer citing only [2]). Numbers given before ``after`` (earlier turns,
        an answer's opening) are never taken back."""
        if self._numbers.get(chunk_id) != len(self._numbers) or len(self._numbers) <= after:
            return False
        del self._numbers[chunk_id]
        return True

    def get(self, chunk_id: int) -> int | None:
        """The number of ``chunk_id``, or None when it was never cited."""
        return self._numbers.get(chunk_id)

    def chunk_id(self, number: int) -> int:
        """The chunk that ``number`` stands for."""
        ids = self.chunk_ids
        if not 1 <= number <= len(ids):
            raise NotFoundError(f"citation [{number}] does not exist in this conversation ({len(ids)} cited)")
        return ids[number - 1]

    @property
    def chunk_ids(self) -> list[int]:
        """Chunk ids in number order: ``chunk_ids[n - 1]`` is cited as ``[n]``."""
        return list(self._numbers)

    def copy(self) -> CitationNumbering:
        return CitationNumbering(self._numbers)

    def __len__(self) -> int:
        return len(self._numbers)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._numbers

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CitationNumbering) and self.chunk_ids == other.chunk_ids

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"CitationNumbering({self.chunk_ids})"


@dataclass(frozen=True)
class RemovedCitation:
    """A citation the model wrote to a passage it was not given: removed from the answer, reported here."""

    number: int
    occurrences: int
    reason: str


@dataclass(frozen=True)
class Citation:
    """One source of an answer, resolved to the exact place a reader can open.

    ``start``/``end`` are the character span of the given passage in its page; ``excerpt`` is the
    passage sentence that backs the first claim citing it that it backs (the one that best matches the
    claims citing it when it backs none), at ``excerpt_start``/``excerpt_end`` in the same page.
    ``score`` is the best support score among those claims; ``supported`` says whether
    it reaches :data:`~citeline.answer.support.SUPPORT_THRESHOLD`. ``attributed`` says that citeline,
    not the model, cited this passage: the model left the sentences citing it uncited, and this
    passage backs them best (see :mod:`citeline.answer.attribution`). ``stance`` says how the passage
    bears on the question's claim (see :mod:`citeline.answer.stance`); ``neutral`` when the question
    puts no claim.
    """

    number: int
    chunk_id: int
    document_id: uuid.UUID
    document_name: str
    title: str | None
    version: int
    page: int
    start: int
    end: int
    section: str | None
    excerpt: str
    excerpt_start: int
    excerpt_end: int
    score: float
    supported: bool
    attributed: bool = False
    stance: Stance = "neutral"
    #: The passage's other stored copies, word for word (``Hit.also_in``): a reader may know it by one.
    also_in: tuple[Copy, ...] = ()
    #: Where the passage's document can be opened (``Hit.has_original``, ``Hit.source_url``).
    has_original: bool = True
    source_url: str | None = None
    #: The rows of the source file the passage holds (``Hit.rows``): a CSV's, else None.
    rows: tuple[int, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "chunk_id": self.chunk_id,
            "document_id": str(self.document_id),
            "document_name": self.document_name,
            "title": self.title,
            "version": self.version,
            "page": self.page,
            "rows": None if self.rows is None else list(self.rows),
            "start": self.start,
            "end": self.end,
            "section": self.section,
            "excerpt": self.excerpt,
            "excerpt_start": self.excerpt_start,
            "excerpt_end": self.excerpt_end,
            "score": round(self.score, 4),
            "supported": self.supported,
            "attributed": self.attributed,
            "stance": self.stance,
            "also_in": [copy.as_dict() for copy in self.also_in],
            "has_original": self.has_original,
            "source_url": self.source_url,
        }


@dataclass(frozen=True)
class UnsupportedSentence:
    """A cited sentence whose passages do not back it: its best support score is below the threshold."""

    text: str
    numbers: tuple[int, ...]
    score: float


class _Line(Enum):
    UNDECIDED = "undecided"
    TEXT = "text"
    DROP = "drop"  # a structural heading line such as "## Answer"
    LABEL = "label"  # a leading "Answer:" whose text goes on after it
    STOP = "stop"  # the references section begins


class CitationRewriter:
    """Rewrites a streamed reply piece by piece (see the module docstring for what it changes).

    ``feed`` returns the text that is final so far; it holds back only what the next piece may change:
    an unclosed ``[``, the start of a line that may turn out to be a heading, and trailing whitespace.
    ``finish`` returns the rest. Joined, the outputs are the answer; ``cited`` lists the chunks it cites
    in order of first appearance, and ``numbering`` (changed in place) has numbers for all of them.
    """

    def __init__(self, passages: Sequence[Passage], numbering: CitationNumbering) -> None:
        self._chunk_ids = [p.chunk_id for p in passages]
        self.numbering = numbering
        self.cited: list[int] = []
        self.stopped = False
        self._removed: Counter[int] = Counter()
        self._out: list[str] = []
        self._space = ""
        self._line: str | None = ""
        self._group: str | None = None
        self._skip_line = False
        self._skip_space = False
        self._run: set[int] = set()
        self._started = False
        self._titles = {t.casefold() for p in passages for t in (p.hit.title, p.hit.document_name) if t}
        self._echo_limit = max((len(t) for t in self._titles), default=0) + _HEADER_SLACK

    @property
    def removed(self) -> list[RemovedCitation]:
        """Citations to passages that were not given, by number, with how often each was written."""
        given = len(self._chunk_ids)
        return [
            RemovedCitation(
                number=n,
                occurrences=count,
                reason=f"passage [{n}] was not given to the model (it had {given})",
            )
            for n, count in sorted(self._removed.items())
        ]

    def feed(self, text: str) -> str:
        for char in text:
            self._char(char)
        return self._take()

    def finish(self) -> str:
        while self._line or self._group is not None:
            if self._line:
                line, self._line = self._line, None
                self._settle_line(line, terminated=True)
            elif self._group is not None:
                self._group_is_text()
        self._space = ""
        return self._take()

    def _take(self) -> str:
        out = "".join(self._out)
        self._out.clear()
        return out

    def _char(self, char: str) -> None:
        if self.stopped:
            return
        if self._skip_line:
            if char == "\n":
                self._skip_line = False
                self._line = ""
            return
        if self._line is not None:
            line = self._line + char
            self._line = None
            self._settle_line(line, terminated=char == "\n")
            return
        self._text(char)

    def _settle_line(self, line: str, *, terminated: bool) -> None:
        kind, consumed = self._echo(line.rstrip("\n"), terminated=terminated) or _classify_line(
            line.rstrip("\n"), terminated=terminated
        )
        if kind is _Line.UNDECIDED:
            self._line = line
        elif kind is _Line.STOP:
            self.stopped = True
        elif kind is _Line.DROP:
            if line.endswith("\n"):
                self._line = ""
            else:
                self._skip_line = True
        else:
            for char in line[consumed:]:
                self._char(char)

    def _echo(self, line: str, *, terminated: bool) -> tuple[_Line, int] | None:
        """DROP for a line that repeats a source header, UNDECIDED while one may still be coming."""
        if not terminated and _LIST_MARKER_START.fullmatch(line):
            return _Line.UNDECIDED, 0
        body = _LIST_MARKER.sub("", line).strip()
        if not body.startswith("[") or len(body) > self._echo_limit:
            return None
        if not terminated:
            return _Line.UNDECIDED, 0
        echo = _HEADER_ECHO.fullmatch(body)
        return (_Line.DROP, 0) if echo and echo.group(2).casefold() in self._titles else None

    def _text(self, char: str) -> None:
        if self._group is not None:
            self._group += char
            if _GROUP.fullmatch(self._group):
                group, self._group = self._group, None
                self._citation(group)
            elif not _GROUP_PREFIX.fullmatch(self._group):
                self._group_is_text()
            return
        if char == "\n":
            self._space += char
            self._skip_space = False
            self._line = ""
        elif char.isspace():
            if not self._skip_space:
                self._space += char
        elif char == "[":
            self._skip_space = False
            self._group = char
        else:
            self._skip_space = False
            self._emit(char)
            self._run.clear()

    def _group_is_text(self) -> None:
        group = self._group or ""
        self._group = None
        self._emit("[")
        self._run.clear()
        for char in group[1:]:
            self._char(char)

    def _emit(self, text: str) -> None:
        if self._started:
            self._out.append(_squeeze(self._space))
        self._space = ""
        self._out.append(text)
        self._started = True

    def _citation(self, group: str) -> None:
        numbers: list[int] = []
        for n in _group_numbers(group):
            if 1 <= n <= len(self._chunk_ids):
                chunk_id = self._chunk_ids[n - 1]
                number = self.numbering.number(chunk_id)
                if chunk_id not in self.cited:
                    self.cited.append(chunk_id)
                if number not in numbers and number not in self._run:
                    numbers.append(number)
            else:
                self._removed[n] += 1
        if numbers:
            self._emit(f"[{', '.join(map(str, numbers))}]")
            self._run.update(numbers)
            return
        # Nothing left of the group: take the space before it too, so "claim [7]." reads "claim.".
        self._space = self._space.rstrip(" \t")
        if not self._started or self._space.endswith("\n"):
            self._skip_space = True


def _squeeze(space: str) -> str:
    """Whitespace between two pieces of text, with at most one blank line."""
    if "\n" not in space:
        return space
    return "\n" * min(space.count("\n"), 2) + space[space.rfind("\n") + 1 :]


def _group_numbers(group: str) -> Iterator[int]:
    for match in _ITEM.finditer(group):
        low = int(match.group(1))
        if match.group(2) is None:
            yield low
            continue
        high = int(match.group(2))
        low, high = min(low, high), max(low, high)
        if high - low > _MAX_RANGE:
            yield from (low, high)
        else:
            yield from range(low, high + 1)


def _classify_line(line: str, *, terminated: bool) -> tuple[_Line, int]:
    """What the start of a line is, and for a label how many characters of it to drop."""
    lead = _LINE_LEAD.match(line)
    rest = line[lead.end() if lead else 0 :]
    lowered = rest.lower()
    if not terminated and (not rest or any(w.startswith(lowered) for w in _LINE_WORDS)):
        return _Line.UNDECIDED, 0
    word = next((w for w in _LINE_WORDS if lowered.startswith(w)), None)
    if word is None:
        return _Line.TEXT, 0
    after = rest[len(word) :]
    tail = after.lstrip(" \t*_")
    if tail.startswith(":"):
        if word in _REFERENCE_WORDS:
            return _Line.STOP, 0
        text = tail[1:].lstrip(" \t*_")
        if not text and not terminated:
            # The closing "**" of "**Answer:**" may still come.
            return _Line.UNDECIDED, 0
        return _Line.LABEL, len(line) - len(text)
    if tail.strip():
        return _Line.TEXT, 0
    if not terminated:
        return _Line.UNDECIDED, 0
    return (_Line.STOP if word in _REFERENCE_WORDS else _Line.DROP), 0


@dataclass(frozen=True)
class Rewritten:
    """A whole reply after :class:`CitationRewriter`: the answer text, what it cites, what was removed."""

    text: str
    cited: tuple[int, ...]
    removed: tuple[RemovedCitation, ...]


def rewrite_citations(reply: str, passages: Sequence[Passage], numbering: CitationNumbering) -> Rewritten:
    """Rewrite a whole reply at once; the same as streaming it through :class:`CitationRewriter`."""
    rewriter = CitationRewriter(passages, numbering)
    text = rewriter.feed(reply) + rewriter.finish()
    return Rewritten(text=text, cited=tuple(rewriter.cited), removed=tuple(rewriter.removed))


@dataclass(frozen=True)
class Claim:
    """One sentence of an answer, the conversation numbers it cites, and its text without them."""

    sentence: str
    numbers: tuple[int, ...]
    text: str


def claims(answer: str) -> list[Claim]:
    """The sentences of an answer with the citations they carry.

    A citation written after the full stop (``Prime the pump. [1]``) belongs to the sentence before it.
    """
    pieces: list[str] = []
    for start, end in sentence_spans(answer):
        sentence = answer[start:end]
        leading = _LEADING_MARKERS.match(sentence)
        if leading and pieces:
            pieces[-1] += " " + leading.group().strip()
            sentence = sentence[leading.end() :]
        if sentence.strip():
            pieces.append(sentence.strip())
    out: list[Claim] = []
    for sentence in pieces:
        numbers = tuple(dict.fromkeys(cited_numbers(sentence)))
        text = normalise(_LIST_MARKER.sub("", _SPACED_MARKER.sub("", sentence)))
        out.append(Claim(sentence=normalise(sentence), numbers=numbers, text=text))
    return out


_NOTHING = Support(score=0.0, semantic=0.0, lexical=0.0, best_sentence=0)


def has_cited_statement(answer: str) -> bool:
    """Whether ``answer`` has a sentence that cites a passage and says something (not just ``[1]``)."""
    return any(claim.numbers and content_terms(claim.text) for claim in claims(answer))


@dataclass(frozen=True)
class Verification:
    """The checked citations of an answer (in order of first appearance) and the claims found wanting."""

    citations: tuple[Citation, ...]
    unsupported: tuple[UnsupportedSentence, ...]
    uncited: tuple[str, ...]


def verify(
    answer: str,
    passages: Mapping[int, Passage],
    cache: VectorCache,
    *,
    attributed: Collection[int] = frozenset(),
    read_as: Mapping[str, str] | None = None,
    question: str = "",
    instructions: str = "",
) -> Verification:
    """Score each cited sentence of ``answer`` against the passages it cites and build the citations.

    ``passages`` maps conversation numbers to the passages given this turn; ``attributed`` holds the
    numbers that citeline cited and the model did not. A sentence is unsupported when no passage it
    cites scores :data:`SUPPORT_THRESHOLD` or more; a passage that states one of the sentence's
    quantities otherwise (:func:`~citeline.answer.quantities.disagreement`), or that does not give a
    name the sentence gives (:func:`~citeline.answer.names.unnamed`; ``question``, what was asked,
    may give it instead), or that does not write a year or date the sentence states
    (:func:`~citeline.answer.dates.stated_dates`), scores 0 for it, as does one for a sentence
    repeating ``instructions`` (the
    model's system prompt) where the passage does not say the same. A
    sentence with no citation and a few content terms is reported as uncited. ``read_as`` maps a
    sentence of ``answer`` (as :func:`claims` gives it) to the text its citations are scored for: a
    verdict ("Yes: the sources support this claim [1].") cites its passages for the claim it judges,
    not for its own words.

    A citation's excerpt is the passage sentence backing the first sentence that the passage backs:
    an answer opens with what was asked, and an extractive answer quotes every sentence verbatim, so
    the best score would pick among ties (an answer on error E42 showing the row of E57 it also quoted).
    Sentences read as something else count last: what the answer says the passage found shows better
    than the sentence closest to the claim, often a title.
    """
    found = claims(answer)
    if read_as:
        found = [
            replace(c, text=normalise(read_as[c.sentence])) if c.sentence in read_as else c for c in found
        ]
    stand_ins = {i for i, c in enumerate(found) if read_as and c.sentence in read_as}
    cited = {n for claim in found for n in claim.numbers if n in passages}
    prepared = {n: PassageSentences.of_hit(passages[n].hit) for n in cited}
    cache.warm([c.text for c in found if c.numbers] + [t for p in prepared.values() for t in p.sentences])
    # What each passage given gives to bear out a sentence's names (names.taken_elsewhere), and the
    # runs of words of the instructions, read once for every sentence.
    readings = {n: Reading.of((p.text, *read_under(p.hit))) for n, p in passages.items()}
    asked = Reading.of((question,))
    keys = {n: row_keys(p.hit) for n, p in passages.items()}
    copies = {n: copied_runs(p.text) for n, p in passages.items()}
    dated: dict[int, WrittenDates] = {}  # read for the passages a sentence stating a date cites
    echoable = _runs(instructions)
    best: dict[int, Support] = {}
    first_backed: dict[int, Support] = {}
    stand_in_backed: dict[int, Support] = {}
    unsupported: list[UnsupportedSentence] = []
    uncited: list[str] = []
    for i, claim in enumerate(found):
        numbers = [n for n in claim.numbers if n in passages]
        if not numbers:
            if len(content_terms(claim.text)) >= MIN_CLAIM_TERMS:
                uncited.append(claim.sentence)
            continue
        # Citations with nothing before them ("[1]" as the whole reply) claim nothing: no support.
        scores = [
            support(claim.text, prepared[n], cache) if content_terms(claim.text) else _NOTHING
            for n in numbers
        ]
        if i not in stand_ins:
            # Meaning and shared words do not compare numbers: "The maximum dose is 3000 mg. [1]" scored
            # 0.47 against "... to at most 2000 mg." A passage stating the sentence's quantity otherwise
            # does not back it, whatever it scores (a verdict's opening says so itself: not checked).
            # A sentence citing several passages may take one quantity from each ("M10 to 49 N·m and
            # M12 to 85 N·m [1][2]"): only a quantity none of them bears out is a disagreement.
            joined = "\n\n".join(passages[n].text for n in numbers)
            if len(numbers) == 1 or disagreement(claim.text, joined):
                scores = [
                    replace(s, score=0.0) if s.score and disagreement(claim.text, passages[n].text) else s
                    for n, s in zip(numbers, scores, strict=True)
                ]
            # Nor do they compare years: "The directive was issued in 2007 [1]" against a passage
            # issuing it in 2009, or "effective March 14, 2019" against "March 13, 2019". A passage that
            # does not write a year or date of the sentence (in any form, dates.WrittenDates) does not
            # back it; as with quantities, one any of the cited passages writes is borne out.
            stated = stated_dates(claim.text)
            if stated:
                for n in numbers:
                    if n not in dated:
                        dated[n] = WrittenDates.of(readings[n].texts)
                if any(all(not dated[n].holds(s) for n in numbers) for s in stated):
                    scores = [
                        replace(s, score=0.0) if s.score and unwritten(stated, dated[n]) else s
                        for n, s in zip(numbers, scores, strict=True)
                    ]
            # Nor do they tell one name from another: "The directive applies to Pilatus Aircraft Ltd. [1]"
            # scored 0.57 against the directive for The Boeing Company; Pilatus was in another passage
            # given. A name (code, quantity) the cited passages do not give and another passage does was
            # taken from that one. As with quantities, one any of the cited passages gives is borne out.
            others = [reading for m, reading in readings.items() if m not in numbers]
            said = Said.of(claim.text) if others else None
            under = [asked | readings[n] for n in numbers]
            if said and taken_elsewhere(said, functools.reduce(Reading.__or__, under), others):
                scores = [
                    replace(s, score=0.0) if s.score and taken_elsewhere(said, reading, others) else s
                    for reading, s in zip(under, scores, strict=True)
                ]
            # Nor the rows of a table one from another: a passage of table rows backs only a sentence
            # that it or the question names a row of (rows.names_a_row; "halve the dose" for sitagliptin
            # cited to the empagliflozin row scored 0.71).
            # Nor a value taken from another row (rows.taken_from_other_rows).
            if any(keys[n] is not None for n in numbers):
                about = asked | Reading.of((claim.text,))
                rows_cited = functools.reduce(Reading.__or__, [readings[n] for n in numbers])
                taken = taken_from_other_rows(content_terms(claim.text), asked, rows_cited, others)
                scores = [
                    replace(s, score=0.0)
                    if s.score and keys[n] is not None and (taken or not names_a_row(keys[n], about))
                    else s
                    for n, s in zip(numbers, scores, strict=True)
                ]
        # A sentence copied word for word from another passage given was taken from that one, however
        # well the cited passage scores for it (copied_elsewhere); any of the cited holding it backs it.
        copied = copied_runs(claim.text)
        if copied:
            elsewhere = [runs for m, runs in copies.items() if m not in numbers]
            if copied_elsewhere(copied, set().union(*(copies[n] for n in numbers)), elsewhere):
                scores = [
                    replace(s, score=0.0) if s.score and copied_elsewhere(copied, copies[n], elsewhere) else s
                    for n, s in zip(numbers, scores, strict=True)
                ]
        # A small model may repeat its instructions as an answer ("follow these steps in order, and put
        # any safety warning from the sources first. [1]", from the repair persona's guidance): close
        # in words to a manual's passage, backed at 0.56. What the instructions say is no passage's.
        if echoable:
            scores = [
                replace(s, score=0.0) if s.score and _echoes(claim.text, echoable, passages[n].text) else s
                for n, s in zip(numbers, scores, strict=True)
            ]
        for n, result in zip(numbers, scores, strict=True):
            if n not in best or result.score > best[n].score:
                best[n] = result
            backed = stand_in_backed if i in stand_ins else first_backed
            if n not in backed and result.score >= SUPPORT_THRESHOLD:
                backed[n] = result
        top = max(s.score for s in scores)
        if top < SUPPORT_THRESHOLD:
            unsupported.append(UnsupportedSentence(text=claim.sentence, numbers=tuple(numbers), score=top))
    order = list(dict.fromkeys(n for claim in found for n in claim.numbers if n in passages))
    return Verification(
        citations=tuple(
            _citation(
                n,
                passages[n],
                prepared[n],
                best[n],
                first_backed.get(n, stand_in_backed.get(n, best[n])),
                n in attributed,
            )
            for n in order
        ),
        unsupported=tuple(unsupported),
        uncited=tuple(uncited),
    )


#: Words in a row that a sentence must share with the instructions, and its passage not, to repeat them.
_ECHO_WORDS = 5
_ECHO_WORD = re.compile(r"\w+")


def _runs(text: str, length: int = _ECHO_WORDS) -> set[tuple[str, ...]]:
    """The runs of ``length`` words in a row of ``text``, casefolded."""
    words = _ECHO_WORD.findall(text.casefold())
    return {tuple(words[i : i + length]) for i in range(len(words) - length + 1)}


COPIED_WORDS = 10
"""A sentence holding this many words in a row of a passage was copied from it: ten words in a row are
not two writers' chance."""


def copied_runs(text: str) -> set[tuple[str, ...]]:
    """The runs of :data:`COPIED_WORDS` words in a row of ``text`` (:func:`copied_elsewhere` compares
    them)."""
    return _runs(text, COPIED_WORDS)


def copied_elsewhere(
    sentence: set[tuple[str, ...]], cited: set[tuple[str, ...]], others: Sequence[set[tuple[str, ...]]]
) -> bool:
    """Whether a sentence (its :func:`copied_runs`) holds a run of words another passage given holds
    (``others``, theirs) and the cited one (``cited``) does not: the sentence was copied from that one.

    The packaged model copied a sentence of one passage word for word and cited another that scored 0.67
    for it, above the threshold, so the citation stood while the passage it came from (0.99) went
    uncited. A reader opening the citation finds a passage that does not say it.
    """
    taken = sentence - cited
    return bool(taken) and any(taken & other for other in others)


def _echoes(sentence: str, instructions: set[tuple[str, ...]], passage: str) -> bool:
    """Whether ``sentence`` repeats a run of words of the instructions (:func:`_runs` of them) that
    ``passage`` does not hold."""
    return bool((_runs(sentence) & instructions) - _runs(passage))


def _citation(
    number: int,
    passage: Passage,
    sentences: PassageSentences,
    result: Support,
    shown: Support,
    attributed: bool,
) -> Citation:
    hit = passage.hit
    start, end = sentences.spans[shown.best_sentence]
    # The sentence as it was scored: a Markdown table's row under its headers ("Model: HX-4000; Max
    # pressure (bar): 16."), not a bare "| HX-4000 | 16 |" that names nothing. The span still points
    # at the row as stored.
    excerpt = sentences.sentences[shown.best_sentence]
    if len(excerpt) > EXCERPT_CHARS:
        cut = excerpt.rfind(" ", 0, EXCERPT_CHARS)
        excerpt = excerpt[: cut if cut > EXCERPT_CHARS // 2 else EXCERPT_CHARS] + "\u2026"
    return Citation(
        number=number,
        chunk_id=hit.chunk_id,
        document_id=hit.document_id,
        document_name=hit.document_name,
        title=hit.title,
        version=hit.version,
        page=hit.page,
        start=passage.start,
        end=passage.end,
        section=hit.section,
        excerpt=excerpt,
        excerpt_start=passage.start + start,
        excerpt_end=passage.start + end,
        score=result.score,
        supported=result.score >= SUPPORT_THRESHOLD,
        attributed=attributed,
        also_in=hit.also_in,
        has_original=hit.has_original,
        source_url=hit.source_url,
        rows=hit.rows,
    )
