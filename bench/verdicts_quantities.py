"""What the check of a claim's quantities changes on the 150 labelled SciFact claims.

Run from the repository root::

    CITELINE_DATA_DIR=<the eval's data dir> .venv/bin/python -m bench.verdicts_quantities \\
        [--claims-dir ../shared/eval/scifact-claims] [--corpus ../shared/eval/scifact/corpus.jsonl] \\
        [--namespace eval_scifact] [--out rows.json]

Each claim is asked as ``citeline eval --answers`` asks it; the passages are those citeline's search
returns from the whole-corpus store (as ``python -m bench.verdicts --retrieved``), and
:func:`citeline.answer.stance.assess` judges them as an answer does (the best-ranked passage about the
claim, then one corroborating document), once with the check of quantities and once without it (the
classifier's judgements are shared, so the two differ only by the check). Reported: the claims whose
verdict the check changes, each with the numbers it found differing, and verdict accuracy and
macro-F1 over SUPPORT/CONTRADICT both ways (``not_enough_evidence`` counts as wrong, as in
``citeline eval``). ``--alter`` asks the claims that state a quantity with their figures off by ten
instead, and ``--sentences`` checks the corpus's own sentences, altered, against their abstracts.
Also, as a wider look for false alarms, the claims whose *gold abstract* (given whole) the check
finds stating one of the claim's quantities otherwise, whatever the classifier says.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from collections.abc import Sequence
from pathlib import Path

from bench.verdicts import SHARED, labelled_claims
from citeline.answer.nli import NliJudge
from citeline.answer.prompt import Passage, select_passages
from citeline.answer.quantities import disagreement, quantities
from citeline.answer.stance import Judgement, assess
from citeline.answer.support import VectorCache, sentence_spans
from citeline.engine import Citeline
from citeline.eval.answers import claim_question
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings

_EXPECTED = {"SUPPORT": "supports", "CONTRADICT": "contradicts"}


class _Remembered:
    """The NLI judge, each (claim, chunk) judged once: both readings share the classifier's judgements."""

    def __init__(self, judge: NliJudge) -> None:
        self.model_id = judge.model_id
        self._judge = judge
        self._seen: dict[tuple[str, int], Judgement] = {}

    def judge(self, claim: str, passage: Passage, cache: VectorCache) -> Judgement:
        key = (claim, passage.chunk_id)
        if key not in self._seen:
            self._seen[key] = self._judge.judge(claim, passage, cache)
        return self._seen[key]


def scores(expected: Sequence[str], given: Sequence[str]) -> tuple[float, float]:
    """Verdict accuracy and macro-F1 over the expected classes, as ``citeline eval`` computes them."""
    accuracy = sum(e == g for e, g in zip(expected, given, strict=True)) / len(expected)
    f1s = []
    for c in sorted(set(expected)):
        tp = sum(e == c and g == c for e, g in zip(expected, given, strict=True))
        fp = sum(e != c and g == c for e, g in zip(expected, given, strict=True))
        fn = sum(e == c and g != c for e, g in zip(expected, given, strict=True))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return accuracy, sum(f1s) / len(f1s)


def altered(text: str) -> str:
    """``text`` with the number of each quantity it states off by a factor of ten, as a slip makes it
    (30% for 3%, 5 mg for 50 mg): divided by ten from 10 up, multiplied below."""

    def slip(number: re.Match[str]) -> str:
        value = float(number.group(0).replace(",", ""))
        return f"{value / 10 if value >= 10 else value * 10:g}"

    out = text
    for quantity in reversed(quantities(text)):
        where = out.find(quantity.text)
        if where >= 0:
            written = re.sub(r"\d[\d,]*(?:\.\d+)?", slip, quantity.text)
            out = out[:where] + written + out[where + len(quantity.text) :]
    return out


