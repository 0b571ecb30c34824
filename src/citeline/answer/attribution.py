"""Post-hoc attribution: a sentence the model left uncited gets the citation of the passage that backs it.

Small models often write a sound sentence and forget its ``[n]``, or copy a sentence from one passage and
cite another. :class:`Attributor` reads the reply as it streams (after
:class:`~citeline.answer.citations.CitationRewriter`, so numbers are already the conversation's). When
a sentence that makes a claim (a few content terms) ends without a citation, or with citations none of
which backs it, it scores the sentence against every passage given this turn with the support score of
:mod:`citeline.answer.support`; if the best passage reaches
:data:`~citeline.answer.support.SUPPORT_THRESHOLD`, its number is added to the sentence, before its
closing punctuation (``... seal [2].``), or after the full stop in place of the model's own citation
there (``... seal. [4]`` becomes ``... seal. [2]``). A citation the model wrote before the full stop
has been shown by then: it stays, and the check flags it if it does not back its sentence. A citation
after the full stop waits with the punctuation, so when it is replaced it was never shown; it is
reported with the citations removed, and its number, if this reply gave it and nothing shows it,
goes to the next passage cited (no answer citing only [2]). The local model's grammar puts every
citation after the full stop. A sentence no passage backs is left as it is; the citation check
reports it.

Only the closing punctuation of a sentence, the whitespace after it and a citation after it wait for
the next piece (to learn whether the sentence ended, and whether the model cites it after the full
stop: ``seal. [2]``); everything else is passed on at once. The scores are the ones
:func:`~citeline.answer.citations.verify` computes again later, so an attributed citation is never
flagged as unsupported.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from citeline.answer.citations import (
    MIN_CLAIM_TERMS,
    CitationNumbering,
    RemovedCitation,
    cited_numbers,
    claims,
    copied_elsewhere,
    copied_runs,
)
from citeline.answer.dates import WrittenDates, stated_dates, unwritten
from citeline.answer.names import Reading, Said, read_under, taken_elsewhere
from citeline.answer.prompt import Passage
from citeline.answer.quantities import disagreement
from citeline.answer.rows import names_a_row, row_keys, taken_from_other_rows
from citeline.answer.support import (
    SUPPORT_THRESHOLD,
    PassageSentences,
    VectorCache,
    content_terms,
    normalise,
    sentence_spans,
    support,
)

# Where a sentence may end: its closing punctuation (with closing quotes or brackets), or a line break.
_END = re.compile(r"[.?!][\"'\u201d\u2019)]*|\n")
_SPACE = re.compile(r"\s*")
# The start of a citation that may still be completing: wait for it before deciding.
_OPEN_MARKER = re.compile(r"\[[\d, ]*")
# Citations as the rewriter writes them, one or more, with the spaces before them.
_MARKERS = re.compile(r"(?:\s*\[\d+(?:, \d+)*\])+")


@dataclass(frozen=True)
class Attribution:
    """A sentence of the reply that citeline cited: the passage that backs it best, and how well.

    ``unbacked`` holds the numbers the model cited for the sentence, none of which backs it (empty
    when the model left it uncited).
    """

    sentence: str
    number: int
    chunk_id: int
    score: float
    unbacked: tuple[int, ...] = ()


class Attributor:
    """Adds citations to the supported, uncited sentences of a streamed reply (see the module docstring).

    Sentences in ``never`` (such as the refusal the prompt asks for) are left as they are.

    ``feed`` returns the text that is final so far and ``finish`` the rest; joined, they are the reply
    with the added citations. ``numbering`` (the answer's working copy, shared with the rewriter) gains a
    number for each passage cited here for the first time, in order of appearance.
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        numbering: CitationNumbering,
        cache: VectorCache,
        *,
        threshold: float = SUPPORT_THRESHOLD,
        never: Collection[str] = (),
        question: str = "",
    ) -> None:
        self._passages = list(passages)
        # What each passage gives to bear out a sentence's names, read once (names.taken_elsewhere).
        asked = Reading.of((question,))
        self._asked = asked
        self._readings = [asked | Reading.of((p.text, *read_under(p.hit))) for p in self._passages]
        self._keys = [row_keys(p.hit) for p in self._passages]
        # The years and dates each passage writes (dates.WrittenDates); the question bears none out.
        self._dates = [WrittenDates.of((p.text, *read_under(p.hit))) for p in self._passages]
        self._sentences = [PassageSentences.of_hit(p.hit) for p in passages]
        self._copies = [copied_runs(p.text) for p in self._passages]
        self.numbering = numbering
        self._cache = cache
        self._threshold = threshold
        self._never = {normalise(s).casefold() for s in never}
        self.attributions: list[Attribution] = []
        self._done_text = ""
        self._pending = ""
        self._after_citation = False
        # The model's citations after a full stop, not yet shown: kept or replaced when the sentence closes.
        self._held = ""
        self._numbered_before = len(numbering)
        self._replaced: Counter[int] = Counter()
        self._cited_by_model: set[int] = set()

    @property
    def removed(self) -> list[RemovedCitation]:
        """The model's citations after a full stop that did not back their sentence and were replaced by
        the passage that does, by the model's passage number, with how often each was."""
        return [
            RemovedCitation(
                number=n,
                occurrences=count,
                reason="the model cited it for a sentence it does not back; the passage that does is "
                "cited instead",
            )
            for n, count in sorted(self._replaced.items())
        ]

    @property
    def attributed_numbers(self) -> frozenset[int]:
        """Conversation numbers of the passages this reply cites only through citeline's attributions."""
        return frozenset({a.number for a in self.attributions} - self._cited_by_model)

    def feed(self, text: str) -> str:
        self._pending += text
        out: list[str] = []
        while self._pending:
            pending = self._pending
            if self._after_citation:
                # A sentence ended, then the model cited it: decide once something else begins.
                after = _SPACE.match(pending)
                assert after is not None
                if after.end() == len(pending) or _OPEN_MARKER.fullmatch(pending, after.end()):
                    break
                more = _MARKERS.match(pending)
                if more is not None:
                    self._pending = pending[more.end() :]
                    self._held += more.group()
                    continue
                self._after_citation = False
                out.append(self._close(""))
                continue
            end = _END.search(pending)
            if end is None:
                self._pending = ""
                out.append(self._emit(pending))
                break
            if end.start() > 0:
                self._pending = pending[end.start() :]
                out.append(self._emit(pending[: end.start()]))
                continue
            after = _SPACE.match(pending, end.end())
            assert after is not None
            if after.end() == len(pending) or _OPEN_MARKER.fullmatch(pending, after.end()):
                break  # what follows the punctuation has not come yet
            self._pending = pending[end.end() :]
            if after.end() == end.end() and end.group() != "\n":
                out.append(self._emit(end.group()))  # "2.5", "e.g.x": no space, no sentence end
            else:
                out.append(self._settle(end.group()))
        return "".join(out)

    def finish(self) -> str:
        pending, self._pending = self._pending, ""
        body = pending.rstrip()
        punctuation = _END.match(body)
        if not self._after_citation and punctuation is not None and punctuation.end() == len(body):
            return self._close(punctuation.group()) + self._emit(pending[len(body) :])
        # A reply that stops without punctuation (a list item, a cut-off sentence) ends a sentence too.
        self._after_citation = False
        return self._emit(body) + self._close("") + self._emit(pending[len(body) :])

    def _settle(self, punctuation: str) -> str:
        """Pass on ``punctuation``, citing the sentence it ends if it ends one."""
        rest = self._pending
        cited_after = _MARKERS.match(rest)
        if cited_after is not None:
            # A citation after the full stop belongs to the sentence before it.
            self._pending = rest[cited_after.end() :]
            self._after_citation = True
            self._held = cited_after.group()
            return self._emit(punctuation)
        if not self._ends_sentence(punctuation, rest):
            return self._emit(punctuation)
        return self._close(punctuation)

    def _ends_sentence(self, punctuation: str, rest: str) -> bool:
        if punctuation == "\n":
            return True
        text = self._done_text + punctuation + rest
        cut = len(self._done_text) + len(punctuation)
        return any(end == cut for _, end in sentence_spans(text))

    def _close(self, punctuation: str) -> str:
        """End the current sentence with ``punctuation`` (or with the model's citations after its full
        stop), adding a citation first if it needs one."""
        held, self._held = self._held, ""
        found = claims(self._done_text + punctuation + held)
        sentence = found[-1] if found else None
        if (
            sentence is None
            or len(content_terms(sentence.text)) < MIN_CLAIM_TERMS
            or sentence.text.casefold() in self._never
        ):
            return self._emit(punctuation) + self._emit(held)
        scores = [support(sentence.text, sentences, self._cache).score for sentences in self._sentences]
        # As the citation check judges (citations.verify): a passage stating the sentence's quantity
        # otherwise does not back it, however close in words ("7424 nucleotides" cited to the passage on
        # another virus of 7489 bp, while the next passage states 7424).
        # Nor one lacking a name (code, quantity) of the sentence that another passage gives, or words
        # the sentence copied from another passage: it was taken from that one (citations.verify,
        # names.unnamed, citations.copied_elsewhere).
        # Nor one that does not write a year or date the sentence states (dates.unwritten).
        # Nor a table's row that neither the sentence nor the question names (rows.names_a_row): the
        # potassium question's "135 mmol/L" went to the sodium row.
        said = Said.of(sentence.text)
        stated = stated_dates(sentence.text)
        readings, copies, copied = self._readings, self._copies, copied_runs(sentence.text)
        # Read for the rows only when a passage given is a table's.
        rows = any(key is not None for key in self._keys)
        about = self._asked | Reading.of((sentence.text,)) if rows else self._asked
        terms = content_terms(sentence.text) if rows else frozenset()
        scores = [
            0.0
            if score
            and (
                disagreement(sentence.text, passage.text)
                or unwritten(stated, self._dates[i])
                or taken_elsewhere(said, readings[i], readings[:i] + readings[i + 1 :])
                or copied_elsewhere(copied, copies[i], copies[:i] + copies[i + 1 :])
                or not names_a_row(self._keys[i], about)
                or (
                    self._keys[i] is not None
                    and taken_from_other_rows(
                        terms, self._asked, readings[i], readings[:i] + readings[i + 1 :]
                    )
                )
            )
            else score
            for i, (score, passage) in enumerate(zip(scores, self._passages, strict=True))
        ]
        index_of = {self.numbering.get(p.chunk_id): i for i, p in enumerate(self._passages)}
        cited = [index_of[n] for n in sentence.numbers if n in index_of]
        if any(scores[i] >= self._threshold for i in cited):
            return self._emit(punctuation) + self._emit(held)
        best = max(range(len(scores)), key=lambda i: (scores[i], -i), default=None)
        if best is None or scores[best] < self._threshold:
            return self._emit(punctuation) + self._emit(held)
        self._drop(held, index_of)
        chunk_id = self._passages[best].chunk_id
        number = self.numbering.number(chunk_id)
        self.attributions.append(
            Attribution(
                sentence=sentence.sentence,
                number=number,
                chunk_id=chunk_id,
                score=scores[best],
                unbacked=sentence.numbers,
            )
        )
        return self._emit(f" [{number}]", added=True) + self._emit(punctuation)

    def _drop(self, held: str, index_of: dict[int | None, int]) -> None:
        """Drop the model's citations ``held`` after a full stop, never shown: record each by the model's
        passage number, and take back a number this reply gave it that nothing shows."""
        # What the reply shows: the model's citations passed on, and citeline's own.
        shown = self._cited_by_model | {a.number for a in self.attributions}
        for n in reversed(cited_numbers(held)):
            if n in index_of:
                self._replaced[index_of[n] + 1] += 1
            if n not in shown:
                self.numbering.release(self.numbering.chunk_id(n), after=self._numbered_before)

    def _emit(self, text: str, *, added: bool = False) -> str:
        if not added:
            # The rewriter passes each citation on whole, so a marker is never split between calls.
            self._cited_by_model.update(cited_numbers(text))
        self._done_text += text
        return text
