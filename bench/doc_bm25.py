"""Document-level keyword evidence, scored offline on SciFact (``python -m bench.doc_bm25``).

citeline's keyword side is BM25 over 800-character chunks with chunk-level statistics. This script asks
whether BM25 over whole documents, whose score reaches each of their chunks, ranks documents better
when it is fused with the dense side as search fuses it today (``dbsf``, the default weights).

It reuses what ``citeline eval`` stored for SciFact (run that first, in the same ``CITELINE_DATA_DIR``):
the active chunks, their vectors and the HNSW dense candidates of each query, all read through the
store; nothing is ingested or changed. The keyword scores are computed with bm25s over citeline's own
analyzer (Lucene BM25, k1 1.2, b 0.75, scaled by k1 + 1 as citeline scores), and the chunk-level
scores are checked against citeline's keyword index for the first queries, so the ``chunk`` candidate
reproduces the default search; its nDCG@10 is compared with ``--baseline``, a ``citeline eval
--per-query`` file of the default settings, when given.

A candidate is a design of the keyword side at a share of the keyword weight. Each design gives
chunks keyword scores, and its list (as in search, ``candidates`` deep) is fused with the dense list:

- ``chunk``: chunk BM25, the best ``candidates`` chunks (the default today).
- ``doc``: the BM25 of the chunk's whole document, on every chunk of the best ``candidates`` documents.
- ``doc-chunks``: the same scores, but only the best ``candidates`` chunks by them.
- ``max``: the larger of the chunk's and its document's BM25.
- ``blend25`` / ``blend50`` / ``blend75``: ``(1 - a) * chunk + a * doc`` with a = 0.25, 0.5, 0.75.
- ``fuse3``: ``chunk`` and ``doc`` as two lists of their own, each normalised over its own
  candidates, sharing the keyword weight half and half.
- ``docfuse``: documents instead of chunks fused: each document's best chunk cosine (over the dense
  candidates' documents and the keyword list's) with its whole-document BM25 (``candidates``
  documents deep), each normalised over the documents, as a plain whole-document hybrid.

The share is the keyword weight's part of dense plus keyword weight: 0.25 is the default (0.2 against
0.6), and 0.35 and 0.5 give the keyword side more; ``chunk@0.25`` is search as it is.

Judged on SciFact's 300 test claims and, apart, on the 150 claims of ``scifact-claims`` (other
claims over the same corpus, on which nothing was tuned), with :mod:`citeline.eval.stats`: each
candidate's paired difference from ``chunk@0.25`` with its interval and p-value, and 5-fold
cross-validation across the candidates; and on both samples together.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import numpy.typing as npt
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.eval.beir import CHUNK_DEPTH, BeirData, load_beir
from citeline.eval.metrics import ndcg_at, recall_at
from citeline.eval.stats import bootstrap_ci, cross_validate, paired_comparison
from citeline.retrieve.filters import Filters
from citeline.retrieve.fusion import three_sigma
from citeline.settings import Settings
from citeline.store.keyword import K1, B
from citeline.store.vectors import dense_search

SHARED = Path(__file__).resolve().parents[2] / "shared" / "eval"
#: Queries whose chunk BM25 from bm25s is checked against citeline's own keyword index.
PARITY_QUERIES = 30

Vector = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Corpus:
    """The active chunks of the namespace, their documents and both BM25 indexes."""

    chunk_ids: npt.NDArray[np.int64]
    #: Index into ``documents`` of each chunk's document.
    chunk_doc: npt.NDArray[np.int64]
    documents: list[str]
    vectors: npt.NDArray[np.float32]
    chunk_bm25: Any
    doc_bm25: Any


@dataclass(frozen=True)
class Query:
    """One query's inputs to every candidate: its dense list and both keyword scores of every chunk."""

    qid: str
    #: (position in the corpus arrays, cosine distance) of the dense candidates, best first.
    dense: list[tuple[int, float]]
    #: The same for the deep search that ``citeline eval`` scores recall@100 from.
    dense_deep: list[tuple[int, float]]
    #: Cosine similarity of every chunk to the query.
    similarity: Vector
    chunk_score: Vector
    #: Each chunk's document's BM25.
    doc_score: Vector


