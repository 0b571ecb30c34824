"""``make bench-scale``: citeline at 2M chunks: build time, disk, hybrid search p50/p99 unscoped and at three
scope selectivities, keyword-index memory per process, and several serving processes at once.

**Vectors.** Embedding 2M chunks here would take hours, so the corpus is made from real material and
loaded through the library's own bulk path (:meth:`Citeline.load_prepared`: the catalog's version rows,
chunk COPY, postings and swap-in, as ingest writes them). Every SciFact abstract is embedded once by
the packaged model; each synthetic document takes one of them as its topic, and its chunks' vectors
are that abstract's vector plus Gaussian noise of a spread drawn per topic (so clusters are tight or
loose, about 5,000 of them), normalised. Queries are real SciFact claims embedded by the same model,
so they land among the clusters as real queries land among real chunks, and the HNSW graph is walked
as it would be for them.

**Text.** Each chunk's text is real sentences: mostly from its topic's abstract, the rest drawn from
other abstracts, about 800 characters, so the keyword postings have SciFact's term distribution (the
same Zipf tail, document frequencies that grow with the corpus) and no two chunks are copies.

**Scopes.** 20 chunks a document. A document is in scope ``p50`` with probability 0.5, ``p10`` 0.1 and
``p0.1`` 0.001 (independently; one in ``other`` if in none); 0.1% of documents are universal (no
scope), which every scoped search also sees.

The store is kept in ``--data`` (namespace ``scale_<chunks>``) for later runs (``--reuse``); delete the
folder when done. Figures go to stdout as JSON, with the load average before and after each phase.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from bench.peers_common import parent_pids, postmaster_pid, pss_kib, with_descendants
from bench.run import SCIFACT
from citeline.engine import Citeline
from citeline.eval.metrics import percentile
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings
from citeline.store.bulk import PreparedChunk, PreparedDocument
from citeline.store.catalog import Labels
from citeline.store.keyword import MemoryKeywordIndex

CHUNKS_PER_DOCUMENT = 20
CHUNK_CHARS = 800
#: Scope -> probability that a document is in it; universal documents are in none.
SCOPES = {"p50": 0.5, "p10": 0.1, "p0.1": 0.001}
UNIVERSAL = 0.001
FILTERS = {"unscoped": Filters(), **{f"scope {s}": Filters(scopes=(s,)) for s in SCOPES}}
#: Documents per load_prepared call (one set of transactions).
LOAD_BATCH = 100

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def read_abstracts() -> list[str]:
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as fh:
        return [f"{item['title']}. {item['text']}" for item in map(json.loads, fh) if item["text"].strip()]


def base_vectors(cl: Citeline, abstracts: list[str], cache: Path) -> NDArray[np.float32]:
    """Every abstract embedded once by the served model (kept in ``cache``)."""
    if cache.exists():
        vectors: NDArray[np.float32] = np.load(cache)
        return vectors
    started = time.perf_counter()
    vectors = np.asarray(cl.embedder.embed(abstracts), dtype=np.float32)
    cache.parent.mkdir(parents=True, exist_ok=True)
    print(f"embedded {len(abstracts)} abstracts in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    np.save(cache, vectors)
    return vectors


class Corpus:
    """The synthetic documents, reproducible from ``seed``."""

    def __init__(self, abstracts: list[str], vectors: NDArray[np.float32], seed: int = 14) -> None:
        self.sentences = [_SENTENCE.split(a) for a in abstracts]
        self.vectors = vectors
        rng = np.random.default_rng(seed)
        #: Per topic: the spread of its chunks around it (per dimension), tight to loose.
        self.spread = rng.uniform(0.015, 0.045, len(abstracts)).astype(np.float32)
        self.seed = seed

    def documents(self, count: int, first: int = 0) -> Iterator[PreparedDocument]:
        dim = self.vectors.shape[1]
        for d in range(first, first + count):
            rng = np.random.default_rng((self.seed, d))
            topic = int(rng.integers(len(self.sentences)))
            noise = rng.normal(0.0, self.spread[topic], (CHUNKS_PER_DOCUMENT, dim)).astype(np.float32)
            vecs = self.vectors[topic] + noise
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            chunks, at = [], 0
            for i in range(CHUNKS_PER_DOCUMENT):
                text = self._text(rng, topic, i)
                chunks.append(PreparedChunk(text, page=1 + i // 4, start=at))
                at += len(text)
            yield PreparedDocument(
                f"bench://scale/{d}", f"doc-{d}", chunks, vecs, labels=Labels(scopes=self._scopes(rng))
            )

    def _text(self, rng: np.random.Generator, topic: int, i: int) -> str:
        own = self.sentences[topic]
        parts: list[str] = []
        size, k = 0, i
        while size < CHUNK_CHARS:
            # Two sentences in three from the topic's abstract (in turn), the third from another abstract.
            if rng.random() < 2 / 3:
                sentence = own[k % len(own)]
                k += 1
            else:
                other = self.sentences[int(rng.integers(len(self.sentences)))]
                sentence = other[int(rng.integers(len(other)))]
            parts.append(sentence)
            size += len(sentence) + 1
        return " ".join(parts)[: CHUNK_CHARS + 200]

    @staticmethod
    def _scopes(rng: np.random.Generator) -> tuple[str, ...]:
        if rng.random() < UNIVERSAL:
            return ()
        scopes = tuple(s for s, p in SCOPES.items() if rng.random() < p)
        return scopes or ("other",)


def settings_for(args: argparse.Namespace, **overrides: Any) -> Settings:
    return Settings().model_copy(
        update={"data_dir": Path(args.data), "namespace": f"scale_{args.chunks}", **overrides}
    )


def build(args: argparse.Namespace) -> dict[str, Any]:
    """Load the corpus (resuming where an earlier run stopped), then build the HNSW index; timed."""
    out: dict[str, Any] = {"uptime_before_build": uptime()}
    documents = args.chunks // CHUNKS_PER_DOCUMENT
    with Citeline(settings_for(args)) as cl:
        abstracts = read_abstracts()[: args.topics]
        corpus = Corpus(
            abstracts, base_vectors(cl, abstracts, Path(args.data) / f"abstracts-{len(abstracts)}.npy")
        )
        with cl.engine.connect() as conn:
            have = int(conn.execute(sa.text("SELECT count(*) FROM documents WHERE is_active")).scalar_one())
        started = time.perf_counter()
        done = have
        while done < documents:
            batch = list(corpus.documents(min(LOAD_BATCH, documents - done), first=done))
            cl.load_prepared(batch, build_index=False)
            done += len(batch)
            if done % (LOAD_BATCH * 50) == 0:
                rate = (done - have) * CHUNKS_PER_DOCUMENT / (time.perf_counter() - started)
                print(f"{done * CHUNKS_PER_DOCUMENT:,} chunks loaded, {rate:,.0f}/s, load {load_average()}",
                      file=sys.stderr)  # fmt: skip
        out["load_s"] = round(time.perf_counter() - started, 1)
        out["loaded_chunks"] = (documents - have) * CHUNKS_PER_DOCUMENT
        out["uptime_after_load"] = uptime()
        model, dim = cl.served_model(), cl.embedder.dimension
        with cl.engine.connect() as conn:
            out["server_maintenance_work_mem"] = conn.execute(sa.text("SHOW maintenance_work_mem")).scalar()
        out["hnsw_build_memory_mb"] = cl.settings.hnsw_build_memory_mb
        started = time.perf_counter()
        cl.build_vector_index(model, dim)
        out["hnsw_build_s"] = round(time.perf_counter() - started, 1)
        with cl.engine.begin() as conn:
            conn.execute(sa.text("ANALYZE"))
        out["uptime_after_index"] = uptime()
    return out


def disk(args: argparse.Namespace) -> dict[str, Any]:
    """Each table's heap (with TOAST) and indexes, in MB; the whole server folder."""
    out: dict[str, Any] = {}
    with Citeline(settings_for(args)) as cl, cl.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                "AND c.relkind = 'r' ORDER BY pg_total_relation_size(c.oid) DESC LIMIT 6"
            )
        ).all()
        out["tables_mb"] = {r[0]: {"table": r[1] >> 20, "indexes": r[2] >> 20} for r in rows}
        indexes = conn.execute(
            sa.text(
                "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() ORDER BY 2 DESC LIMIT 8"
            )
        ).all()
        out["indexes_mb"] = {r[0]: r[1] >> 20 for r in indexes}
        out["chunks"] = conn.execute(sa.text("SELECT chunk_count FROM corpus_stats")).scalar_one()
        out["postings"] = conn.execute(
            sa.text("SELECT reltuples::bigint FROM pg_class WHERE oid = 'postings'::regclass")
        ).scalar_one()
    du = subprocess.run(
        ["du", "-sm", str(Path(args.data) / "pg")], capture_output=True, text=True, check=False
    )
    out["server_folder_mb"] = int(du.stdout.split()[0]) if du.stdout else None
    return out


