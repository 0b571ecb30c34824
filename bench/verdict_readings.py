"""Other readings of the stance classifier, against the one answers use, under repeated cross-validation.

Run from the repository root, after ``citeline --namespace eval_scifact eval ../shared/eval/scifact``
(or ``eval ... --answers``) has stored the SciFact corpus::

    CITELINE_DATA_DIR=<the eval's data dir> .venv/bin/python -m bench.verdict_readings \\
        [--claims-dir ../shared/eval/scifact-claims] [--namespace eval_scifact] [--shuffles 50]

For each labelled claim it searches the claim as ``citeline eval --answers`` asks it, finds the passage an
answer judges (:func:`citeline.answer.stance.assess`), and scores that passage with
:class:`citeline.answer.nli.NliJudge` in several ways:

- ``present``: what answers use, the higher margin of the focused and the tail premise;
- ``reversed``: the claim as premise, the focused sentences and the tail as hypotheses;
- ``both``: the highest of those four margins; ``mean``: the mean of the two directions' highest;
- ``sentences``, ``sentences_reversed``, ``sentences_both``: every sentence of the passage judged alone
  (in one direction, the other, or both averaged), the highest margin;
- ``present_and_sentences_both``: the mean of ``present`` and ``sentences_both``.

Each reading's threshold is chosen by the best macro-F1 on four folds and applied to the fifth, over
``--shuffles`` shuffles; each claim's correctness is averaged over the shuffles and paired with the
present reading's (:func:`citeline.eval.stats.paired_comparison`). It prints one JSON line per reading.
docs/answers.md ("More readings of the same classifier") has the figures.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.verdicts import SHARED, _qrels_lines, best_threshold, scores
from citeline.answer.nli import NliJudge, _focused, _tail
from citeline.answer.prompt import select_passages
from citeline.answer.stance import assess
from citeline.answer.support import VectorCache, sentence_spans, without_markers
from citeline.engine import Citeline
from citeline.eval.answers import claim_question
from citeline.eval.stats import paired_comparison
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings

#: Characters of a hypothesis when the claim is the premise: the model's 160 tokens hold the claim and
#: about this much of a passage (its tokenizer cuts the premise, so a longer hypothesis cannot fit).
HYPOTHESIS_CHARS = 450


@dataclass(frozen=True)
class Margins:
    """One claim's margins, each list in the order its premises or sentences were judged."""

    forward: list[float]  # (focused, claim), (tail, claim): the present reading is their max
    backward: list[float]  # (claim, focused), (claim, tail)
    sentences: list[float]  # (sentence, claim) for each sentence
    sentences_backward: list[float]  # (claim, sentence) for each sentence


def _sentences_both(m: Margins) -> float:
    return max((a + b) / 2 for a, b in zip(m.sentences, m.sentences_backward, strict=True))


READINGS: dict[str, Callable[[Margins], float]] = {
    "present": lambda m: max(m.forward),
    "reversed": lambda m: max(m.backward),
    "both": lambda m: max(m.forward + m.backward),
    "mean": lambda m: (max(m.forward) + max(m.backward)) / 2,
    "sentences": lambda m: max(m.sentences),
    "sentences_reversed": lambda m: max(m.sentences_backward),
    "sentences_both": _sentences_both,
    "present_and_sentences_both": lambda m: (max(m.forward) + _sentences_both(m)) / 2,
}


