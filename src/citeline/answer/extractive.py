"""The ``extractive`` answerer: no language model; the answer is the passages' own best sentences.

Every sentence of every given passage is scored against the question with the support score of
:mod:`citeline.answer.support` (embedding similarity plus the share of the question's content terms
the sentence holds). A sentence also inherits a decayed share of the score of the sentence before it
in its paragraph (:data:`~citeline.answer.support.CONTEXT_DECAY`, see
:func:`~citeline.answer.support.question_scores`): manuals and papers name a topic, then explain it
in sentences that share none of the question's words ("Before first use, prime the pump. Open the
vent plug and fill the casing..."), and those are the answer.

The best few sentences are kept, leaving out near-duplicates (chunks overlap, so the same sentence
often comes twice) and sentences scoring well below the best one. The best sentence of each passage
comes first; more sentences of a passage only fill the room left. An answer that quotes several
passages cites the one that answers more often than one that quotes the best-matching passage three
times: on SciFact claims 101 to 300 (the answer sample is claims 1 to 100), the gold abstract was
cited in 144 of 200 answers this way against 139 taking the best sentences wherever they are
(``python -m bench.extractive``), while a manual's procedure, one passage, is still quoted step by
step. They are quoted as written, passage by passage in the order the search ranked the passages,
each passage's in its own order, each followed by its citation, so every claim of the answer is a
verbatim, cited passage sentence. (The search's rank weighs the whole passage, a sentence's score
only the sentence: on 32 open questions on the user guide, answers led by the passage of their
best-scoring sentence opened with a passage of an answering section 13 times, answers led by the
best-ranked passage 20 times, and none of the 32 did worse; ``python -m bench.guide_answers``.)

It answers when no model is configured, and it is the fallback when generation fails or the model's
reply cites no given passage.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from citeline.answer.citations import CitationNumbering
from citeline.answer.names import Reading, read_under, written_codes
from citeline.answer.prompt import Passage
from citeline.answer.rows import named_rows, row_keys
from citeline.answer.support import (
    ANALYZER,
    PassageSentences,
    VectorCache,
    content_terms,
    question_scores,
    without_markers,
)

MAX_SENTENCES = 3
"""Sentences in an extractive answer, at most."""

RELATIVE_FLOOR = 0.7
"""A sentence scoring below this share of the best sentence's score is left out."""

DUPLICATE_SIMILARITY = 0.9
"""Two sentences whose embeddings are at least this similar say the same thing: only the first is kept."""

_CLOSING = re.compile(r"[.!?][\"'\u201d\u2019)]*$")
_QUOTE_CLOSING = re.compile(r"[.!?][\"\u201d\u2019]$")
_ELLIPSES = ("...", "\u2026")
_ENUMERATION = re.compile(r"(?:^|(?<=\s))(?:\d{1,2}|[A-Za-z])\)$")
_QUOTE = re.compile(r'(?<!\d)"')
_CLOSING_QUOTES = ('"', "\u201d")
_BULLET = re.compile(r"^[-*\u2022]\s+")
# Only asterisks: "__init__" is a name, not emphasis.
_EMPHASIS = re.compile(r"\*\*([^\s*](?:.*?[^\s*])?)\*\*|(?<![\w*])\*([^\s*](?:[^*]*[^\s*])?)\*(?![\w*])")
# Sentences with fewer content terms are headings or fragments ("Priming", "See below").
_MIN_TERMS = 3
# A list item may end without a full stop ("- Close the vent plug"); other unpunctuated lines may not.
_LIST_ITEM = re.compile(r"(?:[-*\u2022\u2013]|\d{1,3}[.)])\s")
# A figure's or table's label ("Figure 7-26."): the sentence after it is its caption.
_LABEL = re.compile(r"(?:Figure|Fig\.|Table|Plate|Chart)\s*[\w.\-]*\w\.?", re.IGNORECASE)
_TABLES = frozenset({"text/csv"})
_SHAPE = re.compile(r"[^\W\d_]|\d")
# A "[1]" inside inline code is the text's own (a guide's "numbered `[1]` to `[n]`"): quoted, it would
# read as a citation, and without it the sentence says "numbered `` to `[n]`". Not quoted at all.
_CODE_MARKER = re.compile(r"`[^`\n]*\[ *\d{1,4} *\][^`\n]*`")
# A bracket the sentence goes on from in small letters: the end of a sentence cut before its bracket
# ("(81% of people on ART by 2020) unless they adopt ..."), not one that opens with it ("(See below.)").
_RUN_ON = re.compile(r"[(\[][^)\]]*[)\]],?\s+[a-z]")
# Dot leaders join a PDF table's or contents page's cells ("Stabilizer wiring change ........ Up to
# $6,715."); the splitter ends a "sentence" at them.
_LEADER = re.compile(r"\.{4,}|(?:\. ){3,}\.")


