"""The whole-abstract floor of issue 12, paired against citeline (``python -m bench.floor``).

Issue 12 names a plain hybrid as the floor citeline's defaults must beat on SciFact claims nobody
tuned on: BM25 over whole abstracts (bm25s, English stop words, Snowball stemming) and whole-abstract
MiniLM vectors, each min-max normalised, summed with weights. This script builds exactly that, outside
citeline (it is a reference, not a feature), and scores it on the claims we have: SciFact's 300 public
test claims and the 150 claims of ``scifact-claims`` (other claims over the same corpus). It needs no
store; the citeline side comes from ``citeline eval --per-query`` files.

- **Keyword**: ``bm25s`` with its defaults (Lucene BM25, k1 1.5, b 0.75), its English stop words and
  PyStemmer's Snowball English stemmer, over each entry's title and abstract, as citeline ingests it
  (``title``, a blank line, ``text``).
- **Dense**: the int8 all-MiniLM-L6-v2 file citeline embeds with (``onnx:all-MiniLM-L6-v2``: the same
  tokenizer, truncation at the model's 256 tokens, mean pooling, unit length), one vector per whole
  entry; cosine similarity to the query's vector.
- **Hybrid**: each side's best ``--depth`` (100) documents, its scores min-max normalised over that list
  (a document outside a list scores 0 there), then ``w * dense + (1 - w) * keyword``. Each document of
  either list is ranked; ties by document id.

The dense weight ``w``: 0.5 (equal weights) was fixed before any figure was seen and is the floor's
headline; the grid ``WEIGHTS`` is also scored, and 5-fold cross-validation over it (each fold picks
the weight best on the other folds) says what choosing ``w`` on the claims is worth.

Every figure is nDCG@10 with its 95% bootstrap interval, and each comparison a paired difference with
its interval and randomisation p-value (:mod:`citeline.eval.stats`), on each sample and on both
together (same corpus, judgements of the same kind).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import numpy.typing as npt
import Stemmer

from citeline.embed.base import get_embedder
from citeline.eval.beir import BeirData, load_beir
from citeline.eval.metrics import ndcg_at, recall_at
from citeline.eval.stats import bootstrap_ci, cross_validate, paired_comparison

SHARED = Path(__file__).resolve().parents[2] / "shared" / "eval"
MODEL = "onnx:all-MiniLM-L6-v2"
#: Dense weights scored; 0.5 is the floor's headline, fixed in advance.
WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
HEADLINE = 0.5

Vector = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Sample:
    """One set of claims with the per-query scores of every ranking of it."""

    name: str
    data: BeirData
    #: nDCG@10 per query, by ranking name, the queries in ``data.queries`` order.
    ndcg: dict[str, list[float]]
    #: recall@100 per ranking.
    recall: dict[str, float]


def corpus_texts(data: BeirData) -> tuple[list[str], list[str]]:
    """Document ids and texts, each text as citeline ingests the entry: title, blank line, abstract."""
    ids: list[str] = []
    texts: list[str] = []
    with data.corpus_path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                item = json.loads(line)
                title, text = str(item.get("title") or ""), str(item.get("text") or "")
                ids.append(str(item["_id"]))
                texts.append(f"{title}\n\n{text}" if title else text)
    return ids, texts


def embed(texts: Sequence[str], cache: Path | None) -> npt.NDArray[np.float32]:
    """Unit vectors of ``texts``, read from ``cache`` when it holds as many, else computed and saved."""
    if cache is not None and cache.exists():
        vectors = np.load(cache)
        if len(vectors) == len(texts):
            return np.asarray(vectors, dtype=np.float32)
    embedder = get_embedder(MODEL, threads=0)
    vectors = np.asarray(embedder.embed(list(texts)), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    if cache is not None:
        np.save(cache, vectors)
    return vectors


def _top(scores: Vector, depth: int) -> dict[int, float]:
    order = np.lexsort((np.arange(scores.size), -scores))[:depth]
    return {int(i): float(scores[i]) for i in order}


def _minmax(scores: Mapping[int, float]) -> dict[int, float]:
    low, high = min(scores.values()), max(scores.values())
    span = high - low
    return {i: (s - low) / span if span > 0 else 1.0 for i, s in scores.items()}


def hybrid(dense: Vector, keyword: Vector, weight: float, depth: int) -> list[int]:
    """Documents of both top-``depth`` lists by ``weight * dense + (1 - weight) * keyword``, min-max each."""
    d = _minmax(_top(dense, depth))
    k = _minmax(_top(keyword, depth)) if keyword.max() > 0 else {}
    pool = set(d) | set(k)
    fused = {i: weight * d.get(i, 0.0) + (1 - weight) * k.get(i, 0.0) for i in pool}
    return sorted(pool, key=lambda i: (-fused[i], i))


def score_sample(
    name: str,
    data: BeirData,
    ids: list[str],
    retriever: Any,
    stemmer: Any,
    doc_vectors: npt.NDArray[np.float32],
    depth: int,
) -> Sample:
    texts = list(data.queries.values())
    query_vectors = embed(texts, None)
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    ndcg: dict[str, list[float]] = {}
    recall: dict[str, list[float]] = {}

    def add(label: str, qid: str, ranking: Sequence[int]) -> None:
        ranked = [ids[i] for i in ranking]
        ndcg.setdefault(label, []).append(ndcg_at(ranked, data.qrels[qid], 10))
        recall.setdefault(label, []).append(recall_at(ranked, data.qrels[qid], 100))

    for qid, vector, terms in zip(data.queries, query_vectors, tokens, strict=True):
        dense = doc_vectors.astype(np.float64) @ vector.astype(np.float64)
        keyword = np.asarray(retriever.get_scores(terms), dtype=np.float64)
        add("bm25 alone", qid, list(_top(keyword, depth)))
        add("dense alone", qid, list(_top(dense, depth)))
        for weight in WEIGHTS:
            add(f"hybrid w={weight:.1f}", qid, hybrid(dense, keyword, weight, depth))
    return Sample(name, data, ndcg, {k: float(np.mean(v)) for k, v in recall.items()})


def citeline_scores(path: Path, config: str, data: BeirData) -> tuple[list[float], float]:
    """nDCG@10 per query (in ``data.queries`` order) and mean recall@100 of ``config`` in a per-query file."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    mine = {r["query_id"]: r for r in rows if r["config"] == config}
    missing = [q for q in data.queries if q not in mine]
    if missing:
        raise SystemExit(f"{path}: configuration {config!r} lacks {len(missing)} queries, e.g. {missing[:3]}")
    return [float(mine[q]["ndcg@10"]) for q in data.queries], float(
        np.mean([mine[q]["recall@100"] for q in data.queries])
    )


