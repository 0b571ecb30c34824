"""``make bench-peers``: citeline against the stack most teams start with, side by side on SciFact.

The peer is LangChain's ``RecursiveCharacterTextSplitter`` with ``langchain-chroma`` (embedded Chroma,
dense search). Both stacks chunk at 800/120 characters and embed with the same int8 all-MiniLM-L6-v2
ONNX file (citeline's embedder, wrapped for LangChain). Each runs in a process of its own, so each
one's memory is measured alone: PSS of the process and its children, plus, for citeline, its embedded
PostgreSQL server's processes (Chroma runs in-process).

Ingest goes in batches and the queries one by one, alternating the stacks (and which goes first), so
a slow spell of a shared machine falls on both. Each query is searched unfiltered and within one scope
(half the corpus); the ranking figures come from untimed deeper searches, as ``citeline eval`` takes
them. Then 4 concurrent searchers run all queries on each stack, in alternating rounds.

The run checks that both embedders give the same vectors and that no scoped hit lies outside its
scope, and prints one table of ratios (citeline / peer) with the issue-16 targets. Built stores stay
in ``--store``; ``--reuse`` searches them again and takes the ingest figures from the run that built
them (``record.json`` there).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol, cast

from bench.peers_common import (
    CHUNK_OVERLAP,
    CHUNK_SIZE,
    SCOPE_A,
    Doc,
    cpu_seconds,
    outside_scope,
    parent_pids,
    postmaster_pid,
    pss_kib,
    read_corpus,
    with_descendants,
)
from citeline.eval.metrics import ndcg_at, percentile, recall_at

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "eval" / "scifact"
SIDES = ("citeline", "peer")

#: Hits of a timed search (what a user asks for), of the search nDCG@10 is taken from (as ``citeline
#: eval`` does: enough chunks for 10 distinct documents) and of the one recall@100 is taken from.
K_TIMED = 10
K_NDCG = 100
K_RECALL = 300

#: Largest difference allowed between the two stacks' vectors of one text.
VECTOR_TOLERANCE = 1e-6


class Side(Protocol):
    """What the benchmark asks of each stack (bench/peers_citeline.py, bench/peers_chroma.py)."""

    def ingest(self, docs: list[Doc]) -> float: ...
    def embed_documents(self, texts: list[str]) -> list[list[float]]: ...
    def search(self, query: str, scope: str | None, k: int) -> tuple[float, list[str]]: ...
    def throughput(self, queries: list[str], threads: int, k: int) -> float: ...
    def chunks(self) -> int: ...
    def server_dir(self) -> str | None: ...
    def close(self) -> None: ...


def _open_side(kind: str, folder: Path) -> Side:
    # Imported here, in the side's own process: the other stack's packages are never loaded in it.
    if kind == "citeline":
        from bench.peers_citeline import CitelineSide

        return CitelineSide(folder)
    from bench.peers_chroma import ChromaSide

    return ChromaSide(folder)


def serve(kind: str, folder: str, conn: Connection) -> None:
    """A side's process: open the stack, then answer ``(method, args)`` calls until ``None``."""
    try:
        side = _open_side(kind, Path(folder))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise
    conn.send(("ok", None))
    while True:
        message = conn.recv()
        if message is None:
            side.close()
            conn.send(("ok", None))
            return
        name, args = message
        try:
            conn.send(("ok", getattr(side, name)(*args)))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class BenchError(RuntimeError):
    """A side failed, or a check of the run did not hold."""


class Remote:
    """A side running in its own (spawned, so clean) process."""

    def __init__(self, kind: str, folder: Path) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.kind = kind
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(kind, str(folder), child), name=f"bench-{kind}")
        self.process.start()
        self._receive()

    @property
    def pid(self) -> int:
        return cast(int, self.process.pid)

    def _receive(self) -> Any:
        status, value = self.conn.recv()
        if status == "error":
            raise BenchError(f"{self.kind}: {value}")
        return value

    def call(self, name: str, *args: Any) -> Any:
        self.conn.send((name, args))
        return self._receive()

    def close(self) -> None:
        if self.process.is_alive():
            self.conn.send(None)
            self._receive()
        self.process.join(timeout=60)


