"""``citeline eval --answers``: ask a BEIR data set's claims as questions and check the cited answers.

Each claim becomes ``Is it true that <claim>?`` (:func:`claim_question`), and a query that is already a
question is asked as written (:func:`question_of`); each is asked in a new
conversation of its own (:meth:`Citeline.chat`, the path users take: search, prompt, model, citations),
which is deleted afterwards. Per claim the harness records the passages given, what the answer cites,
who answered (the model, the extractive fallback, or the extractive answerer), and whether every
citation the reader sees resolves.

**The sample is fixed, with no randomness:** the first ``sample`` claims in the order their judgements
appear in ``qrels/<split>.tsv`` (claims without a text in ``queries.jsonl`` are skipped). On SciFact's
test split that is claims 1, 3, 5, 13, 36, ... (ids sorted by claim text, as SciFact ships them).

A displayed citation is a number the reader sees: a ``[n]`` marker in the answer or an entry of its
sources. It **resolves** when its number has a citation record, that record's chunk is one of the
passages given this turn, and the chunk is active in the store with the cited document, version and
page, its span holds the cited span, and the stored text there reads as the citation's excerpt.
The **gold abstract is cited** when a citation's document is one the judgements mark relevant.

**Verdicts** are scored when the folder has ``evidence.jsonl`` (lines of ``query_id``, ``doc_id`` and
``label``, ``SUPPORT`` or ``CONTRADICT``): a claim's expected verdict is ``supports`` when its labels
are all SUPPORT, ``contradicts`` when all CONTRADICT, ``mixed`` when both. Verdict accuracy is the
share of labelled claims whose answer gives the expected verdict (no verdict, or
``not_enough_evidence``, counts as wrong); macro-F1 averages the F1 of each expected class. Citation
stance accuracy counts the citations of labelled gold abstracts whose stance matches the label.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from citeline.answer import EXTRACTIVE, Citation, Complete, Error, Passage, Start
from citeline.answer.citations import MARKER
from citeline.answer.llm import GenerationOptions, Message
from citeline.answer.nli import default_judge
from citeline.answer.prompt import system_prompt
from citeline.answer.stance import VERDICTS
from citeline.answer.support import shown_text
from citeline.chat.session import delete_conversation
from citeline.engine import Citeline
from citeline.errors import GenerationError, InvalidRequestError
from citeline.eval.beir import BeirData, ingest_corpus
from citeline.eval.metrics import percentile
from citeline.eval.stats import CONFIDENCE, RESAMPLES, SEED, bootstrap_ci
from citeline.retrieve.search import Hit, SearchRequest

_STANCE_OF_LABEL = {"SUPPORT": "supports", "CONTRADICT": "contradicts"}

QUESTION_TEMPLATE = "Is it true that {claim}?"
"""How a claim is asked (see :func:`claim_question`)."""

AskedAs = Literal["claim", "question"]
"""How a query was asked: wrapped as a claim, or as written because it is a question."""

#: First words that open a question in English: the question words and the auxiliaries of a yes/no
#: question ("Does aspirin ...", "Can I ..."). A claim rarely opens with one, and none of SciFact's 1,409.
_QUESTION_OPENERS = frozenset(
    {"what", "why", "how", "when", "where", "which", "who", "whom", "whose"}
    | {"is", "are", "am", "was", "were", "do", "does", "did", "has", "have", "had"}
    | {"can", "could", "should", "would", "will", "shall", "may", "might", "must"}
)

AnsweredBy = Literal["model", "fallback", "extractive", "nobody"]
"""Who wrote the answer: the model; the extractive answerer after the model failed or cited nothing;
the extractive answerer as configured (no model); nobody (the evidence was missing, or an error)."""

_ELLIPSIS = "\u2026"
# A word keeps its capital when any later character is a capital or a digit: ALDH1, IgA, GATA-3, Fz/PCP.
_ACRONYM_TAIL = re.compile(r"[A-Z0-9]")


def claim_question(claim: str) -> str:
    """``claim`` asked as a yes/no question: ``Is it true that <claim>?``.

    A trailing period is dropped and the first letter lower-cased, unless the first word is an acronym
    or a symbol (a capital or digit after its first character): "Aspirin inhibits PGE2." becomes
    "Is it true that aspirin inhibits PGE2?", "ALDH1 expression ..." keeps its capitals.
    """
    text = claim.strip().rstrip(".").rstrip()
    first = text.split(maxsplit=1)[0] if text else ""
    if first[:1].isupper() and not _ACRONYM_TAIL.search(first[1:]):
        text = text[0].lower() + text[1:]
    return QUESTION_TEMPLATE.format(claim=text)


def question_of(query: str) -> tuple[str, AskedAs]:
    """How ``query`` is asked, and whether as a claim or as a question.

    A query that ends with "?" or opens with a question word or auxiliary is a question and is asked
    as written (trimmed); wrapping it gave "Is it true that how do I change the chunk size??". Any
    other query is a claim and becomes :func:`claim_question`.
    """
    text = query.strip()
    first = text.split(maxsplit=1)[0].lower() if text else ""
    if text.endswith("?") or first in _QUESTION_OPENERS:
        return text, "question"
    return claim_question(text), "claim"


def sample_claims(data: BeirData, sample: int, *, skip: int = 0) -> list[str]:
    """The fixed sample: ``sample`` claim ids in judgement-file order that have a text, after ``skip``."""
    if sample < 1:
        raise InvalidRequestError(f"the answer sample must hold at least one claim, got {sample}")
    if skip < 0:
        raise InvalidRequestError(f"the claims to skip cannot be fewer than none, got {skip}")
    return [qid for qid in data.qrels if qid in data.queries][skip : skip + sample]


@dataclass(frozen=True)
class AnswerRecord:
    """One claim asked and answered, with what its answer cites and how that was checked."""

    claim_id: str
    claim: str
    question: str
    #: Documents the judgements mark relevant.
    gold: tuple[str, ...]
    #: Document names of the passages given, in prompt order (a document can give several chunks).
    given: tuple[str, ...]
    #: Document names of the citations, in citation order.
    cited: tuple[str, ...]
    #: Distinct citation numbers the reader sees, and how many of them resolve.
    displayed: int
    resolved_count: int
    #: Why citations did not resolve, one line per failed check.
    problems: tuple[str, ...]
    answered_by: AnsweredBy
    provider: str
    fallback_reason: str | None
    #: Citations attributed by citeline to a passage rather than written by the model.
    attributed: int
    evidence_missing: bool
    error: str | None
    answer: str
    first_token_ms: float | None
    #: The answer stage alone, from the end of retrieval.
    answer_ms: float
    #: The whole question: search, answer and storing the turn.
    total_ms: float
    #: Processor time of this process over the whole question, every thread (on a shared machine, the
    #: steadier figure: close to what the question takes alone on an idle machine).
    cpu_ms: float = 0.0
    #: The answer's stages (see :class:`~citeline.answer.events.AnswerTimings`): until the prompt was
    #: ready (focusing the evidence, judging the claim), the model's whole reply, checking it.
    prompt_ms: float = 0.0
    generation_ms: float = 0.0
    verify_ms: float = 0.0
    #: The answer's verdict on the claim (None: no verdict was given).
    verdict: str | None = None
    #: The verdict the evidence labels call for (None: the claim has no labels).
    expected_verdict: str | None = None
    #: Each citation's (document name, stance), in citation order.
    stances: tuple[tuple[str, str], ...] = ()
    #: Whether the query was wrapped as a claim or asked as written, a question (:func:`question_of`).
    asked_as: AskedAs = "claim"
    #: The label of each gold abstract with one (document name -> SUPPORT or CONTRADICT).
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def verdict_right(self) -> bool:
        return self.expected_verdict is not None and self.verdict == self.expected_verdict

    @property
    def gold_stances(self) -> list[bool]:
        """For each citation of a labelled gold abstract: whether its stance matches the label."""
        labels = dict(self.labels)
        return [_STANCE_OF_LABEL[labels[doc]] == stance for doc, stance in self.stances if doc in labels]

    @property
    def resolved(self) -> bool:
        """Every displayed citation resolves (vacuously true without citations)."""
        return self.resolved_count == self.displayed and not self.problems

    @property
    def gold_given(self) -> bool:
        return any(doc in self.gold for doc in self.given)

    @property
    def gold_cited(self) -> bool:
        return any(doc in self.gold for doc in self.cited)

    @property
    def model_cited(self) -> int:
        """Citations the model wrote itself."""
        return len(self.cited) - self.attributed if self.answered_by == "model" else 0

    @property
    def uncited(self) -> bool:
        """An answer was given without a single citation, and not because the evidence was missing."""
        return not self.cited and not self.evidence_missing and self.error is None

    def as_dict(self) -> dict[str, Any]:
        """One line of ``--per-query``."""
        return {
            "claim_id": self.claim_id,
            "claim": self.claim,
            "question": self.question,
            "asked_as": self.asked_as,
            "gold": list(self.gold),
            "given": list(self.given),
            "cited": list(self.cited),
            "gold_given": self.gold_given,
            "gold_cited": self.gold_cited,
            "displayed": self.displayed,
            "resolved_count": self.resolved_count,
            "resolved": self.resolved,
            "problems": list(self.problems),
            "answered_by": self.answered_by,
            "provider": self.provider,
            "fallback_reason": self.fallback_reason,
            "model_cited": self.model_cited,
            "attributed": self.attributed,
            "evidence_missing": self.evidence_missing,
            "error": self.error,
            "answer": self.answer,
            "verdict": self.verdict,
            "expected_verdict": self.expected_verdict,
            "citations": [{"document": doc, "stance": stance} for doc, stance in self.stances],
            "first_token_ms": self.first_token_ms,
            "answer_ms": self.answer_ms,
            "total_ms": self.total_ms,
            "cpu_ms": self.cpu_ms,
            "prompt_ms": self.prompt_ms,
            "generation_ms": self.generation_ms,
            "verify_ms": self.verify_ms,
        }


@dataclass(frozen=True)
class AnswerEvaluation:
    """A run of ``citeline eval --answers``: the corpus ingest and one record per claim, in sample order."""

    dataset: str
    namespace: str
    llm: str
    persona: str
    corpus_added: int
    corpus_unchanged: int
    ingest_seconds: float
    records: list[AnswerRecord]
    #: Corpus entries not in the index (see :class:`~citeline.eval.beir.CorpusIngest`).
    corpus_failed: int = 0

    def summary(self) -> dict[str, Any]:
        """The JSON line of ``citeline eval --answers --json``.

        Rates are shares of the claims, except ``citation_resolution_rate`` (of displayed citations;
        None when none was displayed) and ``fallback_rate`` (of the claims the model was asked).
        First-token times leave out the claims whose evidence was missing (None when that is all).
        """
        records = self.records
        n = len(records) or 1
        displayed = sum(r.displayed for r in records)
        asked_model = [r for r in records if r.answered_by in ("model", "fallback")]
        # Saying the evidence is missing takes no generation: it would flatter the first-token times.
        first_tokens = [
            r.first_token_ms for r in records if r.first_token_ms is not None and not r.evidence_missing
        ]
        count: dict[str, int] = {
            by: sum(r.answered_by == by for r in records) for by in ("model", "fallback", "extractive")
        }
        labelled = [r for r in records if r.expected_verdict is not None]
        stances = [right for r in records for right in r.gold_stances]
        return {
            "dataset": self.dataset,
            "namespace": self.namespace,
            "llm": self.llm,
            "persona": self.persona,
            "claims": len(records),
            "asked_as_claims": sum(r.asked_as == "claim" for r in records),
            "asked_as_questions": sum(r.asked_as == "question" for r in records),
            "corpus_added": self.corpus_added,
            "corpus_unchanged": self.corpus_unchanged,
            "corpus_failed": self.corpus_failed,
            "ingest_seconds": self.ingest_seconds,
            "citations_displayed": displayed,
            "citations_resolved": sum(r.resolved_count for r in records),
            "citation_resolution_rate": (
                sum(r.resolved_count for r in records) / displayed if displayed else None
            ),
            "answers_resolved_rate": sum(r.resolved for r in records) / n,
            "gold_given_rate": sum(r.gold_given for r in records) / n,
            "gold_cited_rate": sum(r.gold_cited for r in records) / n,
            "answers_without_citation": sum(r.uncited for r in records),
            "evidence_missing": sum(r.evidence_missing for r in records),
            "errors": sum(r.error is not None for r in records),
            "answered_by_model": count["model"],
            "answered_by_fallback": count["fallback"],
            "answered_extractive": count["extractive"],
            "fallback_rate": count["fallback"] / len(asked_model) if asked_model else 0.0,
            "citations_by_model": sum(r.model_cited for r in records),
            "citations_attributed": sum(r.attributed for r in records),
            "model_written_rate": count["model"] / n,
            "model_written_rate_ci": _share_ci([r.answered_by == "model" for r in records]),
            "gold_cited_rate_ci": _share_ci([r.gold_cited for r in records]),
            "claims_labelled": len(labelled),
            "verdict_accuracy": (sum(r.verdict_right for r in labelled) / len(labelled))
            if labelled
            else None,
            "verdict_accuracy_ci": _share_ci([r.verdict_right for r in labelled]),
            "verdict_macro_f1": verdict_macro_f1(labelled) if labelled else None,
            "verdict_macro_f1_ci": verdict_macro_f1_ci(labelled) if labelled else None,
            # How often each verdict was given; "none": the answer gave no verdict.
            "verdicts": {v or "none": sum(r.verdict == v for r in records) for v in (*VERDICTS, None)},
            "gold_citations_with_label": len(stances),
            "stance_accuracy_gold": sum(stances) / len(stances) if stances else None,
            "ttft_p50_ms": percentile(first_tokens, 50) if first_tokens else None,
            "ttft_p90_ms": percentile(first_tokens, 90) if first_tokens else None,
            "answer_p50_ms": percentile([r.answer_ms for r in records], 50),
            "total_p50_ms": percentile([r.total_ms for r in records], 50),
            "total_cpu_p50_ms": percentile([r.cpu_ms for r in records], 50),
            "prompt_p50_ms": percentile([r.prompt_ms for r in records], 50),
            "generation_p50_ms": percentile([r.generation_ms for r in records], 50),
            "verify_p50_ms": percentile([r.verify_ms for r in records], 50),
        }


def evaluate_answers(
    cl: Citeline,
    data: BeirData,
    *,
    sample: int = 100,
    skip: int = 0,
    persona: str | None = None,
    console: Console | None = None,
) -> AnswerEvaluation:
    """Ingest (or reuse) the corpus, ask the fixed sample of claims, check every answer's citations.

    The sample is ``sample`` claims after the first ``skip`` (:func:`sample_claims`).
    The model named by ``cl``'s ``llm`` setting answers (``extractive``: no model), in the persona given
    (default: the ``persona`` setting). The model is loaded and the keyword index filled before the
    first claim, so no claim's timings include them.
    """
    console = console or Console(stderr=True)
    persona = persona or cl.settings.persona
    system_prompt(persona)  # an unknown persona fails before the ingest, not at the first claim
    claim_ids = sample_claims(data, sample, skip=skip)
    evidence = load_evidence(data.folder)
    cl.llm  # an unknown provider fails before the ingest  # noqa: B018
    ingest = ingest_corpus(cl, data, console)
    _warm_up(cl, question_of(data.queries[claim_ids[0]])[0] if claim_ids else "warm up")
    records: list[AnswerRecord] = []
    with Progress(
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task("claims", total=len(claim_ids))
        for qid in claim_ids:
            records.append(_ask_claim(cl, data, qid, persona, evidence.get(qid, {})))
            progress.advance(task)
    return AnswerEvaluation(
        dataset=data.folder.name,
        namespace=cl.settings.namespace,
        llm=cl.settings.llm,
        persona=persona,
        corpus_added=ingest.added,
        corpus_unchanged=ingest.unchanged,
        ingest_seconds=round(ingest.seconds, 1),
        records=records,
        corpus_failed=ingest.failed,
    )


def _warm_up(cl: Citeline, question: str) -> None:
    cl.search(SearchRequest(question, top_k=cl.settings.answer_passages))
    default_judge().load()
    llm = cl.llm
    if llm is None:
        return
    try:
        for _piece in llm.stream([Message("user", "Say yes.")], GenerationOptions(max_tokens=1)):
            break
    except GenerationError:
        # The claims will meet the same failure and record it (the extractive fallback answers).
        pass


def load_evidence(folder: Path) -> dict[str, dict[str, str]]:
    """``evidence.jsonl`` of a BEIR folder as claim id -> document id -> label; empty when absent."""
    path = folder / "evidence.jsonl"
    if not path.is_file():
        return {}
    out: dict[str, dict[str, str]] = {}
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                label = str(item["label"])
                if label not in _STANCE_OF_LABEL:
                    raise ValueError(f"label {label!r} is not SUPPORT or CONTRADICT")
                out.setdefault(str(item["query_id"]), {})[str(item["doc_id"])] = label
            except (ValueError, KeyError, TypeError) as exc:
                raise InvalidRequestError(f"{path}, line {n}: not an evidence line ({exc})") from exc
    return out


def expected_verdict(labels: Mapping[str, str]) -> str | None:
    """The verdict a claim's evidence labels call for (None without labels)."""
    found = {_STANCE_OF_LABEL[label] for label in labels.values()}
    if not found:
        return None
    return "mixed" if len(found) > 1 else found.pop()


