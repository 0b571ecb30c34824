"""Search latency with the auto-metadata filters (section type, model number) against none, side by side.

A corpus of real SciFact texts and vectors (jittered copies, as ``bench/run.py`` builds), whose chunks
carry a section type (one of the seven, in turn: each type about 1/7 of the chunks) and, one chunk in a
hundred, a model number. Each query runs unfiltered, with a section filter and with a model filter, in
turn, so that load affects all three alike; the figures are medians and the ratios of medians.

    python -m bench.chunk_filters --size 20000 --queries 100
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from bench.run import SCIFACT, chunk_texts
from citeline.annotate import SectionType
from citeline.engine import Citeline
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.catalog import ChunkRow, Labels, VersionSpec
from citeline.store.vectors import ensure_index, index_name

TYPES = [t.value for t in SectionType]
PER_DOC = 100


def build(cl: Citeline, size: int) -> None:
    """``size`` chunks in documents of 100, with section types and model numbers (once per namespace)."""
    with cl.engine.connect() as conn:
        if conn.execute(sa.text("SELECT chunk_count FROM corpus_stats")).scalar_one() >= size:
            return
    print(f"building a {size:,}-chunk corpus in namespace {cl.settings.namespace}", file=sys.stderr)
    base = chunk_texts(2000)
    vectors = cl.embedder.embed(base)
    model, dim = cl.embedder.model_id, cl.embedder.dimension
    terms = [cl.analyzer.term_counts(t) for t in base]
    rng = np.random.default_rng(7)
    with cl.engine.begin() as conn:
        conn.execute(sa.text(f"DROP INDEX IF EXISTS {index_name(model)}"))
    at = 0
    for d in range(size // PER_DOC):
        picks = rng.integers(0, len(base), PER_DOC)
        vecs = vectors[picks] + rng.normal(0, 0.02, (PER_DOC, dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        rows = []
        for i, p in enumerate(picks):
            rows.append(
                ChunkRow(
                    i, base[p], 1, 0, len(base[p]), None, dict(terms[p]), sum(terms[p].values()),
                    model_numbers=(f"XR{(at // 100) % 50:03d}",) if at % 100 == 0 else (),
                    section_type=TYPES[at % len(TYPES)],
                )
            )  # fmt: skip
            at += 1
        with cl.engine.begin() as conn:
            doc, _ = catalog.begin_version(
                conn,
                source_uri=f"bench://doc/{d}",
                name=f"doc-{d}",
                spec=VersionSpec(uuid.uuid4().hex, model, 1000, 150),
                labels=Labels(),
            )
            catalog.insert_chunks(conn, model, [catalog.ChunkGroup(doc, rows, vecs)])
            catalog.activate(conn, [catalog.Activation(doc, f"doc {d}", "text/plain", None, 1, 0)])
    with cl.engine.begin() as conn:
        conn.execute(sa.text("SET maintenance_work_mem = '1GB'"))
        ensure_index(conn, model, dim)
        conn.execute(sa.text("ANALYZE"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    settings = Settings(namespace=f"bench_chunk_filters_{args.size}")
    if args.data_dir is not None:
        settings = settings.model_copy(update={"data_dir": args.data_dir})
    with Citeline(settings) as cl:
        build(cl, args.size)
        with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as fh:
            queries = [json.loads(line)["text"] for line in fh][: args.queries]
        plans = {
            "unfiltered": Filters(),
            "section": Filters(section_types=("troubleshooting",)),
            "model": Filters(model_numbers=("XR-007",)),
        }
        for q in queries[:5]:
            for filters in plans.values():
                cl.search(SearchRequest(q, filters=filters))
        times: dict[str, list[float]] = {name: [] for name in plans}
        counts: dict[str, list[int]] = {name: [] for name in plans}
        for q in queries:
            for name, filters in plans.items():
                start = time.perf_counter()
                hits = cl.search(SearchRequest(q, filters=filters))
                times[name].append((time.perf_counter() - start) * 1e3)
                counts[name].append(len(hits))
        base = statistics.median(times["unfiltered"])
        out = {
            "size": args.size,
            "queries": len(queries),
            **{f"{name}_p50_ms": round(statistics.median(v), 2) for name, v in times.items()},
            **{f"{name}_over_unfiltered": round(statistics.median(v) / base, 2) for name, v in times.items()},
            **{f"{name}_hits_median": statistics.median(c) for name, c in counts.items()},
        }
        print(json.dumps(out))


if __name__ == "__main__":
    main()