def report(
    name: str, ndcg: Mapping[str, Sequence[float]], recall: Mapping[str, float], reference: str, folds: int
) -> dict[str, Any]:
    """Print and return every ranking's figures on one sample, paired against ``reference``."""
    n = len(ndcg[reference])
    print(f"\n{name}: {n} queries; Δ paired against {reference}")
    print(f"{'ranking':<22} {'nDCG@10':>8} {'95% CI':>15} {'R@100':>7} {'Δ':>8} {'Δ 95% CI':>17} {'p':>7}")
    figures: dict[str, Any] = {}
    for label, scores in ndcg.items():
        low, high = bootstrap_ci(scores)
        row: dict[str, Any] = {
            "ndcg@10": float(np.mean(scores)),
            "ndcg@10_ci": [low, high],
            "recall@100": recall[label],
        }
        line = f"{label:<22} {row['ndcg@10']:>8.4f} {low:>7.3f}-{high:<7.3f} {recall[label]:>7.4f}"
        if label != reference:
            c = paired_comparison(ndcg[reference], scores)
            row |= {"delta": c.delta, "delta_ci": list(c.delta_ci), "p": c.p_value}
            line += f" {c.delta:>+8.4f} {c.delta_ci[0]:>+8.3f}..{c.delta_ci[1]:<+7.3f} {c.p_value:>7.4f}"
        figures[label] = row
        print(line)
    grid = {label: ndcg[label] for label in ndcg if label.startswith("hybrid")}
    cv = cross_validate(grid, folds)
    picks = ", ".join(f"{k} {v}" for k, v in cv.picks.items() if v)
    print(
        f"{folds}-fold CV of the floor's weight: held-out nDCG@10 {cv.held_out_mean:.4f} (picked: {picks}); "
        f"best in sample {cv.best_in_sample} {cv.best_in_sample_mean:.4f}"
    )
    return {
        "queries": n,
        "figures": figures,
        "weight_cv": {"held_out_ndcg@10": cv.held_out_mean, "picks": cv.picks, "folds": folds},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=SHARED / "scifact", help="SciFact in BEIR layout")
    parser.add_argument(
        "--claims", type=Path, default=SHARED / "scifact-claims", help="other claims over the same corpus"
    )
    parser.add_argument(
        "--citeline",
        nargs=2,
        type=Path,
        metavar=("TEST", "CLAIMS"),
        help="citeline eval --per-query files of the test claims and of the other claims",
    )
    parser.add_argument(
        "--configs",
        default="default",
        help="configurations of those files to pair with the floor, comma-separated (first: the reference)",
    )
    parser.add_argument("--depth", type=int, default=100, help="documents in each side's list")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--cache", type=Path, help="an .npy file to keep the whole-abstract vectors in")
    parser.add_argument("--out", type=Path, help="write every figure as JSON here")
    args = parser.parse_args(argv)

    data, claims = load_beir(args.data), load_beir(args.claims)
    ids, texts = corpus_texts(data)
    t0 = time.perf_counter()
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    doc_vectors = embed(texts, args.cache)
    print(f"{len(ids)} abstracts indexed and embedded ({time.perf_counter() - t0:.0f} s)")
    samples = [
        score_sample(name, d, ids, retriever, stemmer, doc_vectors, args.depth)
        for name, d in (("scifact test", data), ("scifact-claims", claims))
    ]
    configs = [c for c in args.configs.split(",") if c] if args.citeline else []
    tables: list[tuple[str, dict[str, list[float]], dict[str, float]]] = []
    for sample, path in zip(samples, args.citeline or [None, None], strict=True):
        ndcg: dict[str, list[float]] = {}
        recall: dict[str, float] = {}
        for config in configs:
            assert path is not None
            ndcg[f"citeline {config}"], recall[f"citeline {config}"] = citeline_scores(
                path, config, sample.data
            )
        ndcg |= sample.ndcg
        recall |= sample.recall
        tables.append((sample.name, ndcg, recall))
    # Both samples together: the same corpus, claims of the same kind, so more power. Query ids differ.
    sizes = [len(s.data.queries) for s in samples]
    both_ndcg = {label: tables[0][1][label] + tables[1][1][label] for label in tables[0][1]}
    both_recall = {
        label: (tables[0][2][label] * sizes[0] + tables[1][2][label] * sizes[1]) / sum(sizes)
        for label in tables[0][2]
    }
    tables.append(("both", both_ndcg, both_recall))
    reference = f"citeline {configs[0]}" if configs else f"hybrid w={HEADLINE:.1f}"
    results = {name: report(name, ndcg, recall, reference, args.folds) for name, ndcg, recall in tables}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