def queries() -> list[str]:
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh]


def selectivity(cl: Citeline) -> dict[str, float]:
    """The share of chunks each scoped search may see (its scope and the universal documents)."""
    out = {}
    with cl.engine.connect() as conn:
        total = conn.execute(sa.text("SELECT chunk_count FROM corpus_stats")).scalar_one()
        for scope in SCOPES:
            seen = conn.execute(
                sa.text(
                    "SELECT coalesce(sum(vector_count), 0) FROM documents WHERE is_active "
                    "AND (scopes = '{}' OR :s = ANY(scopes))"
                ),
                {"s": scope},
            ).scalar_one()
            out[f"scope {scope}"] = round(100 * seen / total, 3)
    return out


def pss_mb(pids: set[int]) -> float:
    return round(sum(pss_kib(p) for p in pids) / 1024, 1)


def keyword_index_mb(cl: Citeline) -> float | None:
    """The arrays an in-process keyword index holds, with ~100 bytes a distinct term for its vocabulary,
    in MB; None for the SQL index."""
    index = cl.keyword_index
    if not isinstance(index, MemoryKeywordIndex):
        return None
    held = index.memory()
    return round((held["chunk_postings"] + held["document_terms"] + 100 * held["terms"]) / 2**20, 1)


def serve(args: argparse.Namespace, keyword_index: str, share: list[str], go: Any, out: Any) -> None:
    """One serving process: warm up (timed), wait for the others, then search ``share`` in turn."""
    pid = os.getpid()
    with Citeline(settings_for(args, keyword_index=keyword_index, query_cache_size=0)) as cl:
        before = pss_kib(pid)
        t0 = time.perf_counter()
        # The keyword index first, timed on its own, then the rest (embedder, judge) as servers warm up.
        with cl.engine.connect() as conn:
            cl.keyword_index.warm_up(conn)
        keyword = time.perf_counter() - t0
        keyword_pss = (pss_kib(pid) - before) / 1024
        cl.warm_up()
        warm = time.perf_counter() - t0
        index = cl.keyword_index
        source = index.source if isinstance(index, MemoryKeywordIndex) else "sql"
        shared = index.memory()["shared"] / 2**20 if isinstance(index, MemoryKeywordIndex) else 0.0
        out.put(
            (
                "ready",
                pid,
                warm,
                (pss_kib(pid) - before) / 1024,
                keyword_index_mb(cl),
                keyword,
                keyword_pss,
                "snapshot" if source not in ("catalog", "sql") else source,
                round(shared, 1),
            )
        )
        go.wait()
        times = []
        t0 = time.perf_counter()
        for q in share:
            s = time.perf_counter()
            cl.search(SearchRequest(q))
            times.append((time.perf_counter() - s) * 1e3)
        out.put(("done", pid, time.perf_counter() - t0, times, pss_kib(pid) / 1024))


