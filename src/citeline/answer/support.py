"""How well one text supports another: sentences, content terms and the support score.

The citation checker (is this cited sentence backed by its passage?) and the extractive answerer
(which passage sentences answer this question?) ask the same question in two directions, so they share
one score:

    score = SEMANTIC_WEIGHT * semantic + (1 - SEMANTIC_WEIGHT) * lexical

- ``semantic``: the highest cosine similarity between the claim's embedding and that of any one
  sentence of the passage. A short claim compared with a whole 1,000-character passage is diluted by
  everything else the passage says; its best sentence is not (and short texts embed faster).
- ``lexical``: the share of the claim's content terms (stop words dropped, stemmed, as the keyword
  index analyses text) that occur in the passage. It catches what embeddings blur: numbers, drug names,
  part numbers.

Both parts lie in [0, 1] for real text (cosine of unrelated MiniLM sentences is near 0, rarely below).
The weight and :data:`SUPPORT_THRESHOLD` were chosen on SciFact with ``python -m bench.citation_support``
(300 test claims, each scored against its gold abstract, the best BM25 match among the other abstracts
and a random abstract). At 0.8 and 0.44: 89.0% of gold pairs count as supported, 99.3% of random ones
are flagged, and 22.3% of same-subject ones are. Weights 0.4 to 0.7 flag fewer same-subject pairs at
the threshold that keeps 90% of gold ones (8-17%); semantic alone flags 29% but drops the term check.
This is a relevance check (the passage is about what the sentence claims), not entailment: no setting
tells a gold abstract from another on the same subject better than 68% balanced accuracy, and a passage
that contradicts a claim on its subject still scores high.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from citeline.embed.base import Embedder
from citeline.split import sentence_ends
from citeline.store.analyzer import Analyzer
from citeline.types import table_cells

if TYPE_CHECKING:
    from citeline.retrieve.search import Hit

SEMANTIC_WEIGHT = 0.8
"""Share of the support score that comes from embedding similarity; the rest is content-term overlap."""

SUPPORT_THRESHOLD = 0.44
"""A cited sentence scoring below this against every passage it cites is flagged as unsupported."""

CONTEXT_DECAY = 0.8
"""The share of the previous sentence's score (in the same paragraph) that a sentence inherits when
sentences are scored against a question (:func:`question_scores`)."""

ANALYZER = Analyzer()
"""The keyword analyzer with its defaults, which content terms and lookups of codes are read with."""
# A line that starts a list item or a heading begins a new sentence even without a full stop before it.
_ITEM_START = re.compile(r"[^\S\n]*(?:[#>*\u2022\u2013-]|\d{1,3}[.)][^\S\n])")
_SPACES = re.compile(r"\s+")
_RULE_CELL = re.compile(r":?-{2,}:?")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")
# A source's own reference markers: "... trachoma (Box 1) [2].", "[3, 4]", "[5-7]".
_SOURCE_MARKER = re.compile(
    r"[^\S\n]*\[ *\d{1,4}(?: *[,;\-\u2013] *\d{1,4})* *\]"
    # The PDF loader's footnote marks: a footnote's own number opening its line ("^9 An AOA ..."), a
    # mark raised after punctuation ("shaker,^8"). One after a digit, a letter or a closing bracket
    # may be an exponent ("10^3", "cm^2", "(2r)^2", "[N/mm]^2") and stays.
    r"|(?:^|(?<=\n))[^\S\n]*\^\d{1,3}[^\S\n]+|(?<=[.,;:!?\"\u201d\u2019])\^\d{1,3}(?![\d^])"
)
# Headings in manuals and PDFs end their line without punctuation and are short.
_HEADING_MAX_WORDS = 6
# Articles, prepositions and conjunctions: a line ending in one goes on on the next.
_GOES_ON = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "for",
        "to",
        "in",
        "on",
        "at",
        "by",
        "with",
        "from",
        "into",
        "onto",
        "per",
        "via",
        "and",
        "or",
        "nor",
        "but",
        "as",
        "than",
    ]
)

Span = tuple[int, int]


def sentence_spans(text: str) -> list[Span]:
    """The sentences of ``text`` as ``(start, end)`` offsets, stripped of surrounding whitespace.

    Sentences end where the splitter ends them (full stops, abbreviations skipped), at blank lines,
    and at line breaks that start a list item or follow a heading-like line. Other line breaks are
    taken as wrapping (PDF text breaks lines mid-sentence).
    """
    cuts = {0, len(text), *sentence_ends(text)}
    offset = 0
    lines = text.split("\n")
    for before, after in itertools.pairwise(lines):
        offset += len(before) + 1
        if _breaks_sentence(before, after):
            cuts.add(offset)
    spans: list[Span] = []
    ordered = sorted(cuts)
    for start, end in itertools.pairwise(ordered):
        segment = text[start:end]
        stripped = segment.strip()
        if stripped:
            lead = len(segment) - len(segment.lstrip())
            spans.append((start + lead, start + lead + len(stripped)))
    return spans


def _breaks_sentence(before: str, after: str) -> bool:
    line = before.strip()
    if not line or not after.strip() or _ITEM_START.match(after):
        return True
    if line.endswith(":"):
        # A colon before a list or a block ends a sentence; one before a line that goes on in small
        # letters wraps it: "... not kept when not given:\na document ingested with ..." quoted from
        # its second line read as a sentence of its own, starting mid-thought.
        return not after.lstrip()[:1].islower()
    if line.startswith("|") or after.lstrip().startswith("|"):
        return True  # a Markdown table's rows are sentences of their own (see readable_rows)
    # A short unpunctuated line before a capitalised one reads as a heading; a narrow PDF column
    # wrapping mid-sentence before a proper noun is the rarer case, unless the line ends in a word no
    # heading ends in ("... directive (AD) for\nPilatus Aircraft ...") or starts in small letters, as
    # no heading does: "speed trim system (STS), including its\nMCAS function, for ..." was cut there,
    # and "MCAS function, for the remainder of that flight, ..." opened the answer to "What is MCAS?".
    return (
        not line[:1].islower()
        and after.lstrip()[:1].isupper()
        and (line[-1].isalnum() or line[-1] == ")")
        and len(line.split()) <= _HEADING_MAX_WORDS
        and line.split()[-1].lower() not in _GOES_ON
    )


def without_markers(text: str) -> str:
    """``text`` without the numbered reference markers of its source (``[2]``, ``[3, 4]``) and the
    footnote marks the PDF loader writes (``^9 A footnote``, ``shaker,^8``).

    Quoted in an answer, or shown to a model beside citeline's own numbered passages, a paper's "[2]"
    reads as a citation of passage 2.
    """
    return _SOURCE_MARKER.sub("", text)


def normalise(text: str) -> str:
    """``text`` on one line with single spaces, as it is embedded and shown in excerpts."""
    return _SPACES.sub(" ", text).strip()


def content_terms(text: str) -> frozenset[str]:
    """The distinct content terms of ``text``: lowercased, stop words dropped, stemmed."""
    return frozenset(ANALYZER.terms(text))


def lexical_overlap(claim: frozenset[str], evidence: frozenset[str]) -> float:
    """The share of ``claim``'s terms found in ``evidence`` (0 when the claim has none)."""
    if not claim:
        return 0.0
    return len(claim & evidence) / len(claim)