def load_corpus(cl: Citeline, data: BeirData) -> Corpus:
    """Read the active chunks and vectors, and index chunks and whole documents with bm25s."""
    with cl.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.id, d.name, c.text, c.embedding::real[] FROM chunks c "
                "JOIN documents d ON d.id = c.document_id WHERE d.is_active ORDER BY c.id"
            )
        ).all()
    documents = sorted({row[1] for row in rows})
    position = {name: i for i, name in enumerate(documents)}
    bodies: dict[str, str] = {}
    with data.corpus_path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                item = json.loads(line)
                title, text = str(item.get("title") or ""), str(item.get("text") or "")
                # The text each entry was ingested as (see citeline.eval.beir.corpus_sources).
                bodies[str(item["_id"])] = f"{title}\n\n{text}" if title else text
    missing = [name for name in documents if name not in bodies]
    if missing:
        raise SystemExit(f"{len(missing)} stored documents are not in {data.corpus_path}, e.g. {missing[:3]}")
    chunk_bm25 = bm25s.BM25(k1=K1, b=B, method="lucene")
    chunk_bm25.index([cl.analyzer.terms(row[2]) for row in rows], show_progress=False)
    doc_bm25 = bm25s.BM25(k1=K1, b=B, method="lucene")
    doc_bm25.index([cl.analyzer.terms(bodies[name]) for name in documents], show_progress=False)
    vectors = np.asarray([row[3] for row in rows], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return Corpus(
        np.asarray([row[0] for row in rows], dtype=np.int64),
        np.asarray([position[row[1]] for row in rows], dtype=np.int64),
        documents,
        vectors,
        chunk_bm25,
        doc_bm25,
    )


def prepare(cl: Citeline, corpus: Corpus, data: BeirData, *, check_parity: bool) -> list[Query]:
    """Embed each query, take its dense candidates from the store's index, score every chunk by BM25."""
    settings = cl.settings
    where, params = Filters().sql()
    index = {int(cid): i for i, cid in enumerate(corpus.chunk_ids)}
    queries: list[Query] = []
    with cl.engine.connect() as conn:
        for n, (qid, text) in enumerate(data.queries.items()):
            vector = cl.embedder.embed([text])[0]
            dense, deep = (
                dense_search(
                    conn,
                    vector,
                    model=cl.embedder.model_id,
                    where=where,
                    params=params,
                    limit=limit,
                    ef_search=settings.hnsw_ef_search,
                    exact_below=settings.exact_search_below,
                )
                for limit in (settings.candidates, max(CHUNK_DEPTH, settings.candidates))
            )
            terms = cl.analyzer.terms(text)
            # bm25s leaves out BM25's constant factor k1 + 1, which citeline keeps.
            chunk_score = np.asarray(corpus.chunk_bm25.get_scores(terms), dtype=np.float64) * (K1 + 1)
            doc_score = np.asarray(corpus.doc_bm25.get_scores(terms), dtype=np.float64) * (K1 + 1)
            if check_parity and n < PARITY_QUERIES:
                ours = cl.keyword_index.search(
                    conn,
                    cl.analyzer.term_counts(text),
                    where=where,
                    params=params,
                    document_ids=None,
                    limit=100,
                )
                got = np.asarray([chunk_score[index[cid]] for cid, _ in ours])
                if not np.allclose(got, [score for _, score in ours], rtol=1e-5):
                    raise SystemExit(f"query {qid}: bm25s chunk scores differ from citeline's keyword index")
            query = np.asarray(vector, dtype=np.float64)
            queries.append(
                Query(
                    qid,
                    [(index[cid], distance) for cid, distance in dense if cid in index],
                    [(index[cid], distance) for cid, distance in deep if cid in index],
                    corpus.vectors.astype(np.float64) @ (query / np.linalg.norm(query)),
                    chunk_score,
                    doc_score[corpus.chunk_doc],
                )
            )
    return queries


def _top(scores: Vector, chunk_ids: npt.NDArray[np.int64], depth: int) -> dict[int, float]:
    """The ``depth`` best chunks with a positive score, ties by chunk id, as search's keyword list."""
    matching = np.flatnonzero(scores > 0)
    order = np.lexsort((chunk_ids[matching], -scores[matching]))[:depth]
    return {int(i): float(scores[i]) for i in matching[order]}


def _top_documents(query: Query, corpus: Corpus, depth: int) -> dict[int, float]:
    """Every chunk of the ``depth`` best documents by whole-document BM25, each with its document's score:
    a keyword list ``depth`` documents deep rather than ``depth`` chunks."""
    by_document = np.zeros(len(corpus.documents))
    by_document[corpus.chunk_doc] = query.doc_score
    matching = np.flatnonzero(by_document > 0)
    best = matching[np.argsort(-by_document[matching], kind="stable")[:depth]]
    keep = np.isin(corpus.chunk_doc, best)
    return {int(i): float(query.doc_score[i]) for i in np.flatnonzero(keep)}


#: A design's keyword lists for one query: (chunk position -> score, share of the keyword weight).
KeywordLists = Callable[[Query, Corpus, int], list[tuple[dict[int, float], float]]]


def _chunks(signal: Callable[[Query], Vector]) -> KeywordLists:
    return lambda q, corpus, depth: [(_top(signal(q), corpus.chunk_ids, depth), 1.0)]


#: How each design builds the keyword side. ``chunk`` is citeline's search today.
DESIGNS: dict[str, KeywordLists] = {
    "chunk": _chunks(lambda q: q.chunk_score),
    # Whole-document BM25, its list the chunks of the best ``candidates`` documents.
    "doc": lambda q, corpus, depth: [(_top_documents(q, corpus, depth), 1.0)],
    # Whole-document BM25 on every chunk, its list the best ``candidates`` chunks (fewer documents).
    "doc-chunks": _chunks(lambda q: q.doc_score),
    "max": _chunks(lambda q: np.maximum(q.chunk_score, q.doc_score)),
    "blend25": _chunks(lambda q: 0.75 * q.chunk_score + 0.25 * q.doc_score),
    "blend50": _chunks(lambda q: 0.5 * q.chunk_score + 0.5 * q.doc_score),
    "blend75": _chunks(lambda q: 0.25 * q.chunk_score + 0.75 * q.doc_score),
    # Chunk BM25 and document BM25 as two lists, each normalised over its own candidates.
    "fuse3": lambda q, corpus, depth: [
        (_top(q.chunk_score, corpus.chunk_ids, depth), 0.5),
        (_top_documents(q, corpus, depth), 0.5),
    ],
}
#: Shares of the keyword side in dense + keyword weight: the default's 0.2 / (0.6 + 0.2), and more.
SHARES = (0.25, 0.35, 0.5)


@dataclass(frozen=True)
class Candidate:
    """One design at one keyword share."""

    design: str
    share: float

    @property
    def name(self) -> str:
        return f"{self.design}@{self.share:.2f}"


#: Fusion of documents rather than chunks: each document's dense score is its best chunk's cosine, its
#: keyword score its whole-document BM25; the two are fused over documents, as a plain whole-document
#: hybrid does. Not a keyword list for chunk fusion, so it is not among ``DESIGNS``.
DOCUMENT_FUSION = "docfuse"
CANDIDATES = [Candidate(design, share) for share in SHARES for design in [*DESIGNS, DOCUMENT_FUSION]]
#: The keyword rankings alone, for orientation; not among the candidates.
KEYWORD_ALONE: dict[str, Callable[[Query], Vector]] = {
    "chunk BM25 alone": lambda q: q.chunk_score,
    "doc BM25 alone": lambda q: q.doc_score,
}


def rank_documents(
    query: Query, candidate: Candidate, corpus: Corpus, settings: Settings, *, deep: bool = False
) -> list[str]:
    """Documents in the order the fused chunk ranking first reaches them, as ``citeline eval`` folds:
    from the search users get, or with ``deep`` from the 300-chunk search recall@100 is scored on."""
    depth = max(CHUNK_DEPTH, settings.candidates) if deep else settings.candidates
    if candidate.design == DOCUMENT_FUSION:
        return _fuse_documents(query, candidate, corpus, settings, depth, deep=deep)
    lists = DESIGNS[candidate.design](query, corpus, depth)
    # The dense and keyword weights keep their sum; the source weight (equal for every SciFact entry,
    # all text/plain) is left as it is.
    both = settings.weight_semantic + settings.weight_keyword
    w_semantic, w_keyword = both * (1 - candidate.share), both * candidate.share
    dense = {i: 1.0 - distance for i, distance in (query.dense_deep if deep else query.dense)}
    pool = set(dense).union(*(scores for scores, _ in lists))
    # As hybrid_search: keyword-only candidates get their cosine similarity, the dense list's keep theirs.
    semantic = three_sigma({i: dense.get(i, float(query.similarity[i])) for i in pool})
    fused = dict.fromkeys(pool, settings.weight_source * 0.5)
    for i in pool:
        fused[i] += w_semantic * semantic[i]
    for scores, share in lists:
        normalised = three_sigma(scores)
        for i, value in normalised.items():
            fused[i] += w_keyword * share * value
    ranked = sorted(pool, key=lambda i: (-fused[i], int(corpus.chunk_ids[i])))[: max(depth, 10)]
    return list(dict.fromkeys(corpus.documents[corpus.chunk_doc[i]] for i in ranked))


def _fuse_documents(
    query: Query, candidate: Candidate, corpus: Corpus, settings: Settings, depth: int, *, deep: bool
) -> list[str]:
    """Documents ranked by dense and whole-document BM25 fused over documents (``docfuse``)."""
    best_similarity = np.full(len(corpus.documents), -np.inf)
    np.maximum.at(best_similarity, corpus.chunk_doc, query.similarity)
    by_document = np.zeros(len(corpus.documents))
    by_document[corpus.chunk_doc] = query.doc_score
    matching = np.flatnonzero(by_document > 0)
    keyword = {
        int(d): float(by_document[d]) for d in matching[np.argsort(-by_document[matching], kind="stable")]
    }
    keyword = dict(list(keyword.items())[:depth])
    dense_docs = {int(corpus.chunk_doc[i]) for i, _ in (query.dense_deep if deep else query.dense)}
    pool = dense_docs | set(keyword)
    both = settings.weight_semantic + settings.weight_keyword
    semantic = three_sigma({d: float(best_similarity[d]) for d in pool})
    normalised = three_sigma(keyword)
    fused = {
        d: both * (1 - candidate.share) * semantic[d] + both * candidate.share * normalised.get(d, 0.0)
        for d in pool
    }
    return [corpus.documents[d] for d in sorted(pool, key=lambda d: (-fused[d], corpus.documents[d]))]


def keyword_alone(query: Query, signal: Callable[[Query], Vector], corpus: Corpus) -> list[str]:
    top = _top(signal(query), corpus.chunk_ids, 300)
    return list(dict.fromkeys(corpus.documents[corpus.chunk_doc[i]] for i in top))


def score_sample(
    name: str, data: BeirData, queries: Sequence[Query], corpus: Corpus, settings: Settings, folds: int
) -> dict[str, Any]:
    """Every candidate's per-query nDCG@10 on one sample, with its statistics against ``chunk``."""
    ndcg: dict[str, list[float]] = {}
    recall: dict[str, float] = {}
    for candidate in CANDIDATES:
        label = candidate.name
        rankings = [rank_documents(q, candidate, corpus, settings) for q in queries]
        ndcg[label] = [ndcg_at(r, data.qrels[q.qid], 10) for q, r in zip(queries, rankings, strict=True)]
        recall[label] = float(
            np.mean(
                [
                    recall_at(
                        rank_documents(q, candidate, corpus, settings, deep=True), data.qrels[q.qid], 100
                    )
                    for q in queries
                ]
            )
        )
    alone_scores = {
        label: [ndcg_at(keyword_alone(q, signal, corpus), data.qrels[q.qid], 10) for q in queries]
        for label, signal in KEYWORD_ALONE.items()
    }
    chunk_alone, doc_alone = alone_scores.values()
    doc_vs_chunk = paired_comparison(chunk_alone, doc_alone)
    alone = {
        **{label: float(np.mean(scores)) for label, scores in alone_scores.items()},
        "delta": doc_vs_chunk.delta,
        "delta_ci": list(doc_vs_chunk.delta_ci),
        "p": doc_vs_chunk.p_value,
    }
    figures: dict[str, Any] = {}
    default = CANDIDATES[0].name
    for label, scores in ndcg.items():
        comparison = paired_comparison(ndcg[default], scores)
        figures[label] = {
            "ndcg@10": float(np.mean(scores)),
            "ndcg@10_ci": list(bootstrap_ci(scores)),
            "recall@100": recall[label],
            "delta_vs_chunk": comparison.delta,
            "delta_vs_chunk_ci": list(comparison.delta_ci),
            "p_vs_chunk": comparison.p_value,
        }
    # Two sets, both fixed before any figure was seen: every candidate, and the designs alone at the
    # default share (the keyword weight as it is).
    sets = {
        "all candidates": list(ndcg),
        "designs at the default share": [c.name for c in CANDIDATES if c.share == SHARES[0]],
    }
    cross_validation = {}
    for label, names in sets.items():
        cv = cross_validate({n: ndcg[n] for n in names}, folds)
        cross_validation[label] = {
            "folds": folds,
            "held_out_ndcg@10": cv.held_out_mean,
            "picks": {n: k for n, k in cv.picks.items() if k},
            "best_in_sample": cv.best_in_sample,
        }
    return {
        "sample": name,
        "queries": len(queries),
        "candidates": figures,
        "keyword_alone_ndcg@10": alone,
        "cross_validation": cross_validation,
        "per_query": ndcg,
    }


def print_sample(result: Mapping[str, Any]) -> None:
    print(f"\n{result['sample']}: {result['queries']} queries")
    print(
        f"{'candidate':<16} {'nDCG@10':>8} {'95% CI':>15} {'R@100':>7} {'Δ vs chunk':>11} "
        f"{'Δ 95% CI':>17} {'p':>7}"
    )
    for label, f in result["candidates"].items():
        low, high = f["ndcg@10_ci"]
        d_low, d_high = f["delta_vs_chunk_ci"]
        print(
            f"{label:<16} {f['ndcg@10']:>8.4f} {low:>7.3f}-{high:<7.3f} {f['recall@100']:>7.4f} "
            f"{f['delta_vs_chunk']:>+11.4f} {d_low:>+8.3f}..{d_high:<+7.3f} {f['p_vs_chunk']:>7.4f}"
        )
    alone = result["keyword_alone_ndcg@10"]
    print(
        ", ".join(f"{label}: nDCG@10 {alone[label]:.4f}" for label in KEYWORD_ALONE)
        + f"; doc minus chunk {alone['delta']:+.4f} "
        f"({alone['delta_ci'][0]:+.3f}..{alone['delta_ci'][1]:+.3f}), p {alone['p']:.4f}"
    )
    for label, cv in result["cross_validation"].items():
        picks = ", ".join(f"{k} {v}" for k, v in cv["picks"].items())
        print(
            f"{cv['folds']}-fold CV over {label}: held-out nDCG@10 {cv['held_out_ndcg@10']:.4f} "
            f"(picked: {picks}); default {result['candidates'][CANDIDATES[0].name]['ndcg@10']:.4f}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, default=SHARED / "scifact", help="the BEIR folder citeline eval stored"
    )
    parser.add_argument(
        "--claims", type=Path, default=SHARED / "scifact-claims", help="other claims over the same corpus"
    )
    parser.add_argument(
        "--baseline", type=Path, help="citeline eval --per-query file of the default settings"
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write every figure and per-query score as JSON here")
    args = parser.parse_args(argv)

    data = load_beir(args.data)
    claims = load_beir(args.claims)
    # The claims folder names the same corpus; its queries are searched in the SciFact namespace.
    with Citeline(Settings(namespace=data.namespace)) as cl:
        t0 = time.perf_counter()
        corpus = load_corpus(cl, data)
        print(
            f"{len(corpus.chunk_ids)} chunks of {len(corpus.documents)} documents "
            f"({time.perf_counter() - t0:.0f} s)"
        )
        samples = [
            ("scifact test", data, prepare(cl, corpus, data, check_parity=True)),
            ("scifact-claims", claims, prepare(cl, corpus, claims, check_parity=False)),
        ]
        settings = cl.settings
    # Both samples together: the same corpus and judgements of the same kind, so more power.
    both = BeirData(
        data.folder,
        data.namespace,
        data.corpus_path,
        {**data.queries, **claims.queries},
        {**data.qrels, **claims.qrels},
    )
    samples.append(("both", both, [q for _, _, qs in samples for q in qs]))
    results = [score_sample(name, d, qs, corpus, settings, args.folds) for name, d, qs in samples]
    if args.baseline:
        rows = [json.loads(line) for line in args.baseline.read_text(encoding="utf-8").splitlines()]
        theirs = {r["query_id"]: r["ndcg@10"] for r in rows}
        ours = dict(zip(data.queries, results[0]["per_query"][CANDIDATES[0].name], strict=True))
        same = sum(abs(ours[q] - theirs[q]) < 1e-9 for q in ours)
        print(
            f"chunk reproduces citeline eval on {same} of {len(ours)} queries "
            f"(nDCG@10 {np.mean(list(ours.values())):.4f} against {np.mean(list(theirs.values())):.4f})"
        )
    for result in results:
        print_sample(result)
    if args.out:
        args.out.write_text(json.dumps(results), encoding="utf-8")


if __name__ == "__main__":
    main()