@dataclass(frozen=True)
class Extract:
    """An extractive answer: its text (with conversation numbers) and the chunks it cites, in order."""

    text: str
    cited: tuple[int, ...]


@dataclass(frozen=True)
class _Sentence:
    passage: Passage
    position: int
    text: str
    score: float


def extractive_answer(
    question: str,
    passages: Sequence[Passage],
    numbering: CitationNumbering,
    cache: VectorCache,
    *,
    max_sentences: int = MAX_SENTENCES,
    each_passage_first: bool = True,
    own_words: str | None = None,
    lead: Sequence[int] = (),
) -> Extract:
    """Answer ``question`` with the best-matching sentences of ``passages``, each cited.

    ``own_words``: what the user typed, when ``question`` is a follow-up rewritten with terms borrowed
    from earlier turns ("And the valve?" searched as "And the valve? (torque nut)"). A sentence then
    scores the mean of its scores for the two, so the user's new words weigh more than the borrowed
    ones, which alone would quote the earlier topic's sentences again, while the borrowed terms still
    help a follow-up with few words of its own ("What about its maximum?").

    Citation numbers come from ``numbering``, which gains a number for each chunk cited for the first time.
    ``each_passage_first`` quotes the best sentence of each passage before a second of any (see the
    module docstring); off, the best sentences are taken wherever they are.

    ``lead``: chunk ids of passages to quote first, in this order: the passages that bear out the
    verdict the answer opens with ("Yes: the sources support this claim [1]."), so that the reader's
    next sentence says what [1] found. Ranked by score alone, a passage that only shares the claim's
    topic came first in a third of the answers to 150 SciFact claims, and in 9 of them the verdict's
    passage was not quoted at all. A lead passage the ranking did not choose adds its best sentence,
    whatever it scores, while the answer is at most one sentence longer than ``max_sentences``; what
    the ranking chose stays (made room for, the lead had crowded out 4 gold abstracts of 150).
    """
    scored = sorted(
        _scored(question, passages, cache, own_words), key=lambda c: (-c.score, c.passage.number, c.position)
    )
    if not scored:
        return Extract(text="", cited=())
    floor = scored[0].score * RELATIVE_FLOOR
    chosen: list[_Sentence] = []
    # First the best sentence of each passage, then, while there is room, more of the same passages.
    for per_passage in (1, max_sentences) if each_passage_first else (max_sentences,):
        for candidate in scored:
            if len(chosen) == max_sentences or candidate.score < floor:
                break
            if (
                any(c is candidate for c in chosen)
                or sum(c.passage is candidate.passage for c in chosen) >= per_passage
            ):
                continue
            if not any(_same(candidate.text, other.text, cache) for other in chosen):
                chosen.append(candidate)
    # The lead's passages not quoted yet, one sentence each, one past the answer's length at most: what
    # the ranking chose stays, so no passage it would cite is left out for them.
    for chunk_id in lead:
        best = next((c for c in scored if c.passage.chunk_id == chunk_id), None)
        if (
            best is not None
            and len(chosen) <= max_sentences
            and not any(c.passage is best.passage for c in chosen)
            and not any(_same(best.text, other.text, cache) for other in chosen)
        ):
            chosen.append(best)
    # Passages in the order of the lead, then of the search's rank; sentences in the order the passage
    # has them.
    leading = {chunk_id: i for i, chunk_id in enumerate(lead)}
    rank = {id(c.passage): (leading.get(c.passage.chunk_id, len(lead)), c.passage.number) for c in chosen}
    chosen.sort(key=lambda c: (rank[id(c.passage)], c.position))
    cited: list[int] = []
    sentences: list[str] = []
    for sentence in chosen:
        chunk_id = sentence.passage.chunk_id
        sentences.append(_with_citation(sentence.text, numbering.number(chunk_id)))
        if chunk_id not in cited:
            cited.append(chunk_id)
    return Extract(text=" ".join(sentences), cited=tuple(cited))


