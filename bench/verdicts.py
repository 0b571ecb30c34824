"""The stance classifier on labelled claims, the gold abstract given: how well do its verdicts hold?

Run from the repository root::

    .venv/bin/python -m bench.verdicts [--claims-dir ../shared/eval/scifact-claims] \\
        [--corpus ../shared/eval/scifact/corpus.jsonl] [--folds 5] [--margins out.json]

Each labelled claim of ``evidence.jsonl`` (its first labelled abstract) is judged by
:class:`citeline.answer.nli.NliJudge` against that abstract, given as the passage, exactly as an
answer judges its best passage. The threshold on the margin is chosen by ``--folds``-fold
cross-validation (the best macro-F1 on the other folds, applied to the held-out fold; fixed shuffle),
and the held-out predictions are scored: verdict accuracy and macro-F1 over SUPPORT/CONTRADICT. The
threshold best on all claims is printed too (the one to compare with
:data:`citeline.answer.stance.CONTRADICTS_MARGIN`), with the figures of the threshold in use. 150
claims are few: a difference of a few claims is noise.
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
from citeline.answer.prompt import Passage
from citeline.answer.stance import CONTRADICTS_MARGIN
from citeline.answer.support import VectorCache
from citeline.embed import get_embedder
from citeline.eval.answers import claim_question
from citeline.retrieve.search import Hit
from citeline.settings import Settings

SHARED = Path(__file__).resolve().parents[2] / "shared" / "eval"


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--claims-dir", type=Path, default=SHARED / "scifact-claims")
    parser.add_argument("--corpus", type=Path, default=SHARED / "scifact" / "corpus.jsonl")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--margins", type=Path, help="write each claim's margin and label here (JSON)")
    args = parser.parse_args()

    queries = {
        str(q["_id"]): str(q["text"])
        for q in map(json.loads, (args.claims_dir / "queries.jsonl").read_text().splitlines())
        if q
    }
    first: dict[str, tuple[str, str]] = {}
    for line in (args.claims_dir / "evidence.jsonl").read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            first.setdefault(str(item["query_id"]), (str(item["doc_id"]), str(item["label"])))
    wanted = {doc for doc, _ in first.values()}
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
    for qid, (doc, label) in first.items():
        title, text = docs[doc]
        began = time.perf_counter()
        # The claim as citeline.eval asks it, then as the answer's judge sees it (the claim itself).
        claim = claim_question(queries[qid]).removeprefix("Is it true that ").removesuffix("?")
        judgement = judge.judge(claim, _passage(doc, title, text), cache)
        times.append(time.perf_counter() - began)
        rows.append({"claim_id": qid, "doc_id": doc, "label": label, "margin": judgement.margin})
    margins = [float(str(r["margin"])) for r in rows]
    contradicts = [r["label"] == "CONTRADICT" for r in rows]

    order = list(range(len(rows)))
    random.Random(0).shuffle(order)
    held_out: list[bool] = [False] * len(rows)
    for fold in range(args.folds):
        test = set(order[fold :: args.folds])
        train = [i for i in order if i not in test]
        threshold = best_threshold([margins[i] for i in train], [contradicts[i] for i in train])
        for i in test:
            held_out[i] = margins[i] >= threshold
    cv_accuracy = sum(p == g for p, g in zip(held_out, contradicts, strict=True)) / len(rows)
    cv_f1 = scores([float(p) for p in held_out], contradicts, 1.0)[1]
    best = best_threshold(margins, contradicts)
    report = {
        "claims": len(rows),
        "contradicted": sum(contradicts),
        "cv_folds": args.folds,
        "cv_accuracy": round(cv_accuracy, 3),
        "cv_macro_f1": round(cv_f1, 3),
        "best_threshold_all": round(best, 3),
        "in_use_threshold": CONTRADICTS_MARGIN,
        "in_use_accuracy_f1": [round(x, 3) for x in scores(margins, contradicts, CONTRADICTS_MARGIN)],
        "judge_ms_p50": round(statistics.median(times) * 1e3, 1),
    }
    if args.margins:
        args.margins.write_text(json.dumps(rows, indent=1))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
