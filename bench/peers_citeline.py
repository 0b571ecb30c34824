"""citeline's side of ``make bench-peers`` (bench/peers.py), through its public library API only.

It runs in a process of its own, so the memory measured for it is citeline's (and its PostgreSQL
server's) alone.
"""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.peers_common import CHUNK_OVERLAP, CHUNK_SIZE, Doc, group_by_scope
from citeline.engine import Citeline
from citeline.ingest import IngestOptions, Outcome, Source
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings
from citeline.types import LoadedSource, Page, Section

NAMESPACE = "peers_scifact"


def _source(doc: Doc) -> Source:
    """One corpus entry as an in-memory source, as ``citeline eval`` builds it (title as its section)."""

    def opener() -> LoadedSource:
        return LoadedSource("text/plain", doc.title, iter([Page(1, doc.body, (Section(0, doc.title),))]))

    digest = hashlib.sha256(doc.body.encode()).hexdigest()
    return Source(doc.doc_id, f"beir://scifact/{doc.doc_id}", doc.doc_id, digest, opener)


class CitelineSide:
    """A citeline store in ``folder``: its own embedded PostgreSQL server, default search settings."""

    def __init__(self, folder: Path) -> None:
        # database_url=None: always the bench's own embedded server, whose processes are measured.
        # query_cache_size=0: the bench searches each query several times (unfiltered, in a scope, for
        # the ranking figures), and a cached vector would spare citeline's later searches the embedding
        # the peer pays every time; a new query, the case measured, has nothing in the cache.
        self.settings = Settings(
            data_dir=folder,
            database_url=None,
            query_cache_size=0,
            namespace=NAMESPACE,
            chunk_size=CHUNK_SIZE,
            chunk_overlap=CHUNK_OVERLAP,
        )
        self.cl = Citeline(self.settings)
        self.cl.embedder.embed(["warm up"])
        self.cl.stats()  # starts (or joins) the server now, not inside the first timed call

    def ingest(self, docs: list[Doc]) -> float:
        """Ingest ``docs``, each with its scope; returns the seconds taken."""
        ingestor = self.cl.ingestor()
        start = time.perf_counter()
        for scope, group in group_by_scope(docs).items():
            results = ingestor.ingest(
                [_source(d) for d in group],
                IngestOptions(scopes=(scope,), chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP),
            )
            failed = [r.source for r in results if r.outcome == Outcome.FAILED]
            if failed:
                raise RuntimeError(f"citeline failed to ingest {len(failed)} documents: {failed[:5]}")
        return time.perf_counter() - start

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = self.cl.embedder.embed(texts).tolist()
        return vectors

    def search(self, query: str, scope: str | None, k: int) -> tuple[float, list[str]]:
        """One search as a user makes it (hybrid, default settings): its milliseconds and the
        documents of its hits, best first (one entry per hit)."""
        filters = Filters(scopes=(scope,)) if scope is not None else Filters()
        start = time.perf_counter()
        hits = self.cl.search(SearchRequest(query, filters=filters, top_k=k))
        ms = (time.perf_counter() - start) * 1e3
        return ms, [hit.document_name for hit in hits]

    def throughput(self, queries: list[str], threads: int, k: int) -> float:
        """Seconds for ``threads`` concurrent searchers to run all ``queries`` between them."""
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(lambda q: self.cl.search(SearchRequest(q, top_k=k)), queries))
        return time.perf_counter() - start

    def chunks(self) -> int:
        return int(self.cl.stats()["chunks"])

    def server_dir(self) -> str:
        """Where the embedded PostgreSQL server keeps its data (its processes are found from there)."""
        return str(self.settings.data_dir.expanduser().resolve() / "pg")

    def close(self) -> None:
        self.cl.close()