def _scored(
    question: str, passages: Sequence[Passage], cache: VectorCache, own_words: str | None = None
) -> list[_Sentence]:
    """Every quotable sentence with its score, context included."""
    split = [(p, PassageSentences.of_hit(p.hit)) for p in passages]
    scores = question_scores(question, [sentences for _, sentences in split], cache)
    asked = question
    if own_words is not None and own_words.strip() and own_words != question:
        own = question_scores(own_words, [sentences for _, sentences in split], cache)
        scores = [[(a + b) / 2 for a, b in zip(s, o, strict=True)] for s, o in zip(scores, own, strict=True)]
        asked = own_words
    looked_up = written_codes(asked) if ANALYZER.only_codes(asked) else frozenset()
    off_code = [_off_code(p, sentences.sentences, looked_up) for p, sentences in split]
    if all(len(off) == len(sentences.sentences) for off, (_, sentences) in zip(off_code, split, strict=True)):
        off_code = [set() for _ in split]  # nothing says the code: the best sentences, as for words
    keys = [row_keys(p.hit) for p in passages]
    named = named_rows((k for found in keys if found for k in found), Reading.of((asked,)))
    if named:
        off_code = [
            off | _off_row(found, sentences.sentences, named)
            for off, found, (_, sentences) in zip(off_code, keys, split, strict=True)
        ]
    out: list[_Sentence] = []
    for i, ((passage, sentences), passage_scores) in enumerate(zip(split, scores, strict=True)):
        cut = _cut(passage, sentences.sentences) | _in_code(sentences) | off_code[i]
        others = [t for j, (_, other) in enumerate(split) if j != i for t in other.sentences]
        if sentences.sentences and _goes_on_from(sentences.sentences[0], others):
            cut.add(0)
        for position, (sentence, score) in enumerate(zip(sentences.sentences, passage_scores, strict=True)):
            # Quoted with citeline's citation: the source's own "[2]" would read as another one.
            text = _plain(without_markers(sentence))
            if position not in cut and _quotable(text) and not _CODE_MARKER.search(sentence):
                out.append(_Sentence(passage=passage, position=position, text=text, score=score))
    if not out:
        # Passages of headings and fragments only: quote them rather than say nothing.
        out = [
            _Sentence(passage=p, position=i, text=without_markers(t), score=0.0)
            for p, sentences in split
            for i, t in enumerate(sentences.sentences)
        ]
    return out


def _off_code(passage: Passage, sentences: Sequence[str], looked_up: frozenset[str]) -> set[int]:
    """The positions of ``sentences`` that say nothing of the codes a lookup asks about (``looked_up``,
    :func:`~citeline.answer.names.written_codes`): "What does E5100 mean?" is answered by the sentences
    that write E5100 and what follows one of them, not by the rows around its row.

    Ranked by the question's words, an error table's rows all score alike ("Code: E4021; Meaning:
    ..."), and the answer to "What does E5100 mean?" quoted the E4021, E5100 and E5101 rows, E4021's
    first. The sentences after one that writes the code go on about it ("E5100: no power. Measure
    TP3.") up to one that writes another code of its kind (the next row, E5101); in a passage whose
    heading or title writes the code, every sentence but those does.
    """
    if not looked_up:
        return set()
    shapes = {_shape(code) for code in looked_up}
    about = any(written_codes(text) & looked_up for text in read_under(passage.hit))
    off: set[int] = set()
    before = about
    for i, sentence in enumerate(sentences):
        written = written_codes(sentence)
        if written & looked_up:
            before = True
        elif not before or any(_shape(code) in shapes for code in written):
            off.add(i)
            before = about
    return off


def _off_row(keys: tuple[str, ...] | None, sentences: Sequence[str], named: frozenset[str]) -> set[int]:
    """The positions of ``sentences`` that quote a table's row the question does not name, when it
    names some (``named``, :func:`~citeline.answer.rows.named_rows`): asked the renal adjustment for
    sitagliptin, the answer quoted the sitagliptin row, then the empagliflozin and lithium rows ("eGFR
    < 30: halve the dose"), contradicting it for a reader who skims. A passage that is no table's rows
    (``keys`` None) is left as it is."""
    if keys is None:
        return set()
    if not named.intersection(keys):
        return set(range(len(sentences)))
    others = [f": {key}" for key in keys if key not in named]
    ours = [f": {key}" for key in keys if key in named]
    return {
        i
        for i, sentence in enumerate(sentences)
        if any(cell in sentence for cell in others) and not any(cell in sentence for cell in ours)
    }


