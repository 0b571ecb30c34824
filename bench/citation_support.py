"""Choose the citation support score's weight and threshold on SciFact (``python -m bench.citation_support``).

Each of the 300 test claims is scored (see ``citeline.answer.support``) against
- its gold abstract (should count as supported),
- the best BM25 match among the other abstracts: a wrong citation as it happens in practice, where the
  model cites another retrieved passage on the same subject (should not),
- a random abstract (should not, by far).
An abstract is cut into 1000/150 chunks as ingest cuts it, and the claim is scored against its best
chunk, since a citation points at one chunk. For each semantic weight the threshold that best separates
gold from same-subject passages (balanced accuracy) is printed, with how each kind of pair fares.
SciFact claims are terse restatements; answer sentences paraphrase their passage more closely, so a
threshold chosen here errs towards flagging.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections import defaultdict
from pathlib import Path

import bm25s
import numpy as np

from citeline.answer.support import (
    SEMANTIC_WEIGHT,
    SUPPORT_THRESHOLD,
    PassageSentences,
    VectorCache,
    support,
)
from citeline.embed import get_embedder
from citeline.settings import Settings
from citeline.split import split
from citeline.store.analyzer import Analyzer
from citeline.types import Page

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "eval" / "scifact"
WEIGHTS = (0.4, 0.5, 0.6, 0.7, 0.8, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--claims", type=int, default=300, help="test claims to use (all 300 by default)")
    parser.add_argument("--parts", type=Path, help="JSON file keeping the scored pairs, to re-read instead")
    args = parser.parse_args()
    if args.parts and args.parts.exists():
        parts = {k: [tuple(v) for v in vs] for k, vs in json.loads(args.parts.read_text()).items()}
    else:
        parts = score_pairs(args.claims)
        if args.parts:
            args.parts.write_text(json.dumps(parts))
    report(parts)


def score_pairs(n_claims: int) -> dict[str, list[tuple[float, float]]]:
    """(semantic, lexical) of each claim against its gold, same-subject and random abstract."""

    corpus = {}
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            item = json.loads(line)
            corpus[item["_id"]] = f"{item['title']}\n\n{item['text']}"
    claims = {}
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            item = json.loads(line)
            claims[item["_id"]] = item["text"]
    gold: dict[str, set[str]] = defaultdict(set)
    for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query, doc, _ = line.split("\t")
        gold[query].add(doc)

    analyzer = Analyzer()
    ids = list(corpus)
    bm25 = bm25s.BM25(method="lucene")
    bm25.index([analyzer.terms(corpus[i]) for i in ids], show_progress=False)
    rng = random.Random(4)
    pairs: list[tuple[str, str, str]] = []  # kind, claim, document id
    for query in sorted(gold, key=int)[:n_claims]:
        claim = claims[query]
        pairs.append(("gold", claim, sorted(gold[query])[0]))
        scores = bm25.get_scores(analyzer.terms(claim))
        ranked = (ids[i] for i in np.argsort(-scores))
        pairs.append(("same subject", claim, next(d for d in ranked if d not in gold[query])))
        pairs.append(("random", claim, rng.choice([d for d in ids if d not in gold[query]])))

    cache = VectorCache(get_embedder(Settings().embedding_model))
    parts: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for kind, claim, doc in pairs:
        chunks = [c.text for c in split([Page(1, corpus[doc])], chunk_size=1000, chunk_overlap=150)]
        results = [support(claim, PassageSentences.of(chunk), cache) for chunk in chunks]
        best = max(results, key=lambda r: r.score)
        parts[kind].append((best.semantic, best.lexical))
    return parts


def report(parts: dict[str, list[tuple[float, float]]]) -> None:

    for kind, values in parts.items():
        sem = statistics.median(v[0] for v in values)
        lex = statistics.median(v[1] for v in values)
        print(f"{kind:>13}: n={len(values)} median semantic {sem:.3f}, median lexical {lex:.3f}")
    print()
    print("Per weight: the threshold with the best balanced accuracy (gold vs same subject), then the one")
    print("that keeps 90% of gold pairs supported; the share of each kind of pair on its right side.")
    print("weight  threshold  balanced-acc  gold-ok  same-subject-flagged  random-flagged")
    for weight in sorted({*WEIGHTS, SEMANTIC_WEIGHT}):
        score = {
            kind: np.array([weight * max(s, 0.0) + (1 - weight) * lex for s, lex in values])
            for kind, values in parts.items()
        }
        best_t, best_acc = 0.0, 0.0
        for t in np.arange(0.20, 0.80, 0.01):
            acc = ((score["gold"] >= t).mean() + (score["same subject"] < t).mean()) / 2
            if acc > best_acc:
                best_t, best_acc = float(t), float(acc)
        keep90 = float(np.percentile(score["gold"], 10))
        for t, acc in ((best_t, best_acc), (keep90, None)):
            print(
                f"{weight:>6.1f}  {t:>9.2f}  {'' if acc is None else f'{acc:.3f}':>12}  "
                f"{(score['gold'] >= t).mean():>7.3f}  {(score['same subject'] < t).mean():>20.3f}  "
                f"{(score['random'] < t).mean():>14.3f}"
            )

    score = {
        kind: np.array([SEMANTIC_WEIGHT * max(s, 0.0) + (1 - SEMANTIC_WEIGHT) * lex for s, lex in values])
        for kind, values in parts.items()
    }
    print(
        f"\nchosen: weight {SEMANTIC_WEIGHT}, threshold {SUPPORT_THRESHOLD}: gold supported "
        f"{(score['gold'] >= SUPPORT_THRESHOLD).mean():.3f}, same subject flagged "
        f"{(score['same subject'] < SUPPORT_THRESHOLD).mean():.3f}, random flagged "
        f"{(score['random'] < SUPPORT_THRESHOLD).mean():.3f}"
    )


if __name__ == "__main__":
    main()