def sentence_probe(corpus: Path, limit: int) -> dict[str, object]:
    """Each sentence stating a quantity, of the first ``limit`` abstracts, checked against its own
    abstract as written (it must never disagree) and with its numbers altered (:func:`altered`: it
    should, unless the abstract states the altered figure too)."""
    sentences = fired_as_written = fired_altered = 0
    missed: list[str] = []
    with corpus.open(encoding="utf-8") as fh:
        for line in itertools.islice(fh, limit):
            text = str(json.loads(line)["text"])
            for start, end in sentence_spans(text):
                sentence = text[start:end]
                if not quantities(sentence) or altered(sentence) == sentence:
                    continue
                sentences += 1
                fired_as_written += disagreement(sentence, text) is not None
                if disagreement(altered(sentence), text) is not None:
                    fired_altered += 1
                elif len(missed) < 10:
                    missed.append(altered(sentence)[:300])
    return {
        "abstracts": limit,
        "sentences_stating_a_quantity": sentences,
        "fired_as_written": fired_as_written,
        "fired_altered": fired_altered,
        "missed_altered_examples": missed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--claims-dir", type=Path, default=SHARED / "scifact-claims")
    parser.add_argument("--corpus", type=Path, default=SHARED / "scifact" / "corpus.jsonl")
    parser.add_argument("--namespace", default="eval_scifact", help="the whole-corpus eval store")
    parser.add_argument("--out", type=Path, help="write each claim's row here (JSON)")
    parser.add_argument(
        "--alter",
        action="store_true",
        help="ask only the claims that state a quantity, its figures off by ten (see altered); labels then "
        "no longer hold, so no accuracy is reported",
    )
    parser.add_argument(
        "--sentences",
        type=int,
        default=0,
        help="also check this many abstracts' sentences, altered, against their own abstract (no store)",
    )
    args = parser.parse_args()
    if args.sentences:
        print(json.dumps(sentence_probe(args.corpus, args.sentences), indent=1))
        return

    queries, labels, claims = labelled_claims(args.claims_dir)
    wanted = {doc for q in claims for doc in labels[q]}
    abstracts: dict[str, str] = {}
    with args.corpus.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                item = json.loads(line)
                if str(item["_id"]) in wanted:
                    abstracts[str(item["_id"])] = str(item["text"])

    judge = _Remembered(NliJudge())
    rows: list[dict[str, object]] = []
    with Citeline(Settings(namespace=args.namespace)) as store:
        for qid in claims:
            question = claim_question(queries[qid])
            claim = question.removeprefix("Is it true that ").removesuffix("?")
            if args.alter:
                if altered(claim) == claim:
                    continue
                claim = altered(claim)
                question = f"Is it true that {claim}?"
            hits = store.search(SearchRequest(question, top_k=store.settings.answer_passages))
            passages = select_passages(hits)
            cache = VectorCache(store.embedder)
            checked = assess(claim, passages, judge, cache)
            unchecked = assess(claim, passages, judge, cache, compare_quantities=False)
            gold = [disagreement(claim, abstracts[doc]) for doc in labels[qid]]
            text = {p.chunk_id: p.hit.document_name for p in passages}
            rows.append(
                {
                    "claim_id": qid,
                    "claim": claim,
                    "expected": _EXPECTED[next(iter(labels[qid].values()))],
                    "verdict": checked.verdict,
                    "verdict_unchecked": unchecked.verdict,
                    "claim_quantities": [q.text for q in quantities(claim)],
                    "differing": {
                        text[chunk_id]: d.describe() for chunk_id, d in checked.disagreements.items()
                    },
                    "gold_differing": [d.describe() for d in gold if d is not None],
                    # What the passages judged state of the claim's kinds of quantity, to read by hand.
                    "judged_state": {
                        text[chunk_id]: [
                            q.text
                            for q in quantities(next(p.text for p in passages if p.chunk_id == chunk_id))
                            if q.dimension in {c.dimension for c in quantities(claim)}
                        ]
                        for chunk_id in checked.margins
                    },
                }
            )
    expected = [str(r["expected"]) for r in rows]
    changed = [r for r in rows if r["verdict"] != r["verdict_unchecked"]]
    report: dict[str, object] = {
        "claims": len(rows),
        "claims_stating_a_quantity": sum(bool(r["claim_quantities"]) for r in rows),
        "verdicts_changed": len(changed),
        "supports_unchecked": sum(r["verdict_unchecked"] == "supports" for r in rows),
        "supports_checked": sum(r["verdict"] == "supports" for r in rows),
        "stating_a_quantity": [
            {
                k: r[k]
                for k in ("claim_id", "claim", "expected", "verdict", "claim_quantities", "judged_state")
            }
            for r in rows
            if r["claim_quantities"]
        ],
        "changed": [
            {k: r[k] for k in ("claim_id", "claim", "expected", "verdict_unchecked", "verdict", "differing")}
            for r in changed
        ],
        "judged_passage_differs_but_not_supports": [
            {k: r[k] for k in ("claim_id", "claim", "expected", "verdict", "differing")}
            for r in rows
            if r["differing"] and r not in changed
        ],
        "gold_abstract_differs": [
            {k: r[k] for k in ("claim_id", "claim", "expected", "gold_differing")}
            for r in rows
            if r["gold_differing"]
        ],
    }
    if not args.alter:  # an altered claim is no longer what its label says
        report["accuracy_f1_unchecked"] = [
            round(x, 3) for x in scores(expected, [str(r["verdict_unchecked"]) for r in rows])
        ]
        report["accuracy_f1_checked"] = [
            round(x, 3) for x in scores(expected, [str(r["verdict"]) for r in rows])
        ]
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