def _shape(code: str) -> str:
    """A code's letters and digits as classes: "e5100" and "e5101" are codes of one kind (rows of one
    table), "tp3" (a test point the E5100 row names) is not."""
    return _SHAPE.sub(lambda m: "a" if m.group().isalpha() else "9", code)


def _in_code(sentences: PassageSentences) -> set[int]:
    """The positions of the sentences that start inside a fenced code block of the passage: a command
    line (``citeline ask "how do I ..."``) is no claim, and one quoting the question was quoted as its
    answer."""
    fences = [m.start() for m in _FENCE_LINE.finditer(sentences.text)]
    inside = list(zip(fences[::2], fences[1::2], strict=False))  # the passage taken to start outside code
    if len(fences) % 2:
        inside.append((fences[-1], len(sentences.text)))  # a block the passage's edge cuts
    return {i for i, (start, _) in enumerate(sentences.spans) if any(a <= start <= b for a, b in inside)}


#: A line that opens or closes a fenced code block.
_FENCE_LINE = re.compile(r"^[ \t]{0,3}(?:```|~~~)", re.MULTILINE)


def _plain(sentence: str) -> str:
    """``sentence`` without its list bullet and Markdown emphasis: inside a paragraph of quotes,
    "- **Ingest memory**: the peak ..." read as a stray list item with asterisks."""
    return _EMPHASIS.sub(lambda m: m.group(1) or m.group(2), _BULLET.sub("", sentence, count=1))


def _quotable(sentence: str) -> bool:
    # Headings and list introductions ("Do the following:") say nothing on their own; code blocks,
    # table rows and cells joined by dot leaders read badly as prose.
    return (
        bool(sentence)
        and not sentence.startswith(("#", "|"))
        and "```" not in sentence
        and not _LEADER.search(sentence)
        and not sentence.endswith(":")
        and len(content_terms(sentence)) >= _MIN_TERMS
    )


def _cut(passage: Passage, sentences: Sequence[str]) -> set[int]:
    """The positions of ``sentences`` that are not whole sentences of running text, so not quotable.

    Chunks start and end at any word (neighbours overlap), so a passage's first sentence may begin
    mid-sentence ("through the medium of the locking section, exerts ...") and its last may stop
    mid-sentence ("The elastic stop nut is a standard nut with the height"), a list item too: quoted,
    either would claim something the source does not say. Inside a passage, a line without closing punctuation
    that is no list item is a heading or the labels of a figure ("Elastic Stop Nut", "Flexloc nut
    Fiber locknut"), and a figure's label ("Figure 7-26.") and the caption after it are no claims
    either. A passage of one sentence (a short note) and a table's rows are quoted whole.
    """
    if len(sentences) < 2 or passage.hit.content_type in _TABLES:
        return set()
    cut = {
        i
        for i, sentence in enumerate(sentences)
        if not _CLOSING.search(sentence.rstrip()) and not _LIST_ITEM.match(sentence)
    }
    # A quotation ending in its own full stop ends no sentence when a small letter follows: 'as
    # "The max pressure is 10 bar." is still found supported' is one sentence split in two halves,
    # and either half alone says something else. So does an ellipsis inside a sentence ('API key
    # cl_... was revoked' was quoted as 'API key cl_.. [1]. was revoked (HTTP 401) [1].').
    for i in range(1, len(sentences)):
        before = sentences[i - 1].rstrip()
        if sentences[i][:1].islower() and (_QUOTE_CLOSING.search(before) or before.endswith(_ELLIPSES)):
            cut |= {i - 1, i}
    # A bracket or quotation closed that never opened ('Sign in again with a valid key.").', 'December
    # 11, 2018 (83 FR 63561)), was published ...') or opened and never closed is a sentence cut inside
    # it, by the splitter or by the passage's edge: the sentence goes on around it.
    for i, sentence in enumerate(sentences):
        # The splitter leaves a quotation's closing mark after its full stop to the next sentence
        # ('... termed "inflammaging.' / '" Inflammaging is ...'): both are whole but for it.
        if sentence[:1] in _CLOSING_QUOTES:
            sentence = sentence[1:]
        following = sentences[i + 1] if i + 1 < len(sentences) else ""
        if following[:1] in _CLOSING_QUOTES:
            sentence += following[0]
        if _pieces_of_a_quotation(sentence):
            cut.add(i)
    # A Markdown row the passage holds without its table's headers cannot be read (support.readable_rows)
    # and stays as written, "| ...", never quoted; neither are its cells' later sentences, which say
    # nothing of the row they belong to ("Measured for the default embedder: see `conversations.md`."
    # led an answer on CITELINE_ANSWER_MIN_SIMILARITY). A row read under its headers names its row in
    # them ("Metric: `ndcg@10`; 1.0 means ...") and does not start with "|".
    in_row = False
    for i, sentence in enumerate(sentences):
        stripped = sentence.strip()
        if stripped.startswith("|"):
            in_row = not stripped.endswith("|")
        elif in_row:
            cut.add(i)
            in_row = not stripped.endswith("|")
    labels = {i for i, sentence in enumerate(sentences) if _LABEL.fullmatch(sentence.strip())}
    cut |= labels | {i + 1 for i in labels}
    if sentences[0][:1].islower() or sentences[0][:1] in {",", ";", ")"} or _RUN_ON.match(sentences[0]):
        # The piece runs on to the first closing punctuation: a line break or a colon can split it
        # ('... does not disagree with "the maximum is 10 bar":' / 'it states the figure), PDF tables...').
        for i, sentence in enumerate(sentences[:-1]):
            cut.add(i)
            if _CLOSING.search(sentence.rstrip()):
                break
    hit = passage.hit
    if hit.total_chunks is not None and hit.chunk_index >= hit.total_chunks - 1:
        # The document's last passage ends where the document does, punctuated or not.
        cut.discard(len(sentences) - 1)
    elif not _CLOSING.search(sentences[-1].rstrip()):
        # A list item may end without a full stop, but one that ends the passage may have been cut
        # mid-sentence ('- ... a negation turns them ("do not operate it above'); whole, it is in the
        # next passage.
        cut.add(len(sentences) - 1)
    return cut


