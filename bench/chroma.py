"""``make bench-chroma``: the Chroma vector backend at 100k chunks, scoped against unscoped.

The corpus is ``bench.run``'s search corpus (SciFact abstracts embedded by the packaged model, copied
with a little noise, 100 chunks a document, one document in ten universal and the others spread over
nine scopes), written once with ``CITELINE_VECTOR_BACKEND=chroma`` (embedded, in the data directory)
and kept in namespace ``bench_chroma_<size>`` for later runs.

For each filter it reports the median of the vector index's own search (the dense stage, the query
embedded beforehand) and of the whole hybrid search. With ``--pgvector`` the same queries also run on
``bench.run``'s pgvector corpus of the same size, in the same run, for a paired comparison. The target
(issue 14): scoped dense search p50 <= 3x unscoped.

``layout`` times the choice behind an unscoped search, on Chroma alone: one query of the model's whole
collection against one query of each scope partition (what an unscoped search cost before the whole
collections), the same hits asked of each, query by query.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import uuid
from typing import Any

import numpy as np
import sqlalchemy as sa

from bench.run import SCIFACT, build_search_corpus, chunk_texts
from citeline.engine import Citeline
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest, read_catalog
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.catalog import ChunkRow, Labels, VersionSpec
from citeline.store.chroma import WHOLE, ChromaIndex, collection_name
from citeline.store.index import VectorQuery

#: Filters measured: none; one scope of nine (its documents and the universal ones, 20% of the corpus);
#: universal documents only (10%).
FILTERS = {
    "unscoped": Filters(),
    "scoped": Filters(scopes=("scope-3",)),
    "universal_only": Filters(scopes=()),
}

#: Documents written per transaction while building (each of 100 chunks).
_BUILD_BATCH = 20


def build_chroma_corpus(cl: Citeline, size: int, scopes: int, base_texts: int) -> None:
    """``bench.run``'s search corpus, with its vectors in Chroma (once per namespace), copied from the
    first ``base_texts`` SciFact abstracts (``bench.run`` uses 2000)."""
    with cl.engine.connect() as conn:
        have = conn.execute(sa.text("SELECT chunk_count FROM corpus_stats")).scalar_one()
    if have >= size:
        return
    print(
        f"building a {size:,}-chunk Chroma corpus (once; namespace {cl.settings.namespace})", file=sys.stderr
    )
    base = chunk_texts(base_texts)
    vectors = cl.embedder.embed(base)
    model, dim = cl.embedder.model_id, cl.embedder.dimension
    rng = np.random.default_rng(7)
    rows_base = [
        ChunkRow(0, t, 1, 0, len(t), None, dict(c), sum(c.values()))
        for t in base
        for c in [cl.analyzer.term_counts(t)]
    ]
    index = cl.vector_index
    with cl.engine.begin() as conn:
        index.prepare(conn, model, dim)
    per_doc = 100
    started = time.perf_counter()
    for first in range(0, size // per_doc, _BUILD_BATCH):
        with cl.engine.begin() as conn:
            groups, activations = [], []
            for d in range(first, min(first + _BUILD_BATCH, size // per_doc)):
                scope = [] if d % (scopes + 1) == 0 else [f"scope-{d % (scopes + 1)}"]
                picks = rng.integers(0, len(base), per_doc)
                vecs = vectors[picks] + rng.normal(0, 0.02, (per_doc, dim)).astype(np.float32)
                vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
                rows = [
                    ChunkRow(i, rows_base[p].text, 1, 0, len(rows_base[p].text), None, rows_base[p].terms,
                             rows_base[p].token_count)
                    for i, p in enumerate(picks)
                ]  # fmt: skip
                doc, _ = catalog.begin_version(
                    conn,
                    source_uri=f"bench://doc/{d}",
                    name=f"doc-{d}",
                    spec=VersionSpec(uuid.uuid4().hex, model, 1000, 150),
                    labels=Labels(scopes=tuple(scope)),
                )
                groups.append(catalog.ChunkGroup(doc, rows, vecs))
                activations.append(catalog.Activation(doc, f"doc {d}", "text/plain", None, 1, 0))
            stored = catalog.insert_chunks(conn, model, groups, inline_vectors=False)
            index.add(conn, model, stored)
            catalog.activate(conn, activations, vector_index=index.name)
    print(f"built in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def measure(cl: Citeline, queries: list[str], vectors: np.ndarray[Any, Any]) -> dict[str, float]:
    """Dense-stage and hybrid-search medians per filter, in milliseconds."""
    out: dict[str, float] = {}
    model = cl.embedder.model_id
    for label, filters in FILTERS.items():
        dense: list[float] = []
        total: list[float] = []
        for warm, (query, vector) in enumerate(zip(queries, vectors, strict=True)):
            with cl.engine.connect() as conn:
                t0 = time.perf_counter()
                scope = read_catalog(conn, model, filters, vector_index=cl.vector_index.name).scope
                cl.vector_index.search(
                    conn, VectorQuery(vector, model, filters, scope, cl.settings.candidates)
                )
                t1 = time.perf_counter()
            cl.search(SearchRequest(query, filters=filters))
            t2 = time.perf_counter()
            if warm >= 5:  # the first queries fill caches and the keyword index
                dense.append((t1 - t0) * 1e3)
                total.append((t2 - t1) * 1e3)
        out[f"{label}_dense_p50_ms"] = round(statistics.median(dense), 2)
        out[f"{label}_search_p50_ms"] = round(statistics.median(total), 2)
    out["scoped_over_unscoped_dense"] = round(out["scoped_dense_p50_ms"] / out["unscoped_dense_p50_ms"], 2)
    out["scoped_over_unscoped_search"] = round(out["scoped_search_p50_ms"] / out["unscoped_search_p50_ms"], 2)
    return out


def layout(cl: Citeline, vectors: np.ndarray[Any, Any]) -> dict[str, float]:
    """Medians of one whole-collection query and of querying every partition, in milliseconds."""
    index = cl.vector_index
    assert isinstance(index, ChromaIndex)
    model = cl.embedder.model_id
    whole = index.client.get_collection(collection_name(cl.settings.namespace, model, WHOLE))
    prefix = collection_name(cl.settings.namespace, model, "")
    parts = [
        index.client.get_collection(c.name)
        for c in index.client.list_collections()
        if c.name.startswith(prefix) and c.name != whole.name
    ]
    n = math.ceil(cl.settings.candidates * 1.5)
    one: list[float] = []
    each: list[float] = []
    for warm, vector in enumerate(vectors):
        t0 = time.perf_counter()
        whole.query(query_embeddings=[vector], n_results=n, include=["distances"])
        t1 = time.perf_counter()
        for part in parts:
            part.query(query_embeddings=[vector], n_results=n, include=["distances"])
        t2 = time.perf_counter()
        if warm >= 5:
            one.append((t1 - t0) * 1e3)
            each.append((t2 - t1) * 1e3)
    return {
        "partitions": len(parts),
        "whole_collection_p50_ms": round(statistics.median(one), 2),
        "every_partition_p50_ms": round(statistics.median(each), 2),
        "every_partition_over_whole": round(statistics.median(each) / statistics.median(one), 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--pgvector", action="store_true", help="also measure bench.run's pgvector corpus")
    parser.add_argument(
        "--base-texts", type=int, default=2000, help="abstracts the chunks are copied from (embedded once)"
    )
    args = parser.parse_args(argv)
    base = Settings()
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as fh:
        queries = [json.loads(line)["text"] for line in fh][: args.queries]
    report: dict[str, Any] = {"size": args.size, "queries": len(queries)}
    runs = [("chroma", f"bench_chroma_{args.size}", "chroma")]
    if args.pgvector:
        runs.append(("pgvector", f"bench_search_{args.size}", "pgvector"))
    for label, namespace, backend in runs:
        settings = base.model_copy(update={"namespace": namespace, "vector_backend": backend})
        with Citeline(settings) as cl:
            if backend == "chroma":
                build_chroma_corpus(cl, args.size, scopes=9, base_texts=args.base_texts)
                # As serving does at start-up: a corpus kept from an older layout is brought up to date.
                repaired = cl.repair_vectors()
                if repaired.restored:
                    print(f"repair filed {repaired.restored:,} vectors anew", file=sys.stderr)
            else:
                build_search_corpus(cl, args.size, scopes=9)
            vectors = cl.embedder.embed(queries)
            report[label] = measure(cl, queries, vectors)
            if backend == "chroma":
                report["chroma_layout"] = layout(cl, vectors)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