class MemoryWatch:
    """Samples each side's PSS (process, children, database server) in the background; keeps peaks."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.roots: dict[str, list[int]] = {}
        self.peak_kib: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pss-sampler", daemon=True)

    def watch(self, side: str, pids: Sequence[int]) -> None:
        self.roots[side] = list(pids)
        self.peak_kib.setdefault(side, 0)
        self.sample()

    def sample(self) -> None:
        parents = parent_pids()
        for side, roots in list(self.roots.items()):
            total = sum(pss_kib(pid) for pid in with_descendants(roots, parents))
            self.peak_kib[side] = max(self.peak_kib.get(side, 0), total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def read_queries(folder: Path) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The test queries that have judgements, and the judgements (``qrels/test.tsv``)."""
    qrels: dict[str, dict[str, int]] = {}
    for n, line in enumerate((folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()):
        parts = line.split("\t")
        if (n == 0 and parts[0] == "query-id") or len(parts) < 3:
            continue
        qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries: dict[str, str] = {}
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            if str(item["_id"]) in qrels:
                queries[str(item["_id"])] = str(item["text"])
    return queries, qrels


def distinct(doc_ids: Sequence[str]) -> list[str]:
    """Documents in the order of their best chunk: how chunk hits rank documents."""
    return list(dict.fromkeys(doc_ids))


@dataclass(frozen=True)
class Row:
    """One line of the table: both stacks' figures and whether citeline meets its target."""

    name: str
    citeline: float
    peer: float
    digits: int
    target: str = ""
    met: bool | None = None

    @property
    def ratio(self) -> float:
        return self.citeline / self.peer if self.peer else math.inf if self.citeline else 1.0


def build_rows(fig: dict[str, dict[str, float]]) -> list[Row]:
    """The table from each side's figures (keys as :func:`run` fills them), with the issue-16 targets:
    latencies and memory as a ratio at most, rates and throughput as a ratio at least, nDCG@10 as
    citeline's own value, hits outside a scope as none on either side."""
    c, p = fig["citeline"], fig["peer"]

    def ratio_row(
        name: str, key: str, digits: int, most: float | None = None, least: float | None = None
    ) -> Row:
        row = Row(name, c[key], p[key], digits)
        if most is not None:
            return Row(row.name, row.citeline, row.peer, digits, f"ratio <= {most}", row.ratio <= most)
        if least is not None:
            return Row(row.name, row.citeline, row.peer, digits, f"ratio >= {least}", row.ratio >= least)
        return row

    outside_c, outside_p = c["outside_scope"], p["outside_scope"]
    return [
        ratio_row("ingest, documents/s", "ingest_docs_per_s", 2, least=3),
        ratio_row("search p50 ms, no filter", "p50_ms", 1, most=0.65),
        ratio_row("search p99 ms, no filter", "p99_ms", 1, most=0.8),
        ratio_row("search p50 ms, one scope (half the corpus)", "scoped_p50_ms", 1, most=0.4),
        ratio_row("search p99 ms, one scope", "scoped_p99_ms", 1, most=0.6),
        ratio_row("searches/s, 4 concurrent searchers", "throughput_qps", 1, least=1.5),
        ratio_row("CPU ms per search, 4 searchers (server included)", "cpu_ms_per_search", 1),
        Row("nDCG@10", c["ndcg10"], p["ndcg10"], 3, "citeline >= 0.744", c["ndcg10"] >= 0.744),
        ratio_row("recall@100", "recall100", 3),
        ratio_row("peak memory MB (PSS, database server included)", "peak_mb", 0, most=0.35),
        Row(
            "hits outside the scope", outside_c, outside_p, 0, "0 on both", outside_c == 0 and outside_p == 0
        ),
    ]


def render(rows: Sequence[Row]) -> str:
    """The rows as one Markdown table."""
    lines = [
        "| | citeline | LangChain + Chroma | ratio | target | met |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        met = "" if row.met is None else ("yes" if row.met else "no")
        ratio = "-" if math.isinf(row.ratio) else f"{row.ratio:.2f}"
        lines.append(
            f"| {row.name} | {row.citeline:,.{row.digits}f} | {row.peer:,.{row.digits}f} | {ratio} "
            f"| {row.target} | {met} |"
        )
    return "\n".join(lines)


def load_average() -> str:
    """``uptime``'s line: the machine's load when the figures were taken."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def now() -> str:
    """The time in UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def commit() -> str:
    """The commit of the code measured, marked ``+changes`` when the work tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True
    )
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def _ingest(remotes: dict[str, Remote], docs: list[Doc], batch: int) -> dict[str, float]:
    """Both stacks ingest ``docs`` batch by batch, taking turns (and turns at going first)."""
    seconds = dict.fromkeys(SIDES, 0.0)
    batches = [docs[i : i + batch] for i in range(0, len(docs), batch)]
    for n, part in enumerate(batches):
        for kind in SIDES if n % 2 == 0 else SIDES[::-1]:
            seconds[kind] += float(remotes[kind].call("ingest", part))
        print(f"  ingested {min((n + 1) * batch, len(docs))}/{len(docs)} documents", file=sys.stderr)
    return seconds


def _check_vectors(remotes: dict[str, Remote], texts: list[str]) -> float:
    """The largest difference between the two stacks' vectors of ``texts``; fails above tolerance."""
    ours = remotes["citeline"].call("embed_documents", texts)
    theirs = remotes["peer"].call("embed_documents", texts)
    if len(ours) != len(theirs) or any(len(a) != len(b) for a, b in zip(ours, theirs, strict=True)):
        raise BenchError("the two stacks' embedders give vectors of different shapes")
    worst = max(abs(x - y) for a, b in zip(ours, theirs, strict=True) for x, y in zip(a, b, strict=True))
    if worst > VECTOR_TOLERANCE:
        raise BenchError(f"the two stacks' embedders disagree: largest difference {worst:.2e}")
    return float(worst)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark; returns its record (also written to ``--store``/record.json)."""
    # Read now: the record names the code this process loaded, not a commit made while it ran.
    measured = commit()
    queries, qrels = read_queries(args.data)
    judged = {doc_id for relevant in qrels.values() for doc_id, grade in relevant.items() if grade > 0}
    docs = read_corpus(args.data / "corpus.jsonl", args.limit, judged)
    scopes = {d.doc_id: d.scope for d in docs}
    qids = list(queries)[: args.queries] if args.queries else list(queries)
    store: Path = args.store
    record_path = store / "record.json"
    previous: dict[str, Any] | None = None
    if args.reuse:
        if not record_path.is_file():
            raise BenchError(f"--reuse: no earlier run recorded in {store}")
        previous = json.loads(record_path.read_text())
        if previous["documents"] != len(docs):
            raise BenchError(
                f"--reuse: the stores in {store} hold {previous['documents']} documents, not {len(docs)}; "
                "give the same --limit or build them again (without --reuse)"
            )
    else:
        for kind in SIDES:
            shutil.rmtree(store / kind, ignore_errors=True)
    store.mkdir(parents=True, exist_ok=True)
    started, load_before = now(), load_average()
    print(f"{len(docs)} documents, {len(qids)} queries; {load_before}", file=sys.stderr)

    fig: dict[str, dict[str, float]] = {kind: {} for kind in SIDES}
    with MemoryWatch() as memory:
        remotes: dict[str, Remote] = {}
        try:
            for kind in SIDES:
                remotes[kind] = Remote(kind, store / kind)
                server = remotes[kind].call("server_dir")
                postmaster = postmaster_pid(Path(server)) if server else None
                if server and postmaster is None:
                    raise BenchError(f"no PostgreSQL server found under {server}")
                memory.watch(kind, [remotes[kind].pid] + ([postmaster] if postmaster else []))

            if previous is None:
                seconds = _ingest(remotes, docs, args.batch)
                ingest = {
                    kind: {
                        "seconds": seconds[kind],
                        "chunks": remotes[kind].call("chunks"),
                        "peak_kib": memory.peak_kib[kind],
                    }
                    for kind in SIDES
                }
            else:
                ingest = previous["ingest"]
                for kind in SIDES:
                    chunks = remotes[kind].call("chunks")
                    if chunks != ingest[kind]["chunks"]:
                        raise BenchError(
                            f"--reuse: the {kind} store holds {chunks} chunks, its ingest made "
                            f"{ingest[kind]['chunks']}"
                        )

            check_texts = [d.body for d in docs[:24]] + [queries[q] for q in qids[:8]]
            worst = _check_vectors(remotes, check_texts)
            print(f"  same vectors: largest difference {worst:.1e}", file=sys.stderr)

            searched, search_load = now(), load_average()
            for kind in SIDES:  # untimed: first searches load what they need
                remotes[kind].call("search", queries[qids[0]], None, K_TIMED)
                remotes[kind].call("search", queries[qids[0]], SCOPE_A, K_TIMED)
            lat: dict[str, dict[str, list[float]]] = {k: {"all": [], "scoped": []} for k in SIDES}
            ndcg: dict[str, list[float]] = {k: [] for k in SIDES}
            recall: dict[str, list[float]] = {k: [] for k in SIDES}
            outside = dict.fromkeys(SIDES, 0)
            for n, qid in enumerate(qids):
                order = SIDES if n % 2 == 0 else SIDES[::-1]
                query = queries[qid]
                for kind in order:
                    time.sleep(args.pause_ms / 1e3)
                    ms, _ = remotes[kind].call("search", query, None, K_TIMED)
                    lat[kind]["all"].append(ms)
                for kind in order:
                    time.sleep(args.pause_ms / 1e3)
                    ms, ranked = remotes[kind].call("search", query, SCOPE_A, K_TIMED)
                    lat[kind]["scoped"].append(ms)
                    outside[kind] += outside_scope(ranked, scopes, SCOPE_A)
                for kind in order:
                    _, top = remotes[kind].call("search", query, None, K_NDCG)
                    _, deep = remotes[kind].call("search", query, None, K_RECALL)
                    ndcg[kind].append(ndcg_at(distinct(top), qrels[qid], 10))
                    recall[kind].append(recall_at(distinct(deep), qrels[qid], 100))
                if (n + 1) % 50 == 0:
                    print(f"  searched {n + 1}/{len(qids)} queries", file=sys.stderr)

            texts = [queries[q] for q in qids]
            busy = dict.fromkeys(SIDES, 0.0)
            cpu = dict.fromkeys(SIDES, 0.0)
            for n in range(args.rounds):
                for kind in SIDES if n % 2 == 0 else SIDES[::-1]:
                    before = cpu_seconds(memory.roots[kind], parent_pids())
                    busy[kind] += float(remotes[kind].call("throughput", texts, args.searchers, K_TIMED))
                    cpu[kind] += cpu_seconds(memory.roots[kind], parent_pids()) - before
        finally:
            for remote in remotes.values():
                remote.close()

    for kind in SIDES:
        fig[kind] = {
            "ingest_docs_per_s": len(docs) / ingest[kind]["seconds"],
            "p50_ms": percentile(lat[kind]["all"], 50),
            "p99_ms": percentile(lat[kind]["all"], 99),
            "scoped_p50_ms": percentile(lat[kind]["scoped"], 50),
            "scoped_p99_ms": percentile(lat[kind]["scoped"], 99),
            "throughput_qps": args.rounds * len(texts) / busy[kind],
            # What a search costs the machine, whatever share of it the stack got: on a loaded machine
            # the throughput follows the share, this much less (2 idle cores serve at most 2,000 / it).
            "cpu_ms_per_search": cpu[kind] * 1e3 / (args.rounds * len(texts)),
            "ndcg10": sum(ndcg[kind]) / len(ndcg[kind]),
            "recall100": sum(recall[kind]) / len(recall[kind]),
            # The peak of the whole life of the stack: its ingest (perhaps an earlier run's) or this search.
            "peak_mb": max(memory.peak_kib[kind], int(ingest[kind]["peak_kib"])) / 1024,
            "outside_scope": float(outside[kind]),
        }
    record: dict[str, Any] = {
        "documents": len(docs),
        "queries": len(qids),
        "commit": measured,
        "chunking": [CHUNK_SIZE, CHUNK_OVERLAP],
        "ingest": ingest,
        "ingest_load": previous["ingest_load"] if previous else load_before,
        "ingest_commit": previous.get("ingest_commit", "unknown") if previous else measured,
        "ingest_date": previous["ingest_date"] if previous else started,
        "date": searched,
        "load_before": search_load,
        "pause_ms": args.pause_ms,
        "load_after": load_average(),
        "largest_vector_difference": worst,
        "figures": fig,
    }
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SCIFACT, help="a BEIR folder (default: SciFact)")
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="ingest only N documents: those judged relevant to a test query first",
    )
    parser.add_argument("--queries", type=int, default=None, help="run only the first N test queries")
    parser.add_argument(
        "--store", type=Path, default=REPO / "bench" / "results" / "peers", help="where the built stores stay"
    )
    parser.add_argument("--reuse", action="store_true", help="search the stores an earlier run built")
    parser.add_argument("--batch", type=int, default=250, help="documents per ingest turn")
    parser.add_argument("--searchers", type=int, default=4, help="concurrent searchers")
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds per stack")
    parser.add_argument(
        "--pause-ms",
        type=float,
        default=0.0,
        help="wait this long before each timed search, so that threads one stack's last call left "
        "spinning (onnxruntime's, about 30 ms of a core after a run) have stopped before the other's "
        "search starts (docs/performance.md)",
    )
    args = parser.parse_args(argv)
    try:
        record = run(args)
    except BenchError as exc:
        print(f"bench-peers: {exc}", file=sys.stderr)
        return 1
    rows = build_rows(record["figures"])
    print(
        f"\n{record['documents']} SciFact documents, {record['queries']} test queries, chunks "
        f"{CHUNK_SIZE}/{CHUNK_OVERLAP}; ingest {record['ingest_date']} ({record['ingest_load']}); "
        f"search {record['date']} ({record['load_before']})\n"
    )
    print(render(rows))
    ingest = record["ingest"]
    print(
        f"\nchunks: citeline {ingest['citeline']['chunks']:,}, "
        f"LangChain + Chroma {ingest['peer']['chunks']:,}; "
        f"searches on commit {record['commit']}, ingest on commit {record['ingest_commit']}"
    )
    print(f"\nlargest difference between the two stacks' vectors: {record['largest_vector_difference']:.1e}")
    return 0 if all(r.met is not False for r in rows if r.name == "hits outside the scope") else 1


if __name__ == "__main__":
    sys.exit(main())