def measure_processes(
    args: argparse.Namespace, count: int, keyword_index: str, start: str = "mapped"
) -> dict[str, Any]:
    """``count`` processes started together, each with its own keyword index, searching at once.

    ``start`` "cold": the keyword index's snapshots are deleted first, so one process loads the index
    from the catalog (and writes a snapshot) while the others wait for it; "mapped": the processes
    find the snapshot an earlier run wrote and map it."""
    if start == "cold":
        with Citeline(settings_for(args)) as cl:
            index = cl.keyword_index
            if isinstance(index, MemoryKeywordIndex) and index.snapshots is not None:
                shutil.rmtree(index.snapshots, ignore_errors=True)
    qs = queries()[: args.queries]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    go = ctx.Event()
    procs = [
        ctx.Process(target=serve, args=(args, keyword_index, qs[i::count], go, results)) for i in range(count)
    ]
    for p in procs:
        p.start()
    ready = [results.get(timeout=args.warm_timeout) for _ in procs]
    go.set()  # every process has warmed up: all start searching at once
    server = postmaster_pid(Path(args.data) / "pg")
    peak = 0.0
    done: list[Any] = []
    while len(done) < count:
        pids = {p.pid for p in procs if p.pid} | (
            with_descendants([server], parent_pids()) if server else set()
        )
        peak = max(peak, pss_mb(pids))
        try:
            done.append(results.get(timeout=1.0))
        except Exception:  # queue.Empty: still searching
            continue
    for p in procs:
        p.join()
    times = [t for d in done for t in d[3]]
    wall = max(d[2] for d in done)
    return {
        "processes": count,
        "keyword_index": keyword_index,
        "start": start if keyword_index == "memory" else None,
        "warm_up_s": [round(r[2], 1) for r in ready],
        "warm_up_pss_mb": [round(r[3], 1) for r in ready],
        "keyword_warm_up_s": [round(r[5], 2) for r in ready],
        "keyword_warm_up_pss_mb": [round(r[6], 1) for r in ready],
        "keyword_sources": [r[7] for r in ready],
        "keyword_arrays_mb": ready[0][4],
        "keyword_mapped_mb": ready[0][8],
        "process_pss_mb_after": [round(d[4], 1) for d in done],
        "peak_total_pss_mb_with_server": peak,
        "searches_per_s": round(len(times) / wall, 2),
        "p50_ms": round(statistics.median(times), 1),
        "p99_ms": round(percentile(times, 99), 1),
        "uptime": uptime(),
    }


