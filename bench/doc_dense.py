"""A whole-document dense signal beside citeline's chunk lists, offline (``python -m bench.doc_dense``).

``bench.floor`` finds that a plain hybrid of whole-abstract BM25 and whole-abstract vectors ranks SciFact
claims about as well as citeline's chunk-level search. Before storing a vector per document version,
this script asks whether such a vector, fused as a third list the way whole-document BM25 is, would
lift citeline's ranking. It reuses what :mod:`bench.doc_bm25` reads from a stored ``citeline eval`` of
SciFact (chunks, vectors, each query's dense candidates, chunk and whole-document BM25 as citeline's
keyword index scores them) and the whole-abstract vectors ``bench.floor --cache`` wrote (the same int8
MiniLM file, each entry's title and abstract truncated at 256 tokens).

The document-vector list: the ``candidates`` documents most similar to the query by their whole-document
vector, every chunk of theirs scored with that similarity, scaled over the list as ``dbsf`` scales
every list (mean plus and minus three deviations). A set of weightings was declared before any figure
was seen (:data:`WEIGHTINGS`); each is paired against the default, and 5-fold cross-validation over the
set says what choosing among them is worth, on each sample and on both together.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.doc_bm25 import SHARED, Corpus, Query, _top, _top_documents, load_corpus, prepare
from bench.floor import corpus_texts, embed
from citeline.engine import Citeline
from citeline.eval.beir import CHUNK_DEPTH, BeirData, load_beir
from citeline.eval.metrics import ndcg_at, recall_at
from citeline.eval.stats import bootstrap_ci, cross_validate, paired_comparison
from citeline.retrieve.fusion import three_sigma
from citeline.settings import Settings

#: (semantic, chunk BM25, whole-document BM25, whole-document vector) weights; the source weight stays
#: 0.2. The first is citeline's default; the others move 0.2 or 0.3 of the weight to the document level.
WEIGHTINGS: dict[str, tuple[float, float, float, float]] = {
    "default": (0.6, 0.2, 0.0, 0.0),
    "vec.2": (0.4, 0.2, 0.0, 0.2),
    "vec.3": (0.3, 0.2, 0.0, 0.3),
    "vec.2+doc.1": (0.4, 0.1, 0.1, 0.2),
    "vec.2+doc.2": (0.4, 0.0, 0.2, 0.2),
    "vec.3+doc.2": (0.3, 0.0, 0.2, 0.3),
    "doc.2": (0.6, 0.0, 0.2, 0.0),
}
W_SOURCE = 0.2


def _top_by_vector(similarity: npt.NDArray[np.float64], corpus: Corpus, depth: int) -> dict[int, float]:
    """Every chunk of the ``depth`` documents most similar by whole-document vector, with that similarity."""
    best = np.argsort(-similarity, kind="stable")[:depth]
    keep = np.flatnonzero(np.isin(corpus.chunk_doc, best))
    return {int(i): float(similarity[corpus.chunk_doc[i]]) for i in keep}


def rank(
    query: Query,
    weights: tuple[float, float, float, float],
    doc_similarity: npt.NDArray[np.float64],
    corpus: Corpus,
    depth: int,
    *,
    deep: bool,
) -> list[str]:
    """Documents in the order the fused chunk ranking first reaches them, as ``citeline eval`` folds."""
    w_sem, w_kw, w_doc, w_vec = weights
    dense = {i: 1.0 - distance for i, distance in (query.dense_deep if deep else query.dense)}
    lists: list[tuple[dict[int, float], float]] = []
    if w_kw:
        lists.append((_top(query.chunk_score, corpus.chunk_ids, depth), w_kw))
    if w_doc:
        lists.append((_top_documents(query, corpus, depth), w_doc))
    if w_vec:
        lists.append((_top_by_vector(doc_similarity, corpus, depth), w_vec))
    pool = set(dense).union(*(scores for scores, _ in lists))
    semantic = three_sigma({i: dense.get(i, float(query.similarity[i])) for i in pool})
    fused = {i: W_SOURCE * 0.5 + w_sem * semantic[i] for i in pool}
    for scores, weight in lists:
        for i, value in three_sigma(scores).items():
            fused[i] += weight * value
    ranked = sorted(pool, key=lambda i: (-fused[i], int(corpus.chunk_ids[i])))[: max(depth, 10)]
    return list(dict.fromkeys(corpus.documents[corpus.chunk_doc[i]] for i in ranked))


def score(
    data: BeirData,
    queries: Sequence[Query],
    vectors: dict[str, npt.NDArray[np.float64]],
    corpus: Corpus,
    doc_vectors: npt.NDArray[np.float64],
    settings: Settings,
) -> tuple[dict[str, list[float]], dict[str, float]]:
    ndcg: dict[str, list[float]] = {name: [] for name in WEIGHTINGS}
    recall: dict[str, list[float]] = {name: [] for name in WEIGHTINGS}
    for q in queries:
        similarity = doc_vectors @ vectors[q.qid]
        for name, weights in WEIGHTINGS.items():
            top = rank(q, weights, similarity, corpus, settings.candidates, deep=False)
            ndcg[name].append(ndcg_at(top, data.qrels[q.qid], 10))
            deep = rank(q, weights, similarity, corpus, max(CHUNK_DEPTH, settings.candidates), deep=True)
            recall[name].append(recall_at(deep, data.qrels[q.qid], 100))
    return ndcg, {name: float(np.mean(v)) for name, v in recall.items()}


def report(name: str, ndcg: dict[str, list[float]], recall: dict[str, float], folds: int) -> dict[str, Any]:
    first = next(iter(ndcg))
    print(f"\n{name}: {len(ndcg[first])} queries; Δ paired against {first}")
    print(f"{'weighting':<14} {'nDCG@10':>8} {'95% CI':>15} {'R@100':>7} {'Δ':>8} {'Δ 95% CI':>17} {'p':>7}")
    figures: dict[str, Any] = {}
    for label, scores in ndcg.items():
        low, high = bootstrap_ci(scores)
        c = paired_comparison(ndcg[first], scores)
        figures[label] = {
            "ndcg@10": float(np.mean(scores)),
            "ndcg@10_ci": [low, high],
            "recall@100": recall[label],
            "delta": c.delta,
            "delta_ci": list(c.delta_ci),
            "p": c.p_value,
        }
        print(
            f"{label:<14} {np.mean(scores):>8.4f} {low:>7.3f}-{high:<7.3f} {recall[label]:>7.4f} "
            f"{c.delta:>+8.4f} {c.delta_ci[0]:>+8.3f}..{c.delta_ci[1]:<+7.3f} {c.p_value:>7.4f}"
        )
    cv = cross_validate(ndcg, folds)
    picks = ", ".join(f"{k} {v}" for k, v in cv.picks.items() if v)
    print(
        f"{folds}-fold CV: held-out nDCG@10 {cv.held_out_mean:.4f} (picked: {picks}); "
        f"{first} {np.mean(ndcg[first]):.4f}"
    )
    return {"figures": figures, "cv": {"held_out_ndcg@10": cv.held_out_mean, "picks": cv.picks}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=SHARED / "scifact")
    parser.add_argument("--claims", type=Path, default=SHARED / "scifact-claims")
    parser.add_argument("--cache", type=Path, required=True, help="the .npy file bench.floor --cache wrote")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    data, claims = load_beir(args.data), load_beir(args.claims)
    ids, texts = corpus_texts(data)
    by_id = dict(zip(ids, embed(texts, args.cache).astype(np.float64), strict=True))
    with Citeline(Settings(namespace=data.namespace)) as cl:
        corpus = load_corpus(cl, data)
        doc_vectors = np.stack([by_id[name] for name in corpus.documents])
        samples = [
            (n, d, prepare(cl, corpus, d, check_parity=False))
            for n, d in (("scifact test", data), ("scifact-claims", claims))
        ]
        settings = cl.settings
        query_vectors: dict[str, npt.NDArray[np.float64]] = {}
        for _, d, _ in samples:
            vs = cl.embedder.embed(list(d.queries.values()))
            for qid, v in zip(d.queries, vs, strict=True):
                arr = np.asarray(v, dtype=np.float64)
                query_vectors[qid] = arr / np.linalg.norm(arr)
    tables = []
    for name, d, qs in samples:
        ndcg, recall = score(d, qs, query_vectors, corpus, doc_vectors, settings)
        tables.append((name, ndcg, recall, len(qs)))
    (_, n1, r1, s1), (_, n2, r2, s2) = tables
    both = (
        "both",
        {k: n1[k] + n2[k] for k in n1},
        {k: (r1[k] * s1 + r2[k] * s2) / (s1 + s2) for k in r1},
        s1 + s2,
    )
    results = {name: report(name, ndcg, recall, args.folds) for name, ndcg, recall, _ in [*tables, both]}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
