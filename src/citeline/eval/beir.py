"""``citeline eval``: ingest a BEIR corpus into its own namespace, run every query, score the ranking.

Each corpus entry becomes one document (title as its section heading); chunk hits are folded into
document rankings by each document's best chunk, as BEIR scores documents.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.eval.metrics import mrr_at, ndcg_at, percentile, recall_at
from citeline.ingest import IngestOptions, Outcome, Source
from citeline.retrieve.search import SearchRequest
from citeline.settings import Fusion
from citeline.types import LoadedSource, Page, Section

#: Chunks fetched per query: enough that 100 distinct documents survive folding chunks into documents.
CHUNK_DEPTH = 300


@dataclass(frozen=True)
class BeirData:
    """A BEIR folder, read."""

    folder: Path
    namespace: str
    corpus_path: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(folder: Path, *, split: str = "test") -> BeirData:
    """Read queries and qrels; the corpus is streamed later. Errors name the missing file."""
    corpus = folder / "corpus.jsonl"
    queries_path = folder / "queries.jsonl"
    qrels_path = folder / "qrels" / f"{split}.tsv"
    for path in (corpus, queries_path, qrels_path):
        if not path.is_file():
            raise InvalidRequestError(f"{folder} is not a BEIR folder: {path.name} is missing ({path})")
    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if n == 0 and parts[0] == "query-id":
                continue
            if len(parts) < 3:
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries: dict[str, str] = {}
    with queries_path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                item = json.loads(line)
                if str(item["_id"]) in qrels:
                    queries[str(item["_id"])] = str(item["text"])
    slug = re.sub(r"[^a-z0-9]+", "_", folder.resolve().name.lower()).strip("_") or "beir"
    return BeirData(folder, f"eval_{slug}"[:41], corpus, queries, qrels)


def corpus_sources(data: BeirData) -> Iterator[Source]:
    """One in-memory source per corpus entry, hashed so an unchanged entry is recognised next time."""
    with data.corpus_path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            item = json.loads(line)
            doc_id, title, text = str(item["_id"]), str(item.get("title") or ""), str(item.get("text") or "")
            body = f"{title}\n\n{text}" if title else text
            digest = hashlib.sha256(body.encode()).hexdigest()

            def opener(body: str = body, title: str = title) -> LoadedSource:
                sections = (Section(0, title),) if title else ()
                return LoadedSource("text/plain", title, iter([Page(1, body, sections)]))

            yield Source(doc_id, f"beir://{data.namespace}/{doc_id}", doc_id, digest, opener)


def evaluate(
    cl: Citeline,
    data: BeirData,
    *,
    limit: int | None = None,
    fusion: Fusion | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Ingest (or reuse) the corpus, run the queries, return the metrics."""
    console = console or Console(stderr=True)
    ingestor = cl.ingestor()
    total = sum(1 for _ in data.corpus_path.open(encoding="utf-8"))
    counts = dict.fromkeys(Outcome, 0)
    t0 = time.perf_counter()
    with Progress(
        *Progress.get_default_columns()[:-1],
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("ingesting corpus", total=total)

        def on_result(result: Any) -> None:
            counts[result.outcome] += 1
            progress.advance(task)

        ingestor.ingest(corpus_sources(data), IngestOptions(), on_result)
    ingest_seconds = time.perf_counter() - t0
    if counts[Outcome.FAILED]:
        console.print(f"[yellow]{counts[Outcome.FAILED]} corpus entries failed to ingest[/yellow]")

    query_ids = list(data.queries)[:limit] if limit else list(data.queries)
    ndcg10, rec10, rec100, mrr10, latencies = [], [], [], [], []
    with Progress(
        BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True
    ) as progress:
        task = progress.add_task("queries", total=len(query_ids))
        for qid in query_ids:
            start = time.perf_counter()
            hits = cl.search(
                SearchRequest(data.queries[qid], top_k=CHUNK_DEPTH, candidates=CHUNK_DEPTH, fusion=fusion)
            )
            latencies.append((time.perf_counter() - start) * 1e3)
            ranked: list[str] = []
            seen: set[str] = set()
            for hit in hits:
                if hit.document_name not in seen:
                    seen.add(hit.document_name)
                    ranked.append(hit.document_name)
            relevant = data.qrels[qid]
            ndcg10.append(ndcg_at(ranked, relevant, 10))
            rec10.append(recall_at(ranked, relevant, 10))
            rec100.append(recall_at(ranked, relevant, 100))
            mrr10.append(mrr_at(ranked, relevant, 10))
            progress.advance(task)

    n = len(query_ids) or 1
    return {
        "dataset": data.folder.name,
        "namespace": cl.settings.namespace,
        "fusion": (fusion or cl.settings.fusion).value,
        "queries": len(query_ids),
        "corpus_added": counts[Outcome.ADDED] + counts[Outcome.UPDATED],
        "corpus_unchanged": counts[Outcome.UNCHANGED] + counts[Outcome.RELABELLED],
        "ingest_seconds": round(ingest_seconds, 1),
        "ndcg@10": sum(ndcg10) / n,
        "recall@10": sum(rec10) / n,
        "recall@100": sum(rec100) / n,
        "mrr@10": sum(mrr10) / n,
        "latency_p50_ms": percentile(latencies, 50),
        "latency_p99_ms": percentile(latencies, 99),
    }