def combine(semantic: float, lexical: float) -> float:
    """The support score from its two parts (see the module docstring)."""
    return SEMANTIC_WEIGHT * max(semantic, 0.0) + (1.0 - SEMANTIC_WEIGHT) * lexical


@dataclass
class VectorCache:
    """Embeds each distinct text once per answer, in as few embedder calls as possible."""

    embedder: Embedder
    _vectors: dict[str, npt.NDArray[np.float32]] = field(default_factory=dict)

    def warm(self, texts: Iterable[str]) -> None:
        """Embed every text not seen yet, in one call."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if todo:
            for text, vector in zip(todo, self.embedder.embed(todo), strict=True):
                self._vectors[text] = vector

    def matrix(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The vectors of ``texts`` as rows, embedding any not seen yet."""
        self.warm(texts)
        if not texts:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])


@dataclass(frozen=True)
class PassageSentences:
    """A passage cut into sentences, with what scoring needs: offsets, one-line texts and terms."""

    text: str
    spans: tuple[Span, ...]
    sentences: tuple[str, ...]
    terms: frozenset[str]

    @classmethod
    def of(cls, text: str, context: str | None = None) -> PassageSentences:
        """``text`` cut into sentences. ``context`` is the chunk's (``Hit.context``): the header row of
        the table whose rows ``text`` continues, under which those rows are read."""
        spans = tuple(sentence_spans(text))
        sentences = readable_rows([text[s:e] for s, e in spans], header=context)
        return cls(
            text=text,
            spans=spans,
            sentences=tuple(normalise(s) for s in sentences),
            terms=content_terms(text),
        )

    @classmethod
    def of_hit(cls, hit: Hit) -> PassageSentences:
        """A retrieved chunk cut into sentences, its rows read under its context (:meth:`of`)."""
        return cls.of(hit.text, hit.context)


def shown_text(text: str, start: int, end: int, context: str | None = None) -> str:
    """``text[start:end]`` as a citation's excerpt shows it: when the span is one of ``text``'s sentences,
    that sentence as :class:`PassageSentences` reads it (a table's row under its headers, ``context``'s
    for rows that continue a table), otherwise the span on one line."""
    sentences = PassageSentences.of(text, context)
    for span, sentence in zip(sentences.spans, sentences.sentences, strict=True):
        if span == (start, end):
            return sentence
    return normalise(text[start:end])


def table_rule(row: str) -> bool:
    """Whether ``row`` is a Markdown table's rule (``| --- | :-: |``)."""
    cells = [c for c in table_cells(row) if c]
    return row.lstrip().startswith("|") and bool(cells) and all(_RULE_CELL.fullmatch(c) for c in cells)


