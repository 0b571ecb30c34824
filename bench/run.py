"""``make bench``: embedder and ingest throughput, hybrid search latency at 100k chunks, time to first token,
``citeline serve`` under 50 concurrent clients (bench/api.py).

Figures are medians over repeats, and ratios are measured side by side in one run: these machines are
small (2 cores) and noisy, so absolute numbers move between runs while ratios hold.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import itertools
import json
import random
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from citeline.answer import Complete, Start, Token
from citeline.answer.llm import GenerationOptions, Message
from citeline.answer.prompt import approx_tokens
from citeline.engine import Citeline
from citeline.eval.metrics import percentile
from citeline.ingest import IngestOptions, Source
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import Explain, SearchRequest, Timings
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.catalog import ChunkRow, Labels, VersionSpec
from citeline.store.vectors import ensure_index, index_name
from citeline.types import LoadedSource, Page

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SCIFACT = SHARED / "eval" / "scifact"


def chunk_texts(n: int) -> list[str]:
    """The fixed chunk set: the first ``n`` SciFact abstracts as ``title + blank line + text``."""
    out: list[str] = []
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            item = json.loads(line)
            out.append(f"{item['title']}\n\n{item['text']}")
            if len(out) == n:
                break
    return out


def _loaded(text: str) -> LoadedSource:
    """One page of plain text, as a loader would give it."""
    return LoadedSource("text/plain", "t", iter([Page(1, text)]))


def bench_ingest(settings: Settings, texts: list[str], repeat: int) -> dict[str, float]:
    """End-to-end ingest (split, analyse, embed, COPY, swap) of the texts as one document each.

    Each repeat first times the bare embedder on the same texts, right before the ingest, and the
    ratio is taken per pair: on a shared, noisy machine, runs minutes apart see different loads.
    """
    rates, bare_rates, ratios = [], [], []
    for _ in range(repeat):
        ns = Settings(**{**settings.model_dump(), "namespace": f"bench_ingest_{uuid.uuid4().hex[:8]}"})
        with Citeline(ns) as cl:
            cl.embedder.embed(["warm up"])
            sources = [
                Source(
                    f"t{i}",
                    f"bench://{i}",
                    f"t{i}",
                    hashlib.sha256(t.encode()).hexdigest(),
                    functools.partial(_loaded, t),
                )
                for i, t in enumerate(texts)
            ]
            start = time.perf_counter()
            cl.embedder.embed(texts)
            bare_rates.append(len(texts) / (time.perf_counter() - start))
            # Chunks as large as the texts, so each text is exactly one chunk, as in the bare embedder run.
            start = time.perf_counter()
            results = cl.ingestor().ingest(sources, IngestOptions(chunk_size=20_000, chunk_overlap=0))
            elapsed = time.perf_counter() - start
            chunks = sum(r.chunks for r in results)
            assert chunks == len(texts), f"expected one chunk per text, got {chunks}"
            rates.append(chunks / elapsed)
            ratios.append(rates[-1] / bare_rates[-1])
            with cl.engine.begin() as conn:
                conn.execute(sa.text(f"DROP SCHEMA citeline_{ns.namespace} CASCADE"))
    return {
        "ingest_chunks_per_s": statistics.median(rates),
        "ingest_paired_bare_chunks_per_s": statistics.median(bare_rates),
        "ingest_vs_bare_embedder_paired": statistics.median(ratios),
    }


def bench_memory(settings: Settings) -> dict[str, float]:
    """Peak Python allocations while ingesting PDFs of 3, 15 and 150 pages: flat means bounded by the
    embed batch and the longest page, not by the page count. (Native memory of PDFium and onnxruntime
    is not traced; the loader's RSS per page is measured in bench/pdf_extractors.py.)"""
    import tempfile
    import tracemalloc

    import pypdf

    pdfs = SHARED / "fixtures" / "pdfs"
    fifteen = pdfs / "multicol_federal_register_2020-17221.pdf"
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        long_pdf = Path(tmp) / "federal_register_x10.pdf"
        writer = pypdf.PdfWriter()
        for _ in range(10):
            for page in pypdf.PdfReader(fifteen).pages:
                writer.add_page(page)
        with long_pdf.open("wb") as fh:
            writer.write(fh)
        ns = Settings(**{**settings.model_dump(), "namespace": f"bench_mem_{uuid.uuid4().hex[:8]}"})
        with Citeline(ns) as cl:
            cl.ingest([pdfs / "multicol_latex_pypdf_sample.pdf"])  # warm up model, imports, pools
            for label, path in (
                ("3p", pdfs / "multicol_latex_pypdf_sample.pdf"),
                ("15p", fifteen),
                ("150p", long_pdf),
            ):
                # chunk_size differs from the warm-up so the 3-page file is ingested again, not skipped
                tracemalloc.start()
                [result] = cl.ingest([path], IngestOptions(chunk_size=999))
                out[f"ingest_pdf_{label}_python_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
                out[f"ingest_pdf_{label}_chunks"] = float(result.chunks)
            with cl.engine.begin() as conn:
                conn.execute(sa.text(f"DROP SCHEMA citeline_{ns.namespace} CASCADE"))
    return out


#: Tags that keep a known share of the search corpus, by that share in percent: document ``d`` of
#: 100 chunks carries each tag whose rule it meets, so the filters select exactly these shares.
SELECTIVITY_TAGS = {0.1: ("sel-0.1", "d = 1"), 10.0: ("sel-10", "d % 10 = 1"), 50.0: ("sel-50", "d % 2 = 1")}


def _selectivity_tags(conn: sa.Connection) -> None:
    """Tag the corpus's documents (named ``doc-<d>``) with :data:`SELECTIVITY_TAGS`."""
    conditions = ", ".join(f"CASE WHEN {rule} THEN '{tag}' END" for tag, rule in SELECTIVITY_TAGS.values())
    conn.execute(
        sa.text(
            f"UPDATE documents SET tags = array_remove(ARRAY[{conditions}], NULL) "
            "FROM (SELECT id, CAST(substr(name, 5) AS int) AS d FROM documents) AS n "
            "WHERE n.id = documents.id"
        )
    )


def build_search_corpus(cl: Citeline, size: int, scopes: int) -> None:
    """``size`` chunks from real SciFact texts and vectors, repeated with jittered vectors.

    Documents hold 100 chunks; one in ``scopes + 1`` is universal, the rest spread over ``scopes`` scopes;
    tags (:data:`SELECTIVITY_TAGS`) select 0.1%, 10% and 50% of the chunks, whatever their scopes.
    """
    with cl.engine.begin() as conn:
        have = conn.execute(sa.text("SELECT chunk_count FROM corpus_stats")).scalar_one()
        if have >= size:
            # A corpus built before the selectivity tags existed gets them now.
            if conn.execute(
                sa.text("SELECT NOT EXISTS (SELECT 1 FROM documents WHERE tags <> '{}')")
            ).scalar():
                _selectivity_tags(conn)
            return
    base = chunk_texts(2000)
    print(
        f"building a {size:,}-chunk search corpus (once; kept in namespace {cl.settings.namespace})",
        file=sys.stderr,
    )
    vectors = cl.embedder.embed(base)
    model, dim = cl.embedder.model_id, cl.embedder.dimension
    rng = np.random.default_rng(7)
    rows_base = [
        ChunkRow(0, t, 1, 0, len(t), None, dict(c), sum(c.values()))
        for t in base
        for c in [cl.analyzer.term_counts(t)]
    ]
    with cl.engine.begin() as conn:
        conn.execute(sa.text(f"DROP INDEX IF EXISTS {index_name(model)}"))
    per_doc = 100
    for d in range(size // per_doc):
        scope = [] if d % (scopes + 1) == 0 else [f"scope-{d % (scopes + 1)}"]
        picks = rng.integers(0, len(base), per_doc)
        jitter = rng.normal(0, 0.02, (per_doc, dim)).astype(np.float32)
        vecs = vectors[picks] + jitter
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        rows = [
            ChunkRow(
                i,
                rows_base[p].text,
                1,
                0,
                len(rows_base[p].text),
                None,
                rows_base[p].terms,
                rows_base[p].token_count,
            )
            for i, p in enumerate(picks)
        ]
        with cl.engine.begin() as conn:
            spec = VersionSpec(uuid.uuid4().hex, model, 1000, 150)
            doc, _ = catalog.begin_version(
                conn,
                source_uri=f"bench://doc/{d}",
                name=f"doc-{d}",
                spec=spec,
                labels=Labels(scopes=tuple(scope)),
            )
            catalog.insert_chunks(conn, model, [catalog.ChunkGroup(doc, rows, vecs)])
            catalog.activate(
                conn,
                [
                    catalog.Activation(
                        doc,
                        title=f"doc {d}",
                        content_type="text/plain",
                        file_path=None,
                        page_count=1,
                        duration_ms=0,
                        # The document is its chunks laid end to end.
                        terms=sum((Counter(r.terms) for r in rows), Counter()),
                    )
                ],
            )
    with cl.engine.begin() as conn:
        conn.execute(sa.text("SET maintenance_work_mem = '1GB'"))
        ensure_index(conn, model, dim)
        _selectivity_tags(conn)
        conn.execute(sa.text("ANALYZE"))


#: The searches timed at 100k chunks: no filter, one scope (a tenth of the corpus plus the universal
#: tenth), and filters keeping 0.1%, 10% and 50% of the chunks.
SEARCH_FILTERS = {
    "unfiltered": Filters(),
    "scoped": Filters(scopes=("scope-3",)),
    **{f"sel_{share:g}pct": Filters(tags_any=(tag,)) for share, (tag, _) in SELECTIVITY_TAGS.items()},
}
#: Settings that make the dense search plan as before (the index for any filter over 2,000 chunks,
#: whatever its share of the corpus, and no vectors in the process), timed beside the current plan in the
#: same run.
OLD_PLAN = {"hnsw_tuple_cost": 0.0, "memory_vectors_mb": 0}
SEARCH_STAGES = ("embed", "catalog", "keyword", "dense", "fetch", "fuse")


def bench_search(
    settings: Settings, size: int, queries: int, scopes: int, memory_mb: int = 0
) -> dict[str, float]:
    """Search latency at ``size`` chunks for each of :data:`SEARCH_FILTERS`, with the current dense plan
    and the old one (:data:`OLD_PLAN`) in turn for each query, so both see the same load. ``memory_mb``
    adds a third: every vector compared in the process (store/memory_vectors.py) with that budget, which
    must hold the corpus (at 100k chunks the default budget leaves the search on the index; this shows
    why: docs/performance.md, "Full corpus, session 16"). Its product streams the whole matrix through
    the CPU caches, which slows the search after it, so it is left out by default.

    Query vectors are not cached here (every search embeds its query, as a new question does); one
    figure times a repeated search, whose vector comes from the cache.
    """
    ns = settings.model_copy(update={"namespace": f"bench_search_{size}", "query_cache_size": 0})
    with Citeline(ns) as cl, cl.derive(**OLD_PLAN) as old, contextlib.ExitStack() as more:
        build_search_corpus(cl, size, scopes)
        lines = (SCIFACT / "queries.jsonl").open(encoding="utf-8")
        qs = [json.loads(line)["text"] for line in lines][:queries]
        variants = {"": cl, "old_plan_": old}
        if memory_mb:
            variants["memory_"] = more.enter_context(cl.derive(memory_vectors_mb=memory_mb))
        totals: dict[str, list[float]] = {}
        stages: dict[str, list[float]] = {}
        for q in qs[:10]:
            for instance in variants.values():
                for filters in SEARCH_FILTERS.values():
                    instance.search(SearchRequest(q, filters=filters))  # warm caches
        # The variants' order goes through every permutation, query after query: a search runs slower
        # right after one that streamed the whole in-process matrix through the CPU caches (at 100k
        # chunks, the index's dense stage took 2.9 ms first in a fixed order against 2.1 ms second, same
        # plan), so each variant must follow each other one as often.
        orders = list(itertools.permutations(variants.items()))
        for n, q in enumerate(qs):
            for label, filters in SEARCH_FILTERS.items():
                for prefix, instance in orders[n % len(orders)]:
                    t, plan = Timings(), Explain()
                    start = time.perf_counter()
                    instance.search(SearchRequest(q, filters=filters), timings=t, explain=plan)
                    key = f"search_{prefix}{label}"
                    totals.setdefault(key, []).append((time.perf_counter() - start) * 1e3)
                    for stage in SEARCH_STAGES:
                        stages.setdefault(f"{key}_{stage}", []).append(getattr(t, stage))
                    stages.setdefault(f"{key}_wait", []).append(plan.vector_wait)
                    stages.setdefault(f"{key}_round_trips", []).append(plan.round_trips)
        out: dict[str, float] = {}
        for key, values in totals.items():
            out[f"{key}_p50_ms"] = percentile(values, 50)
            out[f"{key}_p99_ms"] = percentile(values, 99)
        for label in SEARCH_FILTERS:
            for prefix in variants:
                out[f"search_{prefix}{label}_vs_unfiltered"] = (
                    out[f"search_{prefix}{label}_p50_ms"] / out["search_unfiltered_p50_ms"]
                )
        out.update({f"{key}_p50": percentile(values, 50) for key, values in stages.items()})
        with cl.derive(query_cache_size=16) as cached:
            repeated = []
            for q in qs[:50]:
                cached.search(q)
                start = time.perf_counter()
                cached.search(q)
                repeated.append((time.perf_counter() - start) * 1e3)
            out["search_unfiltered_cached_vector_p50_ms"] = percentile(repeated, 50)
    return out


#: Questions the user guide (docs/*.md) answers, asked by :func:`bench_answer`.
ANSWER_QUESTIONS = (
    "How do I keep documents of one care journey apart from another?",
    "What happens when I ingest a file again without changing it?",
    "Which file types can citeline ingest?",
    "How do I use my own PostgreSQL server instead of the embedded one?",
    "What does citeline do when the documents do not answer the question?",
)


def bench_answer(settings: Settings) -> dict[str, Any]:
    """Time from the end of retrieval to the first answer token, with the answering model loaded and warm.

    The user guide (docs/*.md) is ingested into a throwaway namespace and each question of
    ``ANSWER_QUESTIONS`` is asked in a new conversation with the ``llm`` setting's model (by default the
    packaged local one), read to the end. ``answer_ttft`` is the answer's own first-token time (measured
    from the start of the answer stage, right after retrieval); ``answer_ttft_cpu`` is this process's CPU
    time, all threads, from the Start event (sent once the prompt is built) to the first Token: on a
    shared machine it is the steadier figure. ``answer_evidence_tokens`` is the size of the passages
    given (characters / 4), which the first-token time grows with. Medians over the questions.
    """
    ns = Settings(**{**settings.model_dump(), "namespace": f"bench_answer_{uuid.uuid4().hex[:8]}"})
    wall: list[float] = []
    cpu: list[float] = []
    totals: list[float] = []
    evidence: list[int] = []
    fallbacks = 0
    with Citeline(ns) as cl:
        cl.ingest(sorted((REPO / "docs").glob("*.md")))
        cl.search(ANSWER_QUESTIONS[0])  # fills the keyword index
        llm = cl.llm
        if llm is not None:  # load the model and make its first-request allocations
            for _piece in llm.stream([Message("user", "Say yes.")], GenerationOptions(max_tokens=1)):
                break

        async def ask(question: str) -> tuple[Complete, float, int]:
            session = cl.chat()
            cpu_start: float | None = None
            cpu_first: float | None = None
            evidence_tokens = 0
            async for event in session.ask(question):
                if isinstance(event, Start):
                    cpu_start = time.process_time()
                    evidence_tokens = sum(approx_tokens(p.block) for p in event.passages)
                elif isinstance(event, Token) and cpu_first is None:
                    cpu_first = time.process_time()
                elif isinstance(event, Complete):
                    assert cpu_start is not None and cpu_first is not None, "an answer without a token"
                    return event, (cpu_first - cpu_start) * 1e3, evidence_tokens
            raise RuntimeError(f"no answer to {question!r}")

        for question in ANSWER_QUESTIONS:
            complete, cpu_ms, evidence_tokens = asyncio.run(ask(question))
            assert complete.timings.first_token is not None
            wall.append(complete.timings.first_token)
            cpu.append(cpu_ms)
            totals.append(complete.timings.total)
            evidence.append(evidence_tokens)
            fallbacks += complete.fell_back
        with cl.engine.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA citeline_{ns.namespace} CASCADE"))
    return {
        "answer_llm": ns.llm,
        "answer_ttft_p50_ms": statistics.median(wall),
        "answer_ttft_max_ms": max(wall),
        "answer_ttft_cpu_p50_ms": statistics.median(cpu),
        "answer_total_p50_ms": statistics.median(totals),
        "answer_evidence_tokens_p50": statistics.median(evidence),
        "answer_fallbacks": fallbacks,
    }


SECTIONS = ("embed", "ingest", "memory", "search", "answer", "api", "workers")


def run_section(section: str, args: argparse.Namespace) -> dict[str, Any]:
    """One section, measured in this process."""
    settings = Settings()
    texts = chunk_texts(args.chunks)
    if section == "embed":
        from bench.embedder import run as run_embedder

        return run_embedder(SCIFACT / "corpus.jsonl", args.chunks, args.repeat)
    if section == "ingest":
        return bench_ingest(settings, texts, args.repeat)
    if section == "memory":
        return bench_memory(settings)
    if section == "search":
        return bench_search(settings, args.search_size, args.queries, scopes=9, memory_mb=args.memory_mb)
    if section == "api":
        from bench.api import first_token
        from bench.api import run as run_api

        # Both of the API's targets: the overhead under 50 clients, and the first streamed token.
        return {**run_api(settings, queries=args.queries), **first_token(settings)}
    if section == "workers":
        from bench.workers import throughput

        return throughput(settings, count=20)
    return bench_answer(settings)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=1000, help="size of the fixed chunk set")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--search-size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--memory-mb",
        type=int,
        default=0,
        help="search section: also time every vector compared in the process, with this budget in MB",
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=SECTIONS)
    parser.add_argument("--only", choices=SECTIONS, help="run one section in this process")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    if args.only:
        report.update(run_section(args.only, args))
        report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(report))
        return
    # Each section runs in a process of its own: one section's threads, caches and memory must not
    # slow the next (the first-token time measured after the others in one process was 1.8 s
    # against 1.25 to 1.3 s alone).
    for section in (s for s in SECTIONS if s not in args.skip):
        command = [sys.executable, "-m", "bench.run", "--only", section]
        for flag in ("chunks", "repeat", "search_size", "queries", "memory_mb"):
            command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False, cwd=REPO)
        if done.returncode != 0:
            raise SystemExit(f"bench section {section} failed with exit code {done.returncode}")
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        report[f"{section}_peak_rss_mb"] = figures.pop("peak_rss_mb")
        report.update(figures)
    bare = report.get("citeline_chunks_per_s")
    if bare and "ingest_chunks_per_s" in report:
        report["ingest_vs_bare_embedder"] = report["ingest_chunks_per_s"] / bare
    width = max(len(k) for k in report)
    for key, value in report.items():
        print(f"{key:<{width}}  {value:.3f}" if isinstance(value, float) else f"{key:<{width}}  {value}")
    print(json.dumps(report))


if __name__ == "__main__":
    random.seed(0)
    main()