def verdict_macro_f1(records: Sequence[AnswerRecord]) -> float:
    """The mean F1 over the expected verdict classes of ``records`` (labelled claims)."""
    classes = sorted({r.expected_verdict for r in records if r.expected_verdict is not None})
    scores: list[float] = []
    for c in classes:
        tp = sum(r.verdict == c and r.expected_verdict == c for r in records)
        fp = sum(r.verdict == c and r.expected_verdict != c for r in records)
        fn = sum(r.verdict != c and r.expected_verdict == c for r in records)
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(scores) / len(scores)


def verdict_macro_f1_ci(records: Sequence[AnswerRecord]) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`verdict_macro_f1`, resampling the labelled claims.

    Seeded and sized as :func:`~citeline.eval.stats.bootstrap_ci`; a class absent from a resample is
    left out of that resample's mean, as :func:`verdict_macro_f1` leaves out a class no claim expects.
    """
    classes = sorted({r.expected_verdict for r in records if r.expected_verdict is not None})
    expected = np.array([classes.index(r.expected_verdict) for r in records if r.expected_verdict in classes])
    given = np.array(
        [
            classes.index(r.verdict) if r.verdict in classes else -1
            for r in records
            if r.expected_verdict in classes
        ]
    )
    picks = np.random.default_rng(SEED).integers(0, expected.size, size=(RESAMPLES, expected.size))
    e, g = expected[picks], given[picks]
    scores = np.zeros((RESAMPLES, len(classes)))
    present = np.zeros((RESAMPLES, len(classes)), dtype=bool)
    for c in range(len(classes)):
        tp = ((g == c) & (e == c)).sum(axis=1)
        wrong = ((g == c) & (e != c)).sum(axis=1) + ((g != c) & (e == c)).sum(axis=1)
        scores[:, c] = np.where(tp > 0, 2 * tp / np.maximum(2 * tp + wrong, 1), 0.0)
        present[:, c] = (e == c).any(axis=1)
    means = (scores * present).sum(axis=1) / present.sum(axis=1)
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


def _share_ci(hits: Sequence[bool]) -> tuple[float, float] | None:
    """The bootstrap interval of a share (None for no claims)."""
    return bootstrap_ci([float(h) for h in hits]) if hits else None


def _ask_claim(
    cl: Citeline, data: BeirData, qid: str, persona: str, labels: Mapping[str, str]
) -> AnswerRecord:
    question, asked_as = question_of(data.queries[qid])
    session = cl.chat(persona=persona)

    async def run() -> tuple[Start | None, Complete | Error | None]:
        start: Start | None = None
        async for event in session.ask(question):
            if isinstance(event, Start):
                start = event
            elif isinstance(event, Complete | Error):
                return start, event
        return start, None

    began, cpu_began = time.perf_counter(), time.process_time()
    try:
        start, end = asyncio.run(run())
        total_ms = (time.perf_counter() - began) * 1e3
        cpu_ms = (time.process_time() - cpu_began) * 1e3
    finally:
        # Turns that failed are not stored, but the conversation is: it goes either way.
        delete_conversation(cl, session.id, session.access)
    passages = start.passages if start is not None else ()
    gold = tuple(doc for doc, grade in data.qrels[qid].items() if grade > 0)
    base: dict[str, Any] = {
        "claim_id": qid,
        "claim": data.queries[qid],
        "question": question,
        "asked_as": asked_as,
        "gold": gold,
        "given": tuple(p.hit.document_name for p in passages),
        "total_ms": total_ms,
        "cpu_ms": cpu_ms,
        "expected_verdict": expected_verdict(labels),
        "labels": tuple(labels.items()),
    }
    if not isinstance(end, Complete):
        return AnswerRecord(
            **base,
            cited=(),
            displayed=0,
            resolved_count=0,
            problems=(),
            answered_by="nobody",
            provider=start.provider if start is not None else cl.settings.llm,
            fallback_reason=None,
            attributed=0,
            evidence_missing=False,
            error=end.message if end is not None else "the answer stream ended without completing",
            answer="",
            first_token_ms=None,
            answer_ms=0.0,
        )
    stored = {hit.chunk_id: hit for hit in cl.fetch([c.chunk_id for c in end.citations])}
    numbers, problems = check_citations(end, passages, stored)
    return AnswerRecord(
        **base,
        cited=tuple(c.document_name for c in end.citations),
        displayed=len(numbers),
        resolved_count=len(numbers) - len({n for n, _ in problems}),
        problems=tuple(problem for _, problem in problems),
        answered_by=_answered_by(end),
        provider=end.provider,
        fallback_reason=end.fallback_reason,
        attributed=sum(c.attributed for c in end.citations),
        evidence_missing=end.evidence_missing,
        error=None,
        answer=end.answer,
        first_token_ms=end.timings.first_token,
        answer_ms=end.timings.total,
        prompt_ms=end.timings.prompt,
        generation_ms=end.timings.generation,
        verify_ms=end.timings.verify,
        verdict=end.verdict,
        stances=tuple((c.document_name, c.stance) for c in end.citations),
    )


def _answered_by(complete: Complete) -> AnsweredBy:
    if complete.evidence_missing:
        return "nobody"
    if complete.fell_back:
        return "fallback"
    return "extractive" if complete.provider == EXTRACTIVE else "model"


def check_citations(
    complete: Complete, passages: Sequence[Passage], stored: Mapping[int, Hit]
) -> tuple[list[int], list[tuple[int, str]]]:
    """The citation numbers a reader sees in ``complete`` and the failed checks, as (number, why).

    ``passages`` are the passages given (the :class:`Start` event's); ``stored`` maps chunk ids to the
    chunks as the store holds them now (:meth:`Citeline.fetch`). See the module docstring for what
    resolving means.
    """
    records = {c.number: c for c in complete.citations}
    shown = [int(n) for group in MARKER.findall(complete.answer) for n in group.split(", ")]
    numbers = list(dict.fromkeys([*shown, *records]))
    given = {p.chunk_id for p in passages}
    problems: list[tuple[int, str]] = []
    for number in numbers:
        citation = records.get(number)
        if citation is None:
            problems.append((number, f"[{number}] is in the answer but has no citation record"))
            continue
        if number not in shown:
            problems.append((number, f"[{number}] is listed as a source but not cited in the answer"))
        if citation.chunk_id not in given:
            problems.append((number, f"[{number}] cites chunk {citation.chunk_id}, not a passage given"))
        hit = stored.get(citation.chunk_id)
        if hit is None:
            problems.append((number, f"[{number}] cites chunk {citation.chunk_id}, not active in the store"))
            continue
        problems.extend((number, f"[{number}] {why}") for why in _mismatches(citation, hit))
    return numbers, problems


def _mismatches(citation: Citation, hit: Hit) -> list[str]:
    out: list[str] = []
    where = (citation.document_id, citation.version, citation.page)
    if where != (hit.document_id, hit.version, hit.page):
        out.append(
            f"points to document {citation.document_id} v{citation.version} p.{citation.page}; "
            f"chunk {hit.chunk_id} is in {hit.document_id} v{hit.version} p.{hit.page}"
        )
    if not hit.start <= citation.start <= citation.end <= hit.end:
        out.append(
            f"span {citation.start}-{citation.end} is not inside chunk {hit.chunk_id} ({hit.start}-{hit.end})"
        )
    if not citation.start <= citation.excerpt_start <= citation.excerpt_end <= citation.end:
        out.append(f"excerpt {citation.excerpt_start}-{citation.excerpt_end} is outside the cited span")
        return out
    # The excerpt reads the stored sentence as the citation scored it (a table's row under its headers).
    passage = hit.text[citation.start - hit.start : citation.end - hit.start]
    offset = citation.start
    stored = shown_text(passage, citation.excerpt_start - offset, citation.excerpt_end - offset, hit.context)
    if not stored.startswith(citation.excerpt.removesuffix(_ELLIPSIS)):
        out.append(f"excerpt does not match the stored text at {citation.excerpt_start}")
    return out


def write_per_claim(evaluation: AnswerEvaluation, path: Path) -> int:
    """One JSON object per claim (see :meth:`AnswerRecord.as_dict`); returns the count."""
    lines = [json.dumps(r.as_dict()) for r in evaluation.records]
    try:
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    except OSError as exc:
        raise InvalidRequestError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return len(lines)


def summary_table(summary: Mapping[str, Any]) -> Table:
    """The human summary of ``citeline eval --answers``: one row per figure."""

    def rate(key: str) -> str:
        value = summary[key]
        return "n/a" if value is None else f"{value:.1%}"

    def interval(key: str) -> str:
        value = summary.get(f"{key}_ci")
        return "" if value is None else f" [{value[0]:.1%}, {value[1]:.1%}]"

    def ms(key: str) -> str:
        value = summary[key]
        return "n/a" if value is None else f"{value:.0f}"

    table = Table("answers", "value")
    rows = [
        (
            "citations resolved",
            f"{rate('citation_resolution_rate')} "
            f"({summary['citations_resolved']} of {summary['citations_displayed']})",
        ),
        ("answers fully resolved", rate("answers_resolved_rate")),
        ("gold abstract given", rate("gold_given_rate")),
        ("gold abstract cited", rate("gold_cited_rate") + interval("gold_cited_rate")),
        ("answers without citation", str(summary["answers_without_citation"])),
        ("evidence missing", str(summary["evidence_missing"])),
        ("errors", str(summary["errors"])),
        (
            "answered by model / fallback / extractive",
            f"{summary['answered_by_model']} / {summary['answered_by_fallback']} / "
            f"{summary['answered_extractive']}",
        ),
        ("fallback rate", rate("fallback_rate")),
        (
            "citations by model / attributed",
            f"{summary['citations_by_model']} / {summary['citations_attributed']}",
        ),
        ("answers the model wrote", rate("model_written_rate") + interval("model_written_rate")),
        (
            "verdict accuracy",
            rate("verdict_accuracy")
            + interval("verdict_accuracy")
            + f" (of {summary['claims_labelled']} labelled)",
        ),
        (
            "verdict macro-F1",
            "n/a"
            if summary["verdict_macro_f1"] is None
            else f"{summary['verdict_macro_f1']:.3f}"
            + (
                f" [{summary['verdict_macro_f1_ci'][0]:.3f}, {summary['verdict_macro_f1_ci'][1]:.3f}]"
                if summary["verdict_macro_f1_ci"] is not None
                else ""
            ),
        ),
        (
            "stance right on gold abstracts",
            rate("stance_accuracy_gold") + f" (of {summary['gold_citations_with_label']} citations)",
        ),
        ("first token p50 / p90 ms", f"{ms('ttft_p50_ms')} / {ms('ttft_p90_ms')}"),
        ("answer p50 ms", ms("answer_p50_ms")),
        ("question p50 ms (with search)", ms("total_p50_ms")),
        ("question p50 processor ms, all threads", ms("total_cpu_p50_ms")),
        (
            "answer stages p50 ms: prompt / model / check",
            f"{ms('prompt_p50_ms')} / {ms('generation_p50_ms')} / {ms('verify_p50_ms')}",
        ),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table