def readable_rows(sentences: Sequence[str], *, header: str | None = None) -> list[str]:
    """``sentences`` with each data row of a Markdown table written as its headers read it: ``| HX-4000 |
    16 |`` under ``| Model | Max pressure (bar) |`` becomes ``Model: HX-4000; Max pressure (bar): 16.``

    A row alone says nothing of what its numbers are, so it scored low against "the max pressure of the
    HX-4000" and was never quoted; a sentence citing it ("The HX-4000's maximum pressure is 16 bar [1]")
    found no words of its own in it. Written as CSV rows are loaded, a row can be scored, quoted and
    cited. Header rows and rules stay as they are (starting with ``|``, they are never quoted).
    ``header`` is the header row of a table whose rows ``sentences`` start with (a chunk that continues
    a table holds no header of its own: ``Hit.context``).
    """
    out: list[str] = []
    first = header if header is not None and header.lstrip().startswith("|") else None
    columns: list[str] | None = table_cells(first) if first is not None else None
    closed = first is None or first.rstrip().endswith("|")  # whether whole rows end in a pipe
    # Whether the last row goes on in the next sentences: the splitter ends sentences inside a cell
    # ("| `ndcg@10` | Gain of the first 10. 1.0 is best. |" is three), and the table goes on after.
    open_row = False
    label = ""  # the row's first cell under its header: what a later sentence of the row is about
    for i, sentence in enumerate(sentences):
        stripped = sentence.strip()
        if not stripped.startswith("|"):
            if not open_row:
                columns = None
            elif label:
                # "Measured for the default embedder." alone does not say what was measured.
                rest = stripped.removesuffix("|").rstrip()
                sentence = f"{label}; {rest}" if rest.endswith((".", "!", "?")) else f"{label}; {rest}."
            open_row = open_row and not stripped.endswith("|")
            out.append(sentence)
            continue
        open_row = not stripped.endswith("|")
        label = ""
        following = sentences[i + 1] if i + 1 < len(sentences) else ""
        if table_rule(following) and not table_rule(sentence):
            columns = table_cells(sentence)
            closed = sentence.rstrip().endswith("|")
        cells = table_cells(sentence)
        # A row the passage's edge cut ("| `mrr@10` | Reciprocal rank of th") stays as it is: read
        # under its headers, with a full stop, it passed for a whole row. (A row whose cell ends a
        # sentence leaves its closing pipe to the next piece, so only the last can be cut.)
        cut = closed and i == len(sentences) - 1 and not sentence.rstrip().endswith("|")
        if columns is None or table_rule(sentence) or cells == columns or len(cells) != len(columns) or cut:
            out.append(sentence)
            continue
        pairs = [
            f"{name}: {cell}" if name else cell for name, cell in zip(columns, cells, strict=True) if cell
        ]
        row = "; ".join(pairs)
        label = f"{columns[0]}: {cells[0]}" if columns[0] and cells[0] else ""
        # A last cell that ends its own sentence gets no second full stop ("... ideal ranking..").
        out.append(row if row.endswith((".", "!", "?")) else row + ".")
    return out


@dataclass(frozen=True)
class Support:
    """How well a passage supports a claim, and which of its sentences supports it best."""

    score: float
    semantic: float
    lexical: float
    best_sentence: int


def support(claim: str, passage: PassageSentences, cache: VectorCache) -> Support:
    """Score ``claim`` against ``passage`` (see the module docstring for the formula)."""
    vectors = cache.matrix([normalise(claim), *passage.sentences])
    similarities = vectors[1:] @ vectors[0]
    best = int(similarities.argmax())
    semantic = float(similarities[best])
    lexical = lexical_overlap(content_terms(claim), passage.terms)
    return Support(score=combine(semantic, lexical), semantic=semantic, lexical=lexical, best_sentence=best)


def question_scores(
    question: str, passages: Sequence[PassageSentences], cache: VectorCache
) -> list[list[float]]:
    """How well each sentence of each passage answers ``question``, in context.

    A sentence scores the support score of the question against it, or a decayed share
    (:data:`CONTEXT_DECAY`) of the score of the sentence before it in its paragraph, whichever is
    higher: manuals and papers name a topic, then explain it in sentences that share none of the
    question's words ("Before first use, prime the pump. Open the vent plug and fill the casing...").
    A markdown heading passes its score on across the blank line after it.
    """
    vectors = cache.matrix([question, *(t for p in passages for t in p.sentences)])
    similarity = iter((vectors[1:] @ vectors[0]).tolist())
    terms = content_terms(question)
    out: list[list[float]] = []
    for passage in passages:
        scores: list[float] = []
        previous = 0.0
        for i, (text, (start, _)) in enumerate(zip(passage.sentences, passage.spans, strict=True)):
            own = combine(next(similarity), lexical_overlap(terms, content_terms(text)))
            after_heading = i and passage.sentences[i - 1].startswith("#")
            if i and not after_heading and _BLANK_LINE.search(passage.text, passage.spans[i - 1][1], start):
                previous = 0.0
            previous = max(own, CONTEXT_DECAY * previous)
            scores.append(previous)
        out.append(scores)
    return out