def _goes_on_from(first: str, others: Sequence[str]) -> bool:
    """Whether a passage's ``first`` sentence is the end of one of ``others``, the sentences of the
    other passages.

    Neighbouring chunks overlap, and a chunk may start mid-sentence on a capital ("MCAS activation as
    a result of input from a single AOA sensor." ends "... and allowed repeated MCAS activation as a
    result of ..."), which :func:`_cut` cannot tell from a whole sentence; quoted, it claims what the
    sentence does not say alone, and often beside the whole sentence from the other passage.
    """
    return any(len(other) > len(first) and other.endswith(" " + first) for other in others)


def _pieces_of_a_quotation(sentence: str) -> bool:
    # A straight quote after a digit is an inch mark (3/8").
    quotes = len(_QUOTE.findall(sentence)) % 2 == 1
    return quotes or sentence.count("\u201c") != sentence.count("\u201d") or not _brackets_pair(sentence)


def _brackets_pair(sentence: str) -> bool:
    # "1) ... 2) ..." and "a)" number a list: a closing bracket with none open after such a marker
    # closes nothing.
    depth = 0
    for i, ch in enumerate(sentence):
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth:
                depth -= 1
            elif not _ENUMERATION.search(sentence, 0, i + 1):
                return False
    return depth == 0


def _same(a: str, b: str, cache: VectorCache) -> bool:
    if a.casefold() == b.casefold():
        return True
    vectors = cache.matrix([a, b])
    return float(np.dot(vectors[0], vectors[1])) >= DUPLICATE_SIMILARITY


def _with_citation(sentence: str, number: int) -> str:
    """``sentence`` with ``[number]`` before its closing punctuation: ``Prime the pump [1].``; after the
    quotation or bracket that closes it: ``... ask ("Is it safe to run the pump dry?") [1]``.

    A quotation or bracket keeps its own full stop or question mark: the marker before it fell inside
    ('("Is it safe to run the pump dry [1]?")') and misquoted the source.
    """
    body = sentence.rstrip()
    end = _CLOSING.search(body)
    if end is None:
        return f"{body} [{number}]."
    if len(end.group()) > 1:
        return f"{body} [{number}]"
    return f"{body[: end.start()]} [{number}]{end.group()}"
