"""The peer stack of ``make bench-peers`` (bench/peers.py): LangChain's ``RecursiveCharacterTextSplitter``
and ``langchain-chroma`` over embedded (in-process) Chroma, dense search, as most teams start.

It embeds with the same int8 all-MiniLM-L6-v2 ONNX file, on onnxruntime's default session, wrapped as
a LangChain ``Embeddings``, so the two stacks share the model and differ in everything else. It runs in
a process of its own and needs the ``peers`` extra (installed into ``.venv-peers`` by ``make bench-peers``).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# Chroma would otherwise try to send usage telemetry (there is no network here; do not wait for it).
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from langchain_chroma import Chroma
from langchain_core.embeddings import Embeddings
from langchain_text_splitters import RecursiveCharacterTextSplitter

from bench.peers_common import CHUNK_OVERLAP, CHUNK_SIZE, Doc
from citeline.embed.onnx import OnnxEmbedder
from citeline.settings import Settings

COLLECTION = "scifact"


class OnnxEmbeddings(Embeddings):
    """The same ONNX file as a LangChain ``Embeddings``, opened as a user who wraps the file would open
    it: one session with onnxruntime's default options (each run on every core, as sentence-transformers
    on torch or fastembed also run), for documents and queries alike. citeline's own session options
    (one thread a run for ingest workers, a query session, its graph changes) are citeline's: the peer
    gets none of them, neither as a help nor as a handicap. The tokenizer is citeline's (truncation at
    256 tokens, each run padded to its longest text, as sentence-transformers does)."""

    def __init__(self, embedder: OnnxEmbedder) -> None:
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = self.embedder.embed(texts).tolist()
        return vectors

    def embed_query(self, text: str) -> list[float]:
        vector: list[float] = self.embedder.embed([text])[0].tolist()
        return vector


class ChromaSide:
    """A persistent Chroma collection in ``folder``, filled and searched through LangChain."""

    def __init__(self, folder: Path) -> None:
        # The embedder citeline's settings name, built as citeline builds it (same batch size, threads).
        settings = Settings()
        name = settings.embedding_model.removeprefix("onnx:")
        # One worker: the session's runs already use every core.
        self.embeddings = OnnxEmbeddings(
            OnnxEmbedder(name, batch_size=settings.embed_batch_size, threads=1, defaults=True)
        )
        self.embeddings.embed_query("warm up")
        self.splitter = RecursiveCharacterTextSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
        self.store = Chroma(
            collection_name=COLLECTION, embedding_function=self.embeddings, persist_directory=str(folder)
        )

    def ingest(self, docs: list[Doc]) -> float:
        """Split and add ``docs``, each chunk carrying its document's id and scope; returns the seconds."""
        start = time.perf_counter()
        chunks = self.splitter.create_documents(
            [d.body for d in docs], metadatas=[{"doc_id": d.doc_id, "scope": d.scope} for d in docs]
        )
        self.store.add_documents(chunks)
        return time.perf_counter() - start

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embeddings.embed_documents(texts)

    def search(self, query: str, scope: str | None, k: int) -> tuple[float, list[str]]:
        """One dense search (with Chroma's metadata filter for a scope): its milliseconds and the
        documents of its hits, best first."""
        where = {"scope": scope} if scope is not None else None
        start = time.perf_counter()
        found = self.store.similarity_search(query, k=k, filter=where)
        ms = (time.perf_counter() - start) * 1e3
        return ms, [str(d.metadata["doc_id"]) for d in found]

    def throughput(self, queries: list[str], threads: int, k: int) -> float:
        """Seconds for ``threads`` concurrent searchers to run all ``queries`` between them."""
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(lambda q: self.store.similarity_search(q, k=k), queries))
        return time.perf_counter() - start

    def chunks(self) -> int:
        return len(self.store.get(include=[])["ids"])

    def server_dir(self) -> str | None:
        """Embedded Chroma runs inside this process: there is no server to measure."""
        return None

    def close(self) -> None:
        """Nothing to close: the persistent client writes as it goes."""
