"""Query-focused evidence: of each retrieved chunk, the model reads the sentences that match the question.

A small local model reads its prompt at about 150 tokens/s on two idle CPU cores, so five whole
1,000-character chunks (about 1,100 tokens) put seconds between the question and the first word of the
answer. Most of a chunk does not bear on the question anyway. :func:`focus_passages` keeps, under a
token budget:

1. the best sentence of each passage, in rank order, while it fits, so the model sees every passage it
   may cite (the first passage always, its sentence cut to the budget if need be);
2. then the best remaining sentences of the passages given, by score, while they fit.

Whole sentences, not an equal share of the budget cut from each passage: shown fragments of five
passages rather than whole sentences of three, the 0.5B model cited its own answer in 6 of 20 SciFact
claims instead of 15, mostly saying the sources did not answer.

Sentences are scored against the question as the extractive answerer scores them
(:func:`~citeline.answer.support.question_scores`: embedding similarity plus the share of the
question's content terms, and a decayed share of the score of the sentence before), and shown in page
order, with `` … `` where sentences were left out. Never shown: a sentence that repeats the passage's
title (its header shows the title), one an earlier passage already gave (chunks overlap), markdown
headings, and sentences whose only content terms are numbers (or that have none). A passage none of
whose sentences fit is not given. The embeddings go into the answer's :class:`VectorCache`, where the
citation check and the extractive answerer find them again.

Citations still resolve to the whole chunk: a focused passage only changes what the model reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from citeline.answer.prompt import (
    CHARS_PER_TOKEN,
    MIN_EVIDENCE_TOKENS,
    Passage,
    evidence_chars,
    select_passages,
)
from citeline.answer.support import (
    PassageSentences,
    Span,
    VectorCache,
    content_terms,
    normalise,
    question_scores,
)
from citeline.errors import InvalidRequestError
from citeline.retrieve.search import Hit

_ELLIPSIS = "\u2026"


@dataclass(frozen=True)
class _Candidate:
    passage: int  # index into the passages
    sentence: int  # index into the passage's sentences
    span: Span
    score: float


def focus_passages(
    question: str, evidence: Sequence[Hit], cache: VectorCache, *, max_tokens: int | None
) -> list[Passage]:
    """The passages to give the model for ``question``, numbered, within ``max_tokens`` of evidence.

    ``evidence`` is the retrieved hits, best first (a chunk retrieved twice is given once). With
    ``max_tokens`` None, or when the whole chunks fit, every chunk is given whole. Tokens are counted
    as characters / :data:`~citeline.answer.prompt.CHARS_PER_TOKEN` over the evidence as the prompt
    lays it out.
    """
    check_evidence_budget(max_tokens)
    passages = select_passages(evidence)
    if max_tokens is None or not passages:
        return passages
    budget = int(max_tokens * CHARS_PER_TOKEN)
    if evidence_chars(passages) <= budget:
        return passages
    candidates = _candidates(question, passages, cache)
    chosen: dict[int, list[_Candidate]] = {}

    def fits(extra: _Candidate) -> bool:
        trial = {**chosen, extra.passage: [*chosen.get(extra.passage, []), extra]}
        return evidence_chars(_shown(passages, trial)) <= budget

    by_passage: dict[int, list[_Candidate]] = {}
    for candidate in sorted(candidates, key=lambda c: -c.score):
        by_passage.setdefault(candidate.passage, []).append(candidate)
    for index in sorted(by_passage):
        best = by_passage[index][0]
        if fits(best):
            chosen[index] = [best]
        elif not chosen:
            # The best passage is always given, its sentence cut to the budget if need be.
            chosen[index] = [_cut(passages[index], best, budget)]
    for candidate in sorted(candidates, key=lambda c: -c.score):
        picked = chosen.get(candidate.passage)
        if picked is not None and candidate.sentence not in {c.sentence for c in picked} and fits(candidate):
            picked.append(candidate)
    given = _shown(passages, chosen)
    return [replace(p, number=n) for n, p in enumerate(given, start=1)]


def check_evidence_budget(max_tokens: int | None) -> None:
    """Refuse a budget too small for one sentence (:class:`InvalidRequestError`)."""
    if max_tokens is not None and max_tokens < MIN_EVIDENCE_TOKENS:
        raise InvalidRequestError(
            f"max_evidence_tokens must be at least {MIN_EVIDENCE_TOKENS}, got {max_tokens}"
        )


def _candidates(question: str, passages: Sequence[Passage], cache: VectorCache) -> list[_Candidate]:
    """Every sentence worth showing, scored against the question in context."""
    split = [PassageSentences.of_hit(p.hit) for p in passages]
    scores = question_scores(question, split, cache)
    out: list[_Candidate] = []
    seen: dict[str, list[str]] = {}  # per document: the sentences of the passages before, casefolded
    for index, (passage, sentences) in enumerate(zip(passages, split, strict=True)):
        title = normalise(passage.hit.title or passage.hit.document_name).casefold()
        earlier = seen.setdefault(passage.hit.document_name, [])
        for i, (span, text) in enumerate(zip(sentences.spans, sentences.sentences, strict=True)):
            folded = text.casefold()
            # A heading lends its score to the sentences after it but says little alone; a sentence
            # inside the title (chunks may start mid-title) is in the block's header already.
            if text.startswith("#") or folded in title or any(folded in s for s in earlier):
                continue
            # A sentence of numbers alone is most often a list item's bare "2." that the splitter cut
            # off; shown, it spends the budget on "… 2. … 3." (seen in the user guide's lists).
            if any(not term.isdigit() for term in content_terms(text)):
                out.append(_Candidate(index, i, span, scores[index][i]))
        earlier.extend(s.casefold() for s in sentences.sentences)
    return out


def _shown(passages: Sequence[Passage], chosen: dict[int, list[_Candidate]]) -> list[Passage]:
    """The passages with chosen sentences, each showing them in page order (all of them: whole)."""
    out: list[Passage] = []
    for index, passage in enumerate(passages):
        picked = chosen.get(index)
        if not picked:
            continue
        spans = tuple(c.span for c in sorted(picked, key=lambda c: c.sentence))
        out.append(replace(passage, shown=spans))
    return out


def _cut(passage: Passage, candidate: _Candidate, budget: int) -> _Candidate:
    """``candidate`` shortened at a word boundary so that its passage alone fits in ``budget``."""
    start, end = candidate.span
    keep = max(budget - evidence_chars([replace(passage, shown=((start, start),))]) - len(_ELLIPSIS), 1)
    text = passage.text[start:end][:keep]
    cut = text.rfind(" ")
    if cut > keep // 2:
        text = text[:cut]
    return replace(candidate, span=(start, start + len(text.rstrip())))


def approx_evidence_tokens(passages: Sequence[Passage]) -> int:
    """The evidence's size in approximate tokens, as the budget counts it."""
    # Rounded first: 276 / 4.6 is 60.00000000000001 in floating point, which made the 276 characters a
    # budget of 60 tokens allows count as 61.
    return math.ceil(round(evidence_chars(passages) / CHARS_PER_TOKEN, 6))
