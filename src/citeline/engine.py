"""``Citeline``: the library's front door. Every shell (CLI, and later API and workers) goes through it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.access import FULL_ACCESS, Access
from citeline.answer.llm import LLM, get_llm
from citeline.chat.session import ChatSession
from citeline.embed import get_embedder
from citeline.embed.base import Embedder
from citeline.errors import AccessDeniedError, ConfigError, InvalidRequestError, NotFoundError
from citeline.ingest import (
    IngestOptions,
    Ingestor,
    IngestResult,
    ProgressCallback,
    discover,
    remove_unused_files,
    settle_abandoned,
)
from citeline.retrieve.rerank import Reranker, get_reranker, rerank_hits
from citeline.retrieve.search import Hit, SearchRequest, Timings, fetch_hits, hybrid_search
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.analyzer import Analyzer
from citeline.store.catalog import DocumentInfo
from citeline.store.database import connect
from citeline.store.keyword import KeywordIndex, MemoryKeywordIndex, SqlKeywordIndex

#: Settings a derived instance may change while sharing the parent's database connection pool.
_STORE_SETTINGS = ("data_dir", "database_url", "namespace")
#: ... and its embedder.
_EMBEDDER_SETTINGS = ("embedding_model", "embed_batch_size", "embed_threads")
#: ... and its in-memory keyword index.
_KEYWORD_SETTINGS = (
    "keyword_index",
    "keyword_lowercase",
    "keyword_stem",
    "keyword_stop_words",
    "keyword_extra_stop_words",
    "keyword_keep_technical",
    "keyword_language",
)


class Citeline:
    """One namespace of one store, with its embedder. Open it, use it, close it (or use ``with``).

    One instance serves a whole process: it is safe to share between threads, and every lazily opened
    part (database, embedder, answering model, rerankers) is created once even when the first requests
    arrive together. Servers call :meth:`warm_up` at start-up so the first request is not slow; a
    command that needs none of it (``--help``) stays fast. Settings are fixed for the instance's life:
    code that wants other settings builds another instance (:meth:`derive` shares what stays equal).
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings or Settings()
        self.analyzer = Analyzer.from_settings(self._settings)
        self._lock = threading.RLock()
        self._engine: sa.Engine | None = None
        self._embedder: Embedder | None = None
        self._llm: LLM | None = None
        self._rerankers: dict[str, Reranker | None] = {}
        self._query_pool: ThreadPoolExecutor | None = None
        #: Parts borrowed from the instance this one was derived from: never closed by this one.
        self._borrowed: set[str] = set()
        self.keyword_index: KeywordIndex = (
            MemoryKeywordIndex() if self._settings.keyword_index == "memory" else SqlKeywordIndex()
        )

    @property
    def settings(self) -> Settings:
        """The settings this instance was built with (read-only: see :meth:`derive`)."""
        return self._settings

    def derive(self, settings: Settings | None = None, /, **overrides: Any) -> Citeline:
        """Another instance with ``settings`` (or these settings changed), sharing this one's open
        store, embedder and keyword index where the settings they depend on are unchanged. Close it
        before this one."""
        settings = (settings or self._settings).model_copy(update=overrides)
        other = Citeline(settings)

        def same(names: tuple[str, ...]) -> bool:
            return all(getattr(settings, n) == getattr(self._settings, n) for n in names)

        if same(_STORE_SETTINGS) and self._engine is not None:
            other._engine = self._engine
            other._borrowed.add("engine")
        if same(_EMBEDDER_SETTINGS) and self._embedder is not None:
            other._embedder = self._embedder
        if same(_STORE_SETTINGS) and same(_KEYWORD_SETTINGS):
            other.keyword_index = self.keyword_index
        return other

    def warm_up(self) -> Citeline:
        """Open the store, load the embedder and the keyword index now rather than at the first request."""
        self.embedder  # noqa: B018
        with self.engine.connect() as conn:
            self.keyword_index.warm_up(conn)
        return self

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = self._open_store()
        return self._engine

    def _open_store(self) -> sa.Engine:
        engine = connect(self._settings)
        try:
            with engine.begin() as conn:
                catalog.bind_analyzer(conn, self.analyzer.config(), Analyzer().config())
                # A process that starts after a crash finds what the crash left processing failed.
                abandoned = catalog.fail_abandoned(conn)
            settle_abandoned(engine, abandoned)
        except BaseException:
            engine.dispose()
            raise
        return engine

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            with self._lock:
                if self._embedder is None:
                    self._embedder = get_embedder(
                        self._settings.embedding_model,
                        batch_size=self._settings.embed_batch_size,
                        threads=self._settings.embed_threads,
                    )
        return self._embedder

    @property
    def files_dir(self) -> Path:
        # One folder per namespace: a file's presence is decided by that namespace's catalog alone.
        return self._settings.data_dir.expanduser().resolve() / "files" / self._settings.namespace

    @property
    def llm(self) -> LLM | None:
        """The answering model named by the ``llm`` setting; ``None`` for ``extractive`` (no model)."""
        if self._settings.llm == "extractive":
            return None
        if self._llm is None:
            with self._lock:
                if self._llm is None:
                    self._llm = get_llm(self._settings.llm, self._settings)
        return self._llm

    def close(self) -> None:
        with self._lock:
            if self._query_pool is not None:
                self._query_pool.shutdown(wait=True)
                self._query_pool = None
            if self._llm is not None:
                self._llm.close()
                self._llm = None
            if self._engine is not None and "engine" not in self._borrowed:
                self._engine.dispose()
            self._engine = None

    def __enter__(self) -> Citeline:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- ingest ---------------------------------------------------------------------------------

    def ingest(
        self,
        paths: Iterable[str | Path],
        options: IngestOptions | None = None,
        *,
        progress: ProgressCallback | None = None,
        allow_private_urls: bool = False,
    ) -> list[IngestResult]:
        """Ingest files, folders (recursively) and URLs; one result per source, failures included."""
        return self.ingestor(allow_private_urls=allow_private_urls).ingest_paths(
            discover(paths), options or IngestOptions(), progress
        )

    def ingestor(self, *, allow_private_urls: bool = False) -> Ingestor:
        """An :class:`Ingestor` bound to this store and embedder, for sources built in memory."""
        return Ingestor(
            self.engine,
            self.embedder,
            self.analyzer,
            files_dir=self.files_dir,
            chunk_size=self.settings.chunk_size,
            chunk_overlap=self.settings.chunk_overlap,
            allow_private_urls=allow_private_urls,
        )

    # -- search ---------------------------------------------------------------------------------

    def search(
        self,
        request: SearchRequest | str,
        *,
        access: Access = FULL_ACCESS,
        timings: Timings | None = None,
    ) -> list[Hit]:
        """Hybrid search within ``access``; see :class:`SearchRequest` for the knobs."""
        if isinstance(request, str):
            request = SearchRequest(query=request)
        request = replace(request, filters=access.restrict(request.filters))
        if not request.query.strip():
            raise InvalidRequestError("the search query is empty")
        embedder, query = self.embedder, request.query
        embed_ms = 0.0

        def embed_query() -> NDArray[np.float32]:
            nonlocal embed_ms
            t0 = time.perf_counter()
            vector: NDArray[np.float32] = embedder.embed([query])[0]
            embed_ms = (time.perf_counter() - t0) * 1e3
            return vector

        if self._query_pool is None:
            with self._lock:
                if self._query_pool is None:
                    # Several, so that concurrent searches do not queue behind one another's embeddings.
                    self._query_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="citeline-query")
        # The query embeds (onnxruntime lets go of the GIL) while the search reads the catalog and runs
        # the keyword stage, which need no vector: about 2.5 ms of a 20 ms search at 100k chunks.
        pending = self._query_pool.submit(embed_query)
        reranker = self.reranker(request.rerank)
        mmr_lambda = request.mmr_lambda if request.mmr_lambda is not None else self.settings.mmr_lambda
        top_k = request.top_k or self.settings.top_k
        depth = self.settings.rerank_candidates
        second_stage = reranker is not None or mmr_lambda is not None
        if second_stage:
            # The second stage needs its candidates even when fewer hits are asked for.
            request = replace(request, top_k=max(top_k, depth))
        with self.engine.begin() as conn:
            hits = hybrid_search(
                conn,
                request,
                pending.result,
                model=self.embedder.model_id,
                analyzer=self.analyzer,
                keyword_index=self.keyword_index,
                settings=self.settings,
                timings=timings,
            )
            if timings is not None:
                timings.embed = embed_ms
            if not second_stage:
                return hits
            t1 = time.perf_counter()
            hits = rerank_hits(
                conn,
                hits,
                query=request.query,
                query_vector=pending.result(),
                reranker=reranker,
                depth=depth,
                top_k=top_k,
                mmr_lambda=mmr_lambda,
            )
        if timings is not None:
            timings.rerank = (time.perf_counter() - t1) * 1e3
        return hits

    def reranker(self, spec: str | None = None) -> Reranker | None:
        """The reranker named by ``spec`` (a request's), else by the ``reranker`` setting; None for none.

        Loaded once per spec. An unknown spec is an :class:`InvalidRequestError` when a request gave it
        and a :class:`ConfigError` when the settings did.
        """
        name = spec if spec is not None else self.settings.reranker
        if name not in self._rerankers:
            with self._lock:
                if name not in self._rerankers:
                    try:
                        self._rerankers[name] = get_reranker(name, embedder=self.embedder)
                    except ConfigError as exc:
                        if spec is None:
                            raise
                        raise InvalidRequestError(f"rerank: {exc}") from exc
        return self._rerankers[name]

    def fetch(
        self, chunk_ids: Sequence[int], query: str | None = None, *, access: Access = FULL_ACCESS
    ) -> list[Hit]:
        """Chunks by id, in the order given (inactive, unknown or out-of-grant ids are skipped).

        With ``query``, each hit carries its cosine distance to the query.
        """
        vector = self.embedder.embed([query])[0] if query else None
        with self.engine.connect() as conn:
            return fetch_hits(conn, chunk_ids, vector, access=access)

    # -- answers ----------------------------------------------------------------------------------

    def chat(
        self,
        conversation_id: str | uuid.UUID | None = None,
        *,
        access: Access = FULL_ACCESS,
        persona: str | None = None,
    ) -> ChatSession:
        """A conversation to ask questions in: a new one, or ``conversation_id`` of ``access.user_id``.

        ``persona`` (general, clinical, repair) applies to a new conversation; one being resumed keeps
        its own. Each :meth:`ChatSession.ask` streams the answer's events and stores the turn; its
        searches stay within ``access``.
        """
        if conversation_id is None:
            return ChatSession.start(self, llm=self.llm, access=access, persona=persona)
        return ChatSession.resume(self, conversation_id, llm=self.llm, access=access)

    # -- catalog --------------------------------------------------------------------------------

    def documents(self, *, access: Access = FULL_ACCESS) -> list[DocumentInfo]:
        """Every document version in the catalog that ``access`` sees."""
        with self.engine.connect() as conn:
            return catalog.list_documents(conn, access=access)

    def document(self, ref: str, *, access: Access = FULL_ACCESS) -> DocumentInfo:
        """A document by id or unambiguous id prefix; one outside ``access`` is not found."""
        with self.engine.connect() as conn:
            try:
                doc = catalog.get_document(conn, uuid.UUID(ref))
            except ValueError:
                matches = [d for d in catalog.find_documents(conn, ref) if access.sees(d.scopes)]
            else:
                if not access.sees(doc.scopes):
                    raise NotFoundError(f"no document with id {ref!r}")
                return doc
        if not matches:
            raise NotFoundError(f"no document with id {ref!r}")
        if len(matches) > 1:
            raise InvalidRequestError(f"id prefix {ref!r} matches {len(matches)} documents; give more of it")
        return matches[0]

    def delete(self, ref: str, *, access: Access = FULL_ACCESS) -> list[DocumentInfo]:
        """Delete a document (every version of its source) with its chunks, vectors, postings and files."""
        doc = self.document(ref, access=access)
        _require_admin(access, f"delete document {ref}")
        with self.engine.begin() as conn:
            removed = catalog.delete_document(conn, doc.id)
        remove_unused_files(self.engine, {Path(d.file_path) for d in removed if d.file_path})
        return removed

    def chunks(self, document: DocumentInfo, *, access: Access = FULL_ACCESS) -> Sequence[dict[str, Any]]:
        """The chunks of one version, in order (for ``docs show``)."""
        if not access.sees(document.scopes):
            raise NotFoundError(f"no document with id {document.id}")
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT id, chunk_index, page, start_offset, end_offset, section, text FROM chunks "
                    "WHERE document_id = :id ORDER BY chunk_index"
                ),
                {"id": document.version_id},
            )
            return [dict(r._mapping) for r in rows]

    def stats(self, *, access: Access = FULL_ACCESS) -> dict[str, Any]:
        """Counts over the namespace, as far as ``access`` sees it."""
        with self.engine.connect() as conn:
            out = catalog.stats(conn, access=access)
        out["namespace"] = self.settings.namespace
        out["embedding_model"] = self.settings.embedding_model
        out["mode"] = "external" if self.settings.database_url else "embedded"
        return out


def _require_admin(access: Access, action: str) -> None:
    if not access.is_admin:
        raise AccessDeniedError(f"{action}: needs an admin key (this key is a {access.role.value})")
