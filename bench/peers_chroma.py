"""The peer stack of ``make bench-peers`` (bench/peers.py): LangChain's ``RecursiveCharacterTextSplitter``
and ``langchain-chroma`` over embedded (in-process) Chroma, dense search, as most teams start.

It embeds with citeline's embedder (the same int8 all-MiniLM-L6-v2 ONNX file), wrapped as a LangChain
``Embeddings``, so the two stacks differ in everything but the model. It runs in a process of its own
and needs the ``peers`` extra (installed into ``.venv-peers`` by ``make bench-peers``).
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
from citeline.embed import get_embedder
from citeline.embed.onnx import OnnxEmbedder
from citeline.settings import Settings

COLLECTION = "scifact"


class CitelineEmbeddings(Embeddings):
    """The same ONNX file as a LangChain ``Embeddings``: documents through citeline's embedder, a query on
    a session with onnxruntime's default options, as a user who wraps the model file gets it.

    A query is what a search waits for, so its session is the one users would have: onnxruntime's
    defaults use every core for one run (as sentence-transformers on torch, or fastembed, do), where
    citeline's ingest session keeps each run to one thread, a handicap no user of the peer stack has.
    Nor does the peer get citeline's graph changes (onnx.py): a user loading the file has none. The
    tokenizer is citeline's (truncation at 256 tokens, no padding for one text, as sentence-transformers).
    """

    def __init__(self, embedder: OnnxEmbedder) -> None:
        import onnxruntime as ort

        self.embedder = embedder
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.query_session = ort.InferenceSession(
            str(embedder.model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = self.embedder.embed(texts).tolist()
        return vectors

    def embed_query(self, text: str) -> list[float]:
        vector: list[float] = self.embedder.embed_on(self.query_session, text).tolist()
        return vector


class ChromaSide:
    """A persistent Chroma collection in ``folder``, filled and searched through LangChain."""

    def __init__(self, folder: Path) -> None:
        # The embedder citeline's settings name, built as citeline builds it (same batch size, threads).
        settings = Settings()
        embedder = get_embedder(
            settings.embedding_model, batch_size=settings.embed_batch_size, threads=settings.embed_threads
        )
        if not isinstance(embedder, OnnxEmbedder):
            raise TypeError(f"the peer stack embeds with an onnx: model, not {settings.embedding_model}")
        self.embeddings = CitelineEmbeddings(embedder)
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