def drop_page_cache() -> None:
    """Empty the kernel's page cache, as after a reboot (root only), so the search that follows starts
    cold: the 2M store does not fit in this machine's memory, and what is cached decides the latency."""
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError as exc:
        message = f"--drop-caches: cannot write /proc/sys/vm/drop_caches ({exc}); run as root"
        raise SystemExit(message) from exc


def measure_latency(args: argparse.Namespace) -> dict[str, Any]:
    """One process, default settings: hybrid search p50/p99 per filter, queries in turns across filters."""
    qs = queries()[: args.queries]
    out: dict[str, Any] = {"uptime_before": uptime()}
    if args.drop_caches:
        drop_page_cache()
    out["page_cache"] = "dropped" if args.drop_caches else "as found"
    with Citeline(settings_for(args)) as cl:
        t0 = time.perf_counter()
        cl.warm_up()  # which reads what searches read into the page cache, unless CITELINE_PREWARM_MB=0
        out["warm_up_s"] = round(time.perf_counter() - t0, 1)
        out["prewarm_mb"] = cl.settings.prewarm_mb
        out["selectivity_percent"] = selectivity(cl)
        times: dict[str, list[float]] = {label: [] for label in FILTERS}
        seen: set[tuple[str, str]] = set()
        for i, q in enumerate(qs):
            labels = list(FILTERS)
            # The filter measured first changes from one query to the next; later ones reuse the
            # query's vector (the query cache), as a user's refined search would.
            for label in labels[i % len(labels) :] + labels[: i % len(labels)]:
                s = time.perf_counter()
                hits = cl.search(SearchRequest(q, filters=FILTERS[label]))
                times[label].append((time.perf_counter() - s) * 1e3)
                seen.update(
                    (scope, str(h.document_id)) for scope in FILTERS[label].scopes or () for h in hits
                )
        with cl.engine.connect() as conn:
            labels_of: dict[str, list[str]] = {
                r[0]: r[1]
                for r in conn.execute(
                    sa.text(
                        "SELECT document_id::text, scopes FROM documents WHERE is_active "
                        "AND document_id = ANY(CAST(:ids AS uuid[]))"
                    ),
                    {"ids": sorted({d for _, d in seen})},
                )
            }
        # A scoped hit must come from a document of that scope or a universal one.
        out["hits_outside_scope"] = sum(bool(labels_of[d]) and s not in labels_of[d] for s, d in seen)
        out["latency_ms"] = {
            label: {"p50": round(statistics.median(t), 1), "p99": round(percentile(t, 99), 1)}
            for label, t in times.items()
        }
    out["uptime_after"] = uptime()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=2_000_000)
    parser.add_argument("--data", default="/work/scale-data", help="data directory the store is kept in")
    parser.add_argument(
        "--topics", type=int, default=5183, help="SciFact abstracts the documents are drawn around"
    )
    parser.add_argument("--reuse", action="store_true", help="search the store an earlier run built")
    parser.add_argument("--queries", type=int, default=300, help="SciFact test claims searched")
    parser.add_argument(
        "--drop-caches",
        action="store_true",
        help="empty the page cache before the one-process search (root): a server started cold",
    )
    parser.add_argument("--processes", default="1,2,4", help="serving process counts to measure")
    parser.add_argument(
        "--keyword-indexes", default="memory,sql", help="keyword indexes for the process runs"
    )
    parser.add_argument(
        "--starts",
        default="cold,mapped",
        help="in-memory keyword index: start with no snapshot (cold), and from the snapshot (mapped)",
    )
    parser.add_argument(
        "--warm-timeout", type=float, default=900.0, help="seconds a process may take to warm up"
    )
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"chunks": args.chunks, "started": uptime()}
    if not args.reuse:
        report["build"] = build(args)
        print(json.dumps(report["build"]), file=sys.stderr)
    report["disk"] = disk(args)
    print(json.dumps(report["disk"]), file=sys.stderr)
    report["search"] = measure_latency(args)
    print(json.dumps(report["search"]), file=sys.stderr)
    report["processes"] = []
    for kind in args.keyword_indexes.split(","):
        for count in map(int, args.processes.split(",")):
            for start in args.starts.split(",") if kind == "memory" else ["-"]:
                report["processes"].append(measure_processes(args, count, kind, start))
                print(json.dumps(report["processes"][-1]), file=sys.stderr)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
