"""The stance classifier on labelled claims, the gold abstract given: how well do its verdicts hold?

Run from the repository root::

    .venv/bin/python -m bench.verdicts [--claims-dir ../shared/eval/scifact-claims] \\
        [--corpus ../shared/eval/scifact/corpus.jsonl] [--folds 5] [--margins out.json] [--retrieved]

Every labelled (claim, abstract) pair of ``evidence.jsonl`` is judged by
:class:`citeline.answer.nli.NliJudge` against that abstract, given whole as the passage, exactly as an
answer judges a passage: stance accuracy counts the pairs whose stance matches the label, and a
claim's verdict is the stance of its first labelled abstract (no claim of the 150 has abstracts of
both labels). The threshold on the margin is chosen by ``--folds``-fold cross-validation (the best
macro-F1 on the other folds, applied to the held-out fold; fixed shuffle), and the held-out
predictions are scored: verdict accuracy and macro-F1 over SUPPORT/CONTRADICT.

The claims are split in two, by their position in ``qrels/test.tsv`` (the order ``citeline eval
--answers`` asks them in): :data:`HELD_OUT` (positions 31 to 90) was never looked at while tuning and
is what ``citeline eval --answers 60 --answers-skip 30`` asks; the rest is the development set. The
threshold chosen on the development claims alone (the one to compare with
:data:`citeline.answer.stance.CONTRADICTS_MARGIN`) is scored on the held-out claims too. A
classification error here is the classifier's; ``citeline eval --answers`` adds retrieval's (the
passage judged is not the gold abstract, or only a chunk of it).

With ``--retrieved``, each claim's margin is instead that of the passage an answer judges (see
:func:`citeline.answer.stance.assess`): the best-ranked passage about the claim among those citeline's
search returns for the claim's question, from the store ``citeline eval --answers`` built over the
same folder (``CITELINE_DATA_DIR``, namespace ``--namespace``). That is the margin
:data:`~citeline.answer.stance.CONTRADICTS_MARGIN` is applied to in answers, so it is chosen on these
readings; ``in_use_vs_dev_held_out`` pairs the two thresholds on the held-out claims. A claim with no
passage about it gets no margin (-inf: "supports" here; ``not_enough_evidence`` in an answer).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from citeline.answer.nli import NliJudge
from citeline.answer.prompt import Passage, select_passages
from citeline.answer.stance import CONTRADICTS_MARGIN, assess
from citeline.answer.support import VectorCache
from citeline.embed import get_embedder
from citeline.engine import Citeline
from citeline.eval.answers import claim_question
from citeline.eval.stats import bootstrap_ci, paired_comparison
from citeline.retrieve.search import Hit, SearchRequest
from citeline.settings import Settings

SHARED = Path(__file__).resolve().parents[2] / "shared" / "eval"

HELD_OUT = range(30, 90)
"""Claims held out from tuning: 0-based positions in ``qrels/test.tsv`` order. Of the others, claims
1 to 30 were asked while the answer path was built and claims 91 to 96 chose the claim prompt."""


def _passage(doc_id: str, title: str, text: str) -> Passage:
    hit = Hit(
        chunk_id=1,
        document_id=uuid.UUID(int=1),
        document_name=doc_id,
        title=title,
        version=1,
        content_type="text/plain",
        page=1,
        start=0,
        end=len(text),
        section=None,
        chunk_index=0,
        total_chunks=1,
        text=text,
        distance=0.0,
        similarity=1.0,
        keyword_score=0.0,
        fused_score=0.0,
    )
    return Passage(number=1, hit=hit)


def scores(margins: Sequence[float], contradicts: Sequence[bool], threshold: float) -> tuple[float, float]:
    """Accuracy and macro-F1 (over the two classes) of predicting contradicts at ``margin >= threshold``."""
    predicted = [m >= threshold for m in margins]
    accuracy = sum(p == g for p, g in zip(predicted, contradicts, strict=True)) / len(margins)
    f1s = []
    for positive in (True, False):
        tp = sum(p == positive and g == positive for p, g in zip(predicted, contradicts, strict=True))
        fp = sum(p == positive and g != positive for p, g in zip(predicted, contradicts, strict=True))
        fn = sum(p != positive and g == positive for p, g in zip(predicted, contradicts, strict=True))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return accuracy, sum(f1s) / 2


def best_threshold(margins: Sequence[float], contradicts: Sequence[bool]) -> float:
    """The candidate threshold (a margin seen) with the best macro-F1, the lowest among ties."""
    return max(sorted(set(margins)), key=lambda t: scores(margins, contradicts, t)[1])


def labelled_claims(claims_dir: Path) -> tuple[dict[str, str], dict[str, dict[str, str]], list[str]]:
    """The claims folder's texts by id, each claim's labelled abstracts (doc id -> SUPPORT/CONTRADICT),
    and the labelled claims in the order ``citeline eval --answers`` asks them (``qrels/test.tsv``)."""
    queries = {
        str(q["_id"]): str(q["text"])
        for q in map(json.loads, (claims_dir / "queries.jsonl").read_text().splitlines())
        if q
    }
    order = list(dict.fromkeys(line.split("\t")[0] for line in _qrels_lines(claims_dir)))
    labels: dict[str, dict[str, str]] = {}
    for line in (claims_dir / "evidence.jsonl").read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            labels.setdefault(str(item["query_id"]), {})[str(item["doc_id"])] = str(item["label"])
    return queries, labels, [q for q in order if q in labels and q in queries]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--claims-dir", type=Path, default=SHARED / "scifact-claims")
    parser.add_argument("--corpus", type=Path, default=SHARED / "scifact" / "corpus.jsonl")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--margins", type=Path, help="write each claim's margin and label here (JSON)")
    parser.add_argument(
        "--retrieved", action="store_true", help="judge the passage an answer judges, not the gold abstract"
    )
    parser.add_argument("--namespace", default="eval_scifact_claims", help="with --retrieved: the eval store")
    args = parser.parse_args()

    queries, labels, claims = labelled_claims(args.claims_dir)
    wanted = {doc for q in claims for doc in labels[q]}
    docs: dict[str, tuple[str, str]] = {}
    with args.corpus.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                item = json.loads(line)
                if str(item["_id"]) in wanted:
                    docs[str(item["_id"])] = (str(item.get("title") or ""), str(item["text"]))

    judge = NliJudge()
    cache = VectorCache(get_embedder(Settings().embedding_model))
    rows: list[dict[str, object]] = []
    times: list[float] = []
    pairs: list[tuple[float, bool]] = []
    store = Citeline(Settings(namespace=args.namespace)) if args.retrieved else None
    for position, qid in enumerate(claims):
        # The claim as citeline.eval asks it, then as the answer's judge sees it (the claim itself).
        question = claim_question(queries[qid])
        claim = question.removeprefix("Is it true that ").removesuffix("?")
        if store is not None:
            label = next(iter(labels[qid].values()))
            hits = store.search(SearchRequest(question, top_k=store.settings.answer_passages))
            began = time.perf_counter()
            doc, margin = _judged(hits, judge, claim, VectorCache(store.embedder))
            times.append(time.perf_counter() - began)
            pairs.append((margin, label == "CONTRADICT"))
            row = {"claim_id": qid, "position": position + 1, "doc_id": doc, "label": label}
            rows.append({**row, "margin": margin, "held_out": position in HELD_OUT})
            continue
        for n, (doc, label) in enumerate(labels[qid].items()):
            title, text = docs[doc]
            began = time.perf_counter()
            judgement = judge.judge(claim, _passage(doc, title, text), cache)
            times.append(time.perf_counter() - began)
            pairs.append((judgement.margin, label == "CONTRADICT"))
            if n == 0:
                row = {"claim_id": qid, "position": position + 1, "doc_id": doc, "label": label}
                rows.append({**row, "margin": judgement.margin, "held_out": position in HELD_OUT})
    margins = [float(str(r["margin"])) for r in rows]
    contradicts = [r["label"] == "CONTRADICT" for r in rows]

    shuffled = list(range(len(rows)))
    random.Random(0).shuffle(shuffled)
    predicted: list[bool] = [False] * len(rows)
    for fold in range(args.folds):
        test = set(shuffled[fold :: args.folds])
        train = [i for i in shuffled if i not in test]
        threshold = best_threshold([margins[i] for i in train], [contradicts[i] for i in train])
        for i in test:
            predicted[i] = margins[i] >= threshold
    cv_accuracy = sum(p == g for p, g in zip(predicted, contradicts, strict=True)) / len(rows)
    cv_f1 = scores([float(p) for p in predicted], contradicts, 1.0)[1]
    dev = [i for i, r in enumerate(rows) if not r["held_out"]]
    held = [i for i, r in enumerate(rows) if r["held_out"]]
    dev_threshold = best_threshold([margins[i] for i in dev], [contradicts[i] for i in dev])
    held_scores = scores([margins[i] for i in held], [contradicts[i] for i in held], dev_threshold)
    pair_right = [(m >= CONTRADICTS_MARGIN) == c for m, c in pairs]
    in_use_right = [float((margins[i] >= CONTRADICTS_MARGIN) == contradicts[i]) for i in held]
    dev_right = [float((margins[i] >= dev_threshold) == contradicts[i]) for i in held]
    paired = paired_comparison(in_use_right, dev_right)
    report = {
        "claims": len(rows),
        "contradicted": sum(contradicts),
        "cv_folds": args.folds,
        "cv_accuracy": round(cv_accuracy, 3),
        "cv_accuracy_ci": [
            round(x, 3)
            for x in bootstrap_ci([float(p == g) for p, g in zip(predicted, contradicts, strict=True)])
        ],
        "cv_macro_f1": round(cv_f1, 3),
        "best_threshold_all": round(best_threshold(margins, contradicts), 3),
        "dev_claims": len(dev),
        "dev_threshold": round(dev_threshold, 3),
        "held_out_claims": len(held),
        "held_out_accuracy_f1": [round(x, 3) for x in held_scores],
        "in_use_threshold": CONTRADICTS_MARGIN,
        "in_use_accuracy_f1": [round(x, 3) for x in scores(margins, contradicts, CONTRADICTS_MARGIN)],
        "pairs": len(pairs),
        "in_use_stance_accuracy_pairs": round(sum(pair_right) / len(pairs), 3),
        # The development threshold against the one in use, claim by claim on the held-out claims.
        "in_use_vs_dev_held_out": {
            "delta": round(paired.delta, 3),
            "delta_ci": [round(x, 3) for x in paired.delta_ci],
            "p": round(paired.p_value, 4),
        },
        "judge_ms_p50": round(statistics.median(times) * 1e3, 1),
    }
    if args.margins:
        args.margins.write_text(json.dumps(rows, indent=1))
    if store is not None:
        store.close()
    print(json.dumps(report))


def _judged(hits: Sequence[Hit], judge: NliJudge, claim: str, cache: VectorCache) -> tuple[str | None, float]:
    """The document and margin of the passage an answer given ``hits`` judges for ``claim``: -inf when
    no passage is about the claim."""
    assessment = assess(claim, select_passages(hits), judge, cache, corroborating=0)
    for chunk_id, margin in assessment.margins.items():  # one passage at most is judged
        return next(h.document_name for h in hits if h.chunk_id == chunk_id), margin
    return None, float("-inf")


def _qrels_lines(folder: Path) -> list[str]:
    lines = (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    return [line for line in lines[1:] if line.strip()]


if __name__ == "__main__":
    main()