def claim_margins(claims_dir: Path, namespace: str) -> list[tuple[bool, Margins | None]]:
    """Each labelled claim's label (contradicted or not) and margins, in ``qrels`` order; no margins
    where no passage is about the claim."""
    queries = {
        str(q["_id"]): str(q["text"])
        for q in map(json.loads, (claims_dir / "queries.jsonl").read_text().splitlines())
        if q
    }
    labels: dict[str, str] = {}
    for line in (claims_dir / "evidence.jsonl").read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            labels.setdefault(str(item["query_id"]), str(item["label"]))
    order = list(dict.fromkeys(line.split("\t")[0] for line in _qrels_lines(claims_dir)))
    judge = NliJudge()
    out: list[tuple[bool, Margins | None]] = []
    with Citeline(Settings(namespace=namespace)) as store:
        for qid in (q for q in order if q in labels and q in queries):
            question = claim_question(queries[qid])
            claim = question.removeprefix("Is it true that ").removesuffix("?")
            hits = store.search(SearchRequest(question, top_k=store.settings.answer_passages))
            cache = VectorCache(store.embedder)
            passages = select_passages(hits)
            judged = assess(claim, passages, judge, cache, corroborating=0).margins
            contradicted = labels[qid] == "CONTRADICT"
            if not judged:
                out.append((contradicted, None))
                continue
            chunk_id = next(iter(judged))
            passage = next(p for p in passages if p.hit.chunk_id == chunk_id)
            focused, tail = _focused(claim, passage, cache), _tail(passage.hit.text)
            text = passage.hit.text
            sentences = [without_markers(text[s:e]).strip() for s, e in sentence_spans(text)]
            sentences = [s for s in sentences if len(s) > 20] or [text]
            cut = HYPOTHESIS_CHARS
            margins = Margins(
                forward=judge.margins([(focused, claim), (tail, claim)]),
                backward=judge.margins([(claim, focused[:cut]), (claim, tail[-cut:])]),
                sentences=judge.margins([(s, claim) for s in sentences]),
                sentences_backward=judge.margins([(claim, s[:cut]) for s in sentences]),
            )
            out.append((contradicted, margins))
    return out


def cross_validated(
    values: Sequence[float], contradicted: Sequence[bool], *, folds: int = 5, shuffles: int = 50
) -> tuple[list[float], float, float]:
    """Each claim's share of shuffles it was called right in, and the mean accuracy and macro-F1."""
    n = len(values)
    right = [0.0] * n
    accuracies: list[float] = []
    f1s: list[float] = []
    for seed in range(shuffles):
        order = list(range(n))
        random.Random(seed).shuffle(order)
        predicted = [False] * n
        for fold in range(folds):
            held = set(order[fold::folds])
            train = [i for i in order if i not in held]
            threshold = best_threshold([values[i] for i in train], [contradicted[i] for i in train])
            for i in held:
                predicted[i] = values[i] >= threshold
        for i in range(n):
            right[i] += (predicted[i] == contradicted[i]) / shuffles
        accuracy, f1 = scores([float(p) for p in predicted], list(contradicted), 1.0)
        accuracies.append(accuracy)
        f1s.append(f1)
    return right, sum(accuracies) / shuffles, sum(f1s) / shuffles


def auc(values: Sequence[float], contradicted: Sequence[bool]) -> float:
    """How often a contradicted claim's value is above a supported one's (ties count half)."""
    pos = [v for v, c in zip(values, contradicted, strict=True) if c]
    neg = [v for v, c in zip(values, contradicted, strict=True) if not c]
    return sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--claims-dir", type=Path, default=SHARED / "scifact-claims")
    parser.add_argument("--namespace", default="eval_scifact")
    parser.add_argument("--shuffles", type=int, default=50)
    args = parser.parse_args()
    claims = claim_margins(args.claims_dir, args.namespace)
    contradicted = [c for c, _ in claims]
    present: list[float] | None = None
    for name, reading in READINGS.items():
        # A claim with no passage about it gets no margin: "supports" whatever the threshold.
        values = [reading(m) if m else float("-inf") for _, m in claims]
        right, accuracy, f1 = cross_validated(values, contradicted, shuffles=args.shuffles)
        present = present or right
        vs = paired_comparison(present, right)
        finite = [(v, c) for v, c in zip(values, contradicted, strict=True) if v != float("-inf")]
        print(
            json.dumps(
                {
                    "reading": name,
                    "claims": len(values),
                    "auc": round(auc([v for v, _ in finite], [c for _, c in finite]), 3),
                    "cv_accuracy": round(accuracy, 3),
                    "cv_macro_f1": round(f1, 3),
                    "delta_accuracy_vs_present": round(vs.delta, 3),
                    "delta_ci": [round(x, 3) for x in vs.delta_ci],
                    "p": round(vs.p_value, 4),
                }
            )
        )


if __name__ == "__main__":
    main()
