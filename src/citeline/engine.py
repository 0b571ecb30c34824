"""``Citeline``: the library's front door. Every shell (CLI, and later API and workers) goes through it."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import psutil
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.access import FULL_ACCESS, Access, Role
from citeline.answer.llm import LLM, get_llm
from citeline.answer.nli import default_judge
from citeline.chat import store as chat_store
from citeline.chat.session import ChatSession
from citeline.chat.store import ConversationInfo, MessageInfo
from citeline.checks import refuse_nul
from citeline.embed import EMBEDDERS, get_embedder
from citeline.embed.base import Embedder, QueryEmbedder
from citeline.errors import (
    AccessDeniedError,
    CitelineError,
    ClosedError,
    ConfigError,
    ConflictError,
    InvalidRequestError,
    ModelMismatchError,
    NotFoundError,
    StoreError,
)
from citeline.eval.migration import CheckResult, Space, gold_check, load_gold, overlap_check
from citeline.ingest import (
    IngestOptions,
    Ingestor,
    IngestResult,
    Outcome,
    ProgressCallback,
    RetryPolicy,
    discover,
    file_source,
    one_or_many,
    remove_unused_files,
    settle_abandoned,
    url_name,
)
from citeline.jobs.runner import JobRunner, ThreadRunner
from citeline.jobs.submit import (
    Refreshed,
    Submission,
    Upload,
    keyed_source,
    origin_path,
    reingest_request,
    settle_spare,
    store_upload,
    submit,
    submit_url,
)
from citeline.metrics import CatalogCollector, CatalogCounts, exposition, metrics
from citeline.retrieve.query import QueryVectors, WaitedEmbedder
from citeline.retrieve.rerank import Reranker, get_reranker, rerank_hits
from citeline.retrieve.search import (
    CatalogCache,
    Explain,
    Hit,
    SearchRequest,
    Timings,
    fetch_hits,
    hybrid_search,
    resolve_top_k,
)
from citeline.settings import Settings, load_settings
from citeline.split import rebuild_page_text
from citeline.store import catalog, keys, model_migration
from citeline.store.analyzer import Analyzer
from citeline.store.bulk import PreparedDocument, load_prepared
from citeline.store.catalog import BuildPage, DocumentInfo, DocumentPage, DocumentQuery
from citeline.store.database import connect, namespaces_in, server_url
from citeline.store.index import Repair, VectorIndex, open_index
from citeline.store.keys import KeyInfo
from citeline.store.keyword import KeywordIndex, MemoryKeywordIndex, SqlKeywordIndex
from citeline.store.keyword_files import snapshot_root
from citeline.store.model_migration import MigrationInfo, MigrationStatus
from citeline.store.models import Status
from citeline.store.prewarm import prewarm, search_files
from citeline.store.server import embedded_exists

log = logging.getLogger(__name__)

#: Statuses of a version whose job has not ended.
_UNFINISHED = ("pending", "queued", "processing")

#: Seconds a stored original may go unreferenced before cleaning up removes it: an upload is stored
#: before its version is registered.
_UPLOAD_GRACE = 3600.0

#: Seconds :meth:`Citeline.close` lets running searches finish before it closes what they use.
_CLOSE_WAIT = 60.0

#: Settings a derived instance may change while sharing the parent's database connection pool.
_STORE_SETTINGS = ("data_dir", "database_url", "namespace")
#: ... and its vector index.
_INDEX_SETTINGS = (
    *_STORE_SETTINGS,
    "vector_backend",
    "chroma_url",
    "chroma_api_key",
    "chroma_tenant",
    "chroma_database",
    "hnsw_ef_search",
    "exact_search_below",
    "hnsw_tuple_cost",
    "hnsw_post_filter_max",
    "memory_vectors_mb",
)
#: ... and its embedder.
_EMBEDDER_SETTINGS = ("embedding_model", "embed_batch_size", "embed_threads")
#: ... and its query vectors (with their cache).
_QUERY_SETTINGS = ("query_threads", "query_cache_size")
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

    def __init__(self, settings: Settings | None = None, *, create: bool = True) -> None:
        """``create`` False: opening the store raises :class:`NotFoundError` (naming the namespaces the
        database holds) rather than create the namespace when the database has none of that name, for
        what only reads one: a mistyped namespace must not answer from a new, empty one."""
        self._settings = settings or load_settings()
        self._create = create
        self.analyzer = Analyzer.from_settings(self._settings)
        self._lock = threading.RLock()
        #: Set by :meth:`close`: nothing is opened again (see :meth:`_open`).
        self._closed = False
        #: Searches running, which :meth:`close` lets finish before it closes what they use.
        self._searching = 0
        self._searches_done = threading.Condition(self._lock)
        self._engine: sa.Engine | None = None
        self._embedder: Embedder | None = None
        self._vector_index: VectorIndex | None = None
        #: The start-up repair waits for a vector index that was out of reach (see :meth:`warm_up`).
        self._repair_pending = False
        self._llm: LLM | None = None
        self._rerankers: dict[tuple[str, str], Reranker | None] = {}
        #: The model the namespace serves, as last read (see :meth:`served_model`).
        self._served: str | None = None
        #: The running migration's status and when it was read (see :meth:`migration`).
        self._migration_seen: tuple[float, MigrationStatus | None] = (-1.0, None)
        self._query_pool: ThreadPoolExecutor | None = None
        #: Runs a search's keyword stage beside its dense stage (one thread: the index's lock lets one
        #: search score at a time anyway).
        self._keyword_pool: ThreadPoolExecutor | None = None
        self._query_vectors: QueryVectors | None = None
        #: Searches skip reading the documents while the catalog stays put.
        self._catalog_cache = CatalogCache()
        self._jobs: JobRunner | None = None
        self._key_cache = keys.KeyCache(self._settings.api_key_cache_seconds)
        #: The catalog's counts for :meth:`metrics`, read at most every few seconds.
        self._catalog_metrics = CatalogCollector(self.metric_counts)
        #: Parts borrowed from the instance this one was derived from: never closed by this one.
        self._borrowed: set[str] = set()
        self.keyword_index: KeywordIndex = (
            MemoryKeywordIndex(
                snapshot_root(
                    self._settings.data_dir,
                    self._settings.database_url or "embedded",
                    self._settings.namespace,
                )
            )
            if self._settings.keyword_index == "memory"
            else SqlKeywordIndex()
        )

    @property
    def settings(self) -> Settings:
        """The settings this instance was built with (read-only: see :meth:`derive`)."""
        return self._settings

    def derive(self, settings: Settings | None = None, /, **overrides: Any) -> Citeline:
        """Another instance with ``settings`` (or these settings changed), sharing this one's open
        store, embedder and keyword index where the settings they depend on are unchanged. Close it
        before this one.

        ``overrides`` are checked as :func:`load_settings` checks its own: an invalid value or a name
        that is no setting is a :class:`ConfigError`. The other settings stay this instance's, whatever the
        environment says now."""
        self._open()
        settings = settings or self._settings
        if overrides:
            # Not model_copy(update=...), which checks nothing: top_k="ten" failed the first search.
            settings = Settings.model_validate({**dict(settings), **overrides})
        other = Citeline(settings, create=self._create)

        def same(names: tuple[str, ...]) -> bool:
            return all(getattr(settings, n) == getattr(self._settings, n) for n in names)

        if same(_STORE_SETTINGS) and self._engine is not None:
            other._engine = self._engine
            other._borrowed.add("engine")
        if same(_EMBEDDER_SETTINGS) and self._embedder is not None and same(self._embedder_reads()):
            other._embedder = self._embedder
        if same(_INDEX_SETTINGS) and self._vector_index is not None:
            other._vector_index = self._vector_index
            other._borrowed.add("vector_index")
        if same(_STORE_SETTINGS) and same(_KEYWORD_SETTINGS):
            other.keyword_index = self.keyword_index
        if same(_STORE_SETTINGS):
            other._catalog_cache = self._catalog_cache
        if same(_QUERY_SETTINGS) and self._query_vectors is not None:
            other._query_vectors = self._query_vectors
        return other

    def _embedder_reads(self) -> tuple[str, ...]:
        """The settings besides :data:`_EMBEDDER_SETTINGS` that this instance's embedder was built from."""
        provider, _ = EMBEDDERS.parse(self._settings.embedding_model)
        return provider.settings

    def warm_up(self, *, search: bool = True) -> Citeline:
        """Open the store, load the embedder's query session (which answers embed their sentences on too),
        the keyword index, the vectors that searches compare in the process (if they fit
        ``memory_vectors_mb``) and the claim judge now rather than at the first request, and repair what a
        crash left between the catalog and the vector index.

        ``search`` False loads only what building documents needs (the store, the embedder's ingest
        session, the repaired vector index): a job worker never searches, and the query session, keyword
        index, vectors and judge would cost it memory. A process that searches never opens the ingest
        session unless it also builds documents.

        A vector index out of reach (a Chroma server not up yet: an orchestrator starts services in any
        order) does not stop the warm-up: :meth:`readiness` reports it, and runs the repair once it answers.
        """
        if search:
            self.check()
        try:
            self.repair_vectors()
        except StoreError as exc:
            if self.vector_index.problem() is None:
                raise  # the database, or a vector index that answers and failed all the same
            log.warning("%s; not ready until it answers, then the vector index is repaired", exc)
            self._repair_pending = True
        if not search:
            self.prepare_ingest()
            return self
        # Embedding one text opens the query session (see CITELINE_QUERY_THREADS).
        self.query_vectors.embed(self.query_embedder, "warm up")
        # One snapshot of the catalog, as a search reads it: the log position, the versions and their
        # postings then agree even while other processes ingest.
        with self.engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn:
            self.keyword_index.warm_up(conn, documents=self._settings.weight_document > 0)
            self.vector_index.warm_up(conn, self.embedder.model_id, self.embedder.dimension)
        default_judge().load()
        self.prewarm()
        return self

    def check(self) -> None:
        """Raise :class:`ConfigError` now for a setting whose resources a search or an answer would find
        missing later: the reranker's model (loaded here, as the first search would load it) and the
        answering model's provider and files (found, not loaded). A server calls it (through
        :meth:`warm_up`) so that it refuses to start rather than report ready and fail every search."""
        self.reranker()
        _ = self.llm

    def prepare_ingest(self) -> None:
        """Load what building documents needs now rather than in the first one: a local embedder's ingest
        session (a remote embedder is not called)."""
        embedder = self.embedder
        if isinstance(embedder, QueryEmbedder):
            embedder.embed(["warm up"])

    def prewarm(self) -> int:
        """Read what every search reads (the model's HNSW index, then the chunk rows) into the page
        cache, within ``prewarm_mb`` (by default half of the memory available); returns the bytes read.
        Nothing when the database's files are not on this machine (see store/prewarm.py)."""
        budget_mb = self._settings.prewarm_mb
        budget = psutil.virtual_memory().available // 2 if budget_mb is None else budget_mb << 20
        if not budget:
            return 0
        with self.engine.connect() as conn:
            files = search_files(conn, self.embedder.model_id)
        started = time.perf_counter()
        read = prewarm(files, budget)
        if read:
            log.info(
                "read %d MB of %d MB that searches read into the page cache in %.1f s",
                read >> 20,
                sum(f.size for f in files) >> 20,
                time.perf_counter() - started,
            )
        return read

    @property
    def vector_index(self) -> VectorIndex:
        """The vector index of the ``vector_backend`` setting (pgvector, or Chroma)."""
        if self._vector_index is None:
            with self._lock:
                if self._vector_index is None:
                    self._open()
                    self._vector_index = open_index(self._settings)
        return self._vector_index

    def repair_vectors(self) -> Repair:
        """Make the vector index agree with the catalog after a crash between their writes: vectors whose
        chunk is gone are removed, active chunks without a vector are embedded again (by the model the
        namespace serves) and added."""
        # The served model, not the configured one: they differ while a migration runs, and after a
        # switch until the configuration follows; the chunks to restore are in the served space.
        model = self.served_model()

        def embed(texts: list[str]) -> NDArray[np.float32]:
            # Loaded only when a vector is missing.
            return self.embedder_for(model).embed(texts)

        with self.engine.connect() as conn:
            report = self.vector_index.repair(conn, model, embed)
        if report.removed or report.restored or report.unrestorable:
            log.warning(
                "vector index %s repaired: %d vectors without a chunk removed, %d missing vectors restored, "
                "%d could not be restored (another embedding model: re-ingest those documents)",
                self.vector_index.name,
                report.removed,
                report.restored,
                report.unrestorable,
            )
        return report

    def remove_vectors(self, version_ids: Sequence[uuid.UUID]) -> None:
        """Remove from the vector index the vectors of versions whose deletion the catalog committed.

        Only after the commit: a crash before it leaves vectors without chunks, which
        :meth:`repair_vectors` removes, never a searchable chunk without its vector."""
        if version_ids and not self.vector_index.in_rows:
            with self.engine.connect() as conn:
                self.vector_index.remove(conn, version_ids)

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._open()
                    self._engine = self._open_store()
        return self._engine

    def _open_store(self) -> sa.Engine:
        if not self._create:
            _require_store(self._settings)
            # The default namespace is nobody's typo: in a store made for another, reading it finds it empty.
            if self._settings.namespace != Settings.model_fields["namespace"].default:
                _require_namespace(self._settings)
        engine = connect(self._settings)
        try:
            with engine.begin() as conn:
                catalog.bind_analyzer(conn, self.analyzer.config(), Analyzer().config())
                # A process that starts after a crash finds what the crash left processing requeued
                # (jobs with retries left) or failed.
                abandoned = catalog.fail_abandoned(
                    conn, retries=self._settings.job_retries, retry_delay=self._settings.job_retry_delay
                )
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
                    self._open()
                    self._embedder = get_embedder(self._settings.embedding_model, self._settings)
        return self._embedder

    def embedder_for(self, model: str) -> Embedder:
        """The embedder of ``model`` (``provider:model``), loaded once per process."""
        if model == self.settings.embedding_model:
            return self.embedder
        return get_embedder(model, self._settings)

    def served_model(self, *, refresh: bool = False) -> str:
        """The embedding model the namespace serves, which queries are embedded by: the catalog's
        (it changes only when a migration switches), or the configured one for a namespace that has
        indexed nothing yet. Read once, again with ``refresh``."""
        if self._served is None or refresh:
            with self.engine.connect() as conn:
                self._served = catalog.served_model(conn) or self.settings.embedding_model
        return self._served

    @property
    def query_embedder(self) -> Embedder:
        """The embedder of the served model (see :meth:`served_model`)."""
        return self.embedder_for(self.served_model())

    @property
    def query_vectors(self) -> QueryVectors:
        """Search queries' vectors: embedded with ``query_threads`` cores, the recent ones cached."""
        if self._query_vectors is None:
            with self._lock:
                if self._query_vectors is None:
                    self._query_vectors = QueryVectors(
                        threads=self._settings.query_threads, cache_size=self._settings.query_cache_size
                    )
        return self._query_vectors

    @property
    def answer_embedder(self) -> Embedder:
        """What answers embed their sentences with (to focus evidence, check citations, pick extractive
        sentences): the served model, on the session queries use (retrieve.query.WaitedEmbedder), so a
        process that searches and answers never opens the ingest session."""
        return WaitedEmbedder(self.query_embedder, self._settings.query_threads)

    def query_vector(self, text: str) -> NDArray[np.float32]:
        """The vector of ``text`` as a search query of the served model: the one a recent search embedded
        (a conversation's turn searches first, then scores the chunks it cited before against the same
        query), else embedded now on the query session and remembered."""
        embedder, vectors = self.query_embedder, self.query_vectors
        cached = vectors.cached(embedder, text)
        return cached if cached is not None else vectors.embed(embedder, text)

    @property
    def files_dir(self) -> Path:
        return self._settings.files_dir

    @property
    def llm(self) -> LLM | None:
        """The answering model named by the ``llm`` setting; ``None`` for ``extractive`` (no model)."""
        if self._settings.llm == "extractive":
            return None
        if self._llm is None:
            with self._lock:
                if self._llm is None:
                    self._open()
                    self._llm = get_llm(self._settings.llm, self._settings)
        return self._llm

    def _open(self) -> None:
        """Raise :class:`ClosedError` once :meth:`close` has begun: a part opened after it would never
        be closed (a search after close used to reopen the database and thread pools)."""
        if self._closed:
            raise ClosedError(
                "this Citeline is closed: it opens nothing again; make another Citeline to go on"
            )

    def close(self) -> None:
        """Close what this instance opened (not what it borrowed, see :meth:`derive`). Searches
        running let finish first (for up to a minute), later calls raise :class:`ClosedError`;
        closing again does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # A search between its start and its end uses the thread pools and the engine: closing
            # them under it failed it with a bare RuntimeError ('cannot schedule new futures').
            self._searches_done.wait_for(lambda: self._searching == 0, timeout=_CLOSE_WAIT)
            jobs, self._jobs = self._jobs, None
        if jobs is not None:
            # Stopped outside the lock: a job thread that reaches for the embedder or the engine takes
            # it, and would wait out the stop's timeout, then run on against a disposed engine.
            jobs.stop()
        self._key_cache.close()
        with self._lock:
            if self._query_pool is not None:
                self._query_pool.shutdown(wait=True)
                self._query_pool = None
            if self._keyword_pool is not None:
                self._keyword_pool.shutdown(wait=True)
                self._keyword_pool = None
            if self._llm is not None:
                self._llm.close()
                self._llm = None
            if self._engine is not None and "engine" not in self._borrowed:
                self._engine.dispose()
            self._engine = None
            if self._vector_index is not None and "vector_index" not in self._borrowed:
                self._vector_index.close()
            self._vector_index = None

    def __enter__(self) -> Citeline:
        self._open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- ingest ---------------------------------------------------------------------------------

    def ingest(
        self,
        paths: str | Path | Iterable[str | Path],
        options: IngestOptions | None = None,
        *,
        progress: ProgressCallback | None = None,
        allow_private_urls: bool | None = None,
        access: Access = FULL_ACCESS,
    ) -> list[IngestResult]:
        """Ingest files, folders (recursively) and URLs; one result per source, failures included.

        ``paths`` is a list of them, or one (a ``str`` or ``Path`` is one source, not its letters).

        URLs on loopback, private and link-local addresses are fetched if ``allow_private_urls`` is
        true, refused if false, and unset as the ``url_allow_private`` setting says (as for jobs).

        Each version records who sent it (``uploaded_by``): the options' uploader, else the caller's
        user id, as :meth:`submit` records it. While a model migration runs, each new version's twin
        (embedded by the target model) is built here too, and reported as ``staged``.
        """
        paths = one_or_many(paths)
        # A path the operating system cannot even name is the caller's mistake, not a source that failed.
        refuse_nul([str(path) for path in paths], "paths", surrogates=False)
        _require_admin(access, "ingest documents")
        ingestor = self.ingestor(allow_private_urls=allow_private_urls)
        results = ingestor.ingest_paths(discover(paths), _uploaded_by(options, access), progress)
        documents = [r.document.id for r in results if r.document is not None and r.chunks]
        if documents and self.migration(max_age=0.0) is not None:
            with self.engine.connect() as conn:
                twins = [
                    v.version_id
                    for doc in set(documents)
                    for v in catalog.versions(conn, doc)
                    if v.status == Status.QUEUED
                ]
            if twins:
                results += ingestor.run_jobs(limit=len(twins), version_ids=twins, progress=progress)
        return results

    def load_prepared(
        self, documents: Sequence[PreparedDocument], *, model: str | None = None, build_index: bool = True
    ) -> list[DocumentInfo]:
        """Store documents chunked and embedded elsewhere (their vectors given, by ``model``, default
        the served model) as ingest stores them, and swap them in; returns the versions swapped in.

        For corpora already embedded by another system, or too large to embed here in time. With
        ``build_index`` false the ANN index is left to :meth:`build_vector_index`, one build after
        many loads (see :func:`citeline.store.bulk.load_prepared`).
        """
        refuse_nul(documents, "documents", surrogates=False)
        return load_prepared(
            self.engine,
            self.vector_index,
            self.analyzer,
            documents,
            model=model or self.served_model(),
            chunk_size=self.settings.chunk_size,
            chunk_overlap=self.settings.chunk_overlap,
            build_index=build_index,
        )

    def build_vector_index(self, model: str, dimension: int) -> None:
        """Build ``model``'s ANN index now if it does not exist (ingest builds it on first use)."""
        with self.engine.begin() as conn:
            self.vector_index.prepare(conn, model, dimension)

    # -- documents as jobs ------------------------------------------------------------------------

    @property
    def jobs(self) -> JobRunner:
        """The runner of the ``job_runner`` setting (started by :meth:`start_jobs`): a thread pool that
        builds queued documents in this process, or the sender of queued documents to Celery workers."""
        if self._jobs is None:
            with self._lock:
                if self._jobs is None:
                    self._open()
                    self._jobs = self._runner()
        return self._jobs

    def _runner(self) -> JobRunner:
        if self.settings.job_runner == "celery":
            from citeline.jobs.celery import CeleryRunner  # Celery is loaded only by those who use it

            return CeleryRunner(self.settings)
        return ThreadRunner(
            self.engine,
            self.ingestor,
            self.settings,
        )

    def start_jobs(self) -> JobRunner:
        """Start building queued documents in this process: those queued now, and those to come."""
        runner = self.jobs
        runner.start()
        return runner

    def submit(
        self,
        upload: Upload,
        options: IngestOptions | None = None,
        *,
        access: Access = FULL_ACCESS,
        document_id: str | uuid.UUID | None = None,
        source: str | None = None,
        index: bool = True,
    ) -> Submission:
        """Store an uploaded original and register its version for the job runner; answers at once.

        ``document_id`` replaces that document: a new version is built and swapped in atomically while
        readers keep the old one. ``source`` is a key the caller chose and keeps for the file (its path
        in a folder kept in sync, say): the first upload under it makes a document, the next ones are
        versions of that document (bytes, model and chunking unchanged: ``unchanged``), so the caller
        needs no map of files to ids. With ``document_id`` too, both must name the same document (or
        the key none yet: the document takes it). Uploaded either way, a document has no origin to
        refresh from; re-ingesting builds its stored original. ``index`` False registers the document
        ``pending`` (see :meth:`index`). Each version takes the upload's file name; labels left out
        keep the document's, chunking left out is the configured default.
        """
        _require_admin(access, f"upload {upload.name}")
        target = self._document_id(document_id, access) if document_id is not None else None
        # Only an admin uploads, and an admin sees every document: a key held by any document is its.
        source_uri = None if source is None else keyed_source(source)
        path, content, spare = store_upload(upload, self.files_dir, max_bytes=self.settings.upload_max_bytes)
        try:
            return self._register(
                name=Path(upload.name).name,
                source_uri=source_uri,
                content_hash=content,
                file_path=path,
                options=_uploaded_by(options, access),
                document_id=target,
                index=index,
            )
        finally:
            settle_spare(path, spare)
            remove_unused_files(self.engine, [path])

    def submit_url(
        self,
        url: str,
        options: IngestOptions | None = None,
        *,
        access: Access = FULL_ACCESS,
        document_id: str | uuid.UUID | None = None,
        index: bool = True,
    ) -> Submission:
        """Register a web page for the job runner, which fetches it (the private-address guard applies)."""
        _require_admin(access, f"add {url}")
        target = self._document_id(document_id, access) if document_id is not None else None
        # The page's content is known once its job fetches it: the job compares it then.
        return self._register(
            name=url_name(submit_url(url)),
            source_uri=url,
            content_hash=None,
            file_path=None,
            options=_uploaded_by(options, access),
            document_id=target,
            index=index,
        )

    def reingest(self, ref: str | uuid.UUID, *, access: Access = FULL_ACCESS) -> Submission:
        """Build a new version of a document from its stored original (or URL), with the current model."""
        _require_admin(access, f"re-ingest document {ref}")
        doc = self.document(str(ref), access=access)
        path, content = reingest_request(doc)
        return self._register(
            name=doc.name,
            source_uri=doc.source_uri,
            content_hash=content,
            file_path=path,
            options=IngestOptions(chunk_size=doc.chunk_size, chunk_overlap=doc.chunk_overlap),
            document_id=doc.id,
            force=True,
        )

    def reingest_candidates(
        self, *, status: str = "completed", document_ids: str | Sequence[str] = ()
    ) -> list[DocumentInfo]:
        """What ``citeline reingest`` rebuilds: the named documents (one id is one, as a str), else every
        document whose current version (the active one, else the newest) has ``status``; by name."""
        if document_ids:
            return [self.document(str(ref)) for ref in one_or_many(document_ids)]
        # The catalog's listing already shows each document once, as its current version.
        return self.list_documents(DocumentQuery(status=status, limit=None)).documents

    def refresh_candidates(
        self, *, older_than: timedelta | None = None, document_ids: str | Sequence[str] = ()
    ) -> list[DocumentInfo]:
        """What ``citeline refresh`` reads again: the named documents (one id is one, as a str), else
        every document with a live version whose source has an origin to read (a web page, or a file
        still at its path), last read more than ``older_than`` ago (any time, when None); by name."""
        if document_ids:
            return [self.document(str(ref)) for ref in one_or_many(document_ids)]
        cutoff = None
        if older_than is not None:
            try:
                cutoff = datetime.now(UTC) - older_than
            except OverflowError:
                # Older than the calendar reaches back: no document was read that long ago.
                return []
        found = self.list_documents(DocumentQuery(status=Status.COMPLETED, limit=None)).documents
        return [
            doc
            for doc in found
            if self.refresh_problem(doc) is None
            and (cutoff is None or (doc.last_fetched_at or doc.created_at) < cutoff)
        ]

    def refresh_problem(self, doc: DocumentInfo) -> str | None:
        """Why :meth:`refresh` would refuse ``doc``, or None when it has an origin to read (a web page, or
        a file still at its path): what a dry run says of a document it was named, instead of "would
        refresh", and what :meth:`refresh_candidates` and :meth:`refresh` decide by."""
        if doc.source_uri.startswith(("http://", "https://")):
            return None
        path = origin_path(doc)
        if path is None:
            return "it was uploaded: it has no origin to read again; upload its new version instead"
        if not path.is_file():
            return f"its original {path} is no longer there"
        return None

    def refresh(self, ref: str | uuid.UUID, *, access: Access = FULL_ACCESS) -> Submission:
        """Read a document's source again at its origin; a new version only if its content changed.

        A file is read (and hashed) here: unchanged, it is a no-op that records the read; changed, its
        new original is stored and queued like an upload. A web page is queued for the job runner,
        whose job fetches it and builds a new version only if its extracted text changed. Either way
        the current version stays live until a new one replaces it, and a failure keeps it.
        """
        _require_admin(access, f"refresh document {ref}")
        doc = self.document(str(ref), access=access)
        options = IngestOptions(chunk_size=doc.chunk_size, chunk_overlap=doc.chunk_overlap)
        common: dict[str, Any] = {"name": doc.name, "source_uri": doc.source_uri, "document_id": doc.id}
        problem = self.refresh_problem(doc)
        path = origin_path(doc)
        if problem is not None:
            # Uploaded: the request cannot be met; a file no longer at its path: not found.
            refused = InvalidRequestError if path is None else NotFoundError
            raise refused(f"document {doc.id} ({doc.name}): {problem}")
        if path is None:  # a web page
            return self._register(content_hash=None, file_path=None, options=options, **common)
        source = file_source(str(path), self.files_dir)
        assert source.stored_file is not None
        try:
            return self._register(
                content_hash=source.content_hash,
                file_path=source.stored_file,
                options=options,
                fetched_at=source.fetched_at,
                **common,
            )
        finally:
            remove_unused_files(self.engine, [source.stored_file])

    def refreshed(self, submission: Submission, *, timeout: float = 60.0) -> Refreshed:
        """What became of a :meth:`refresh`: waits (up to ``timeout`` seconds) for its job, if any."""
        doc = submission.document
        if not submission.created:
            return Refreshed(doc, submission.outcome)
        current = self.wait(doc.id, timeout=timeout)
        with self.engine.connect() as conn:
            versions = {v.version_id: v for v in catalog.versions(conn, doc.id)}
        mine = versions.get(doc.version_id)
        if mine is None:  # the job found the page unchanged and dropped its version
            return Refreshed(current, Outcome.UNCHANGED)
        if mine.is_active:
            return Refreshed(mine, Outcome.UPDATED)
        if mine.status == Status.FAILED:
            return Refreshed(current, Outcome.FAILED, mine.error)
        return Refreshed(current, Status(mine.status))

    def unused_files(self, *, older_than: float = _UPLOAD_GRACE) -> list[Path]:
        """Stored originals of this namespace that no version refers to, untouched for ``older_than``
        seconds (a younger one may be an upload whose version is being registered)."""
        if not self.files_dir.is_dir():
            return []
        cutoff = time.time() - older_than
        with self.engine.connect() as conn:
            in_use = catalog.files_in_use(conn)
        return [
            path
            for path in sorted(p for p in self.files_dir.rglob("*") if p.is_file())
            if path.stat().st_mtime < cutoff and str(path) not in in_use
        ]

    def remove_unused_files(self, *, older_than: float = _UPLOAD_GRACE) -> list[Path]:
        """Delete what :meth:`unused_files` finds; the files deleted."""
        removed = self.unused_files(older_than=older_than)
        remove_unused_files(self.engine, removed)
        return [p for p in removed if not p.exists()]

    def index(self, ref: str | uuid.UUID, *, access: Access = FULL_ACCESS) -> DocumentInfo:
        """Queue a ``pending`` document (registered without being asked to index). One already queued or
        building is left as it is; :class:`ConflictError` for one with nothing to build (to build a
        completed or failed document again, :meth:`reingest` it), as :meth:`cancel` refuses one with
        nothing to cancel: it did nothing and answered as if it had. Its message says what would
        build it: a re-ingest, or for one that keeps nothing to build from, another upload."""
        _require_admin(access, f"index document {ref}")
        doc = self.document(str(ref), access=access)
        with self.engine.begin() as conn:
            versions = catalog.versions(conn, doc.id)
            pending = [v.version_id for v in versions if v.status == "pending"]
            if not pending and not any(v.status in _UNFINISHED for v in versions):
                advice = (
                    "re-ingest it to build it again"
                    if doc.reingestable
                    else "it keeps no stored original to build it again from; upload it again"
                )
                raise ConflictError(
                    f"document {doc.id} has no pending version to queue ({doc.status}); {advice}"
                )
            queued = catalog.enqueue(conn, pending)
            current = catalog.get_document(conn, doc.id)
        self.jobs.notify([v.version_id for v in queued])
        return current

    def index_all(self, status: str, *, access: Access = FULL_ACCESS) -> list[DocumentInfo]:
        """Index every document whose current version is in ``status``: ``pending`` ones are queued,
        ``completed`` or ``failed`` ones re-ingested from their stored originals. Returns each document
        as it is afterwards; one that cannot be re-ingested (no stored original) keeps its status.
        Another status is refused: ``superseded`` matched old versions and re-ingested documents whose
        current version was built, ``queued`` or ``processing`` queued builds already under way again."""
        _require_admin(access, f"index every {status} document")
        if status not in _INDEXABLE:
            raise InvalidRequestError(
                f"index_all takes status {', '.join(_INDEXABLE)}, not {str(status)!r}: pending documents "
                "are queued, completed and failed ones re-ingested"
            )
        chosen = [d for d in self.documents(access=access) if d.status == status]
        out: list[DocumentInfo] = []
        for doc in {d.id: d for d in chosen}.values():
            if status == Status.PENDING:
                try:
                    out.append(self.index(doc.id, access=access))
                except ConflictError:  # built or failed since it was listed
                    out.append(self.document(str(doc.id), access=access))
                continue
            try:
                out.append(self.reingest(doc.id, access=access).document)
            except ConflictError:  # nothing to build it from
                out.append(doc)
        return out

    def cancel(self, ref: str | uuid.UUID, *, access: Access = FULL_ACCESS) -> DocumentInfo:
        """Cancel a document's pending, queued or running job (:class:`ConflictError` if it has none).

        A job not yet started fails at once and keeps no original: its stored file goes unless another
        version (of any document: originals are stored by their hash) holds the same bytes, and so does
        the one an earlier failure it replaces kept. A running job's run removes it when it stops."""
        _require_admin(access, f"cancel document {ref}")
        doc = self.document(str(ref), access=access)
        with self.engine.begin() as conn:
            building = [v for v in catalog.versions(conn, doc.id) if v.status in _UNFINISHED]
            if not building:
                raise ConflictError(
                    f"document {doc.id} has no pending, queued or processing job to cancel ({doc.status})"
                )
            held = catalog.version_files(conn, [doc.source_uri])
            cancelled = catalog.cancel(conn, building[-1])
        if cancelled.status == Status.FAILED:
            remove_unused_files(self.engine, {Path(f) for f in held})
        return cancelled

    def relabel(
        self, ref: str | uuid.UUID, labels: IngestOptions, *, access: Access = FULL_ACCESS
    ) -> DocumentInfo:
        """Change a document's scopes, category, tags or metadata without re-embedding it."""
        _require_admin(access, f"relabel document {ref}")
        if labels.chunk_size is not None or labels.chunk_overlap is not None:
            raise InvalidRequestError("chunking changes need a re-ingest, not a relabel")
        doc = self.document(str(ref), access=access)
        with self.engine.begin() as conn:
            relabelled = catalog.relabel(conn, doc.id, labels.labels())
        self._relabelled(relabelled)
        return relabelled

    def _relabelled(self, doc: DocumentInfo) -> None:
        """Tell the vector index that a document's labels changed (committed): Chroma files vectors by
        scopes. A crash before this leaves them filed under the old scopes, which repair moves."""
        with self.engine.connect() as conn:
            self.vector_index.relabelled(conn, [v.version_id for v in catalog.versions(conn, doc.id)])

    def versions(self, ref: str | uuid.UUID, *, access: Access = FULL_ACCESS) -> list[DocumentInfo]:
        """Every version of a document the catalog holds that ``access`` sees, oldest first."""
        doc = self.document(str(ref), access=access)
        with self.engine.connect() as conn:
            # Each version by its own labels, as :meth:`document` reads one.
            return [v for v in catalog.versions(conn, doc.id) if access.sees(v.scopes)]

    def wait(
        self, ref: str | uuid.UUID, *, timeout: float = 60.0, access: Access = FULL_ACCESS
    ) -> DocumentInfo:
        """The document once no version of it is pending, queued or processing (or after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            versions = self.versions(ref, access=access)
            if not any(v.status in _UNFINISHED for v in versions) or time.monotonic() >= deadline:
                # Read after the check: a version that finished between two reads is seen finished.
                return self.document(str(ref), access=access)
            time.sleep(0.05)

    def _document_id(self, ref: str | uuid.UUID, access: Access) -> uuid.UUID:
        return self.document(str(ref), access=access).id

    def _register(self, **fields: Any) -> Submission:
        """Register a version with this store (:func:`citeline.jobs.submit.submit`), embedded by the
        served model, and tell the runner what is queued (with its twin, while a migration runs)."""
        with self.engine.connect() as conn:
            model = catalog.ingest_model(conn, self.settings.embedding_model)
        submission = submit(self.engine, self.settings, model=model, **fields)
        if submission.outcome == Outcome.RELABELLED:
            self._relabelled(submission.document)
        if submission.outcome == Status.QUEUED:
            with self.engine.connect() as conn:
                queued = [
                    v.version_id
                    for v in catalog.versions(conn, submission.document.id)
                    if v.status == Status.QUEUED
                ]
            self.jobs.notify(queued)
        return submission

    def ingestor(
        self, *, allow_private_urls: bool | None = None, embedder: Embedder | None = None
    ) -> Ingestor:
        """An :class:`Ingestor` bound to this store and embedder, for sources built in memory.

        It fetches URLs on loopback, private and link-local addresses if ``allow_private_urls`` is true,
        refuses them if false, and unset as the ``url_allow_private`` setting says (a job's build, an
        ingest, a refresh alike).

        ``embedder`` embeds in place of the configured model's own (it must be that model: ``citeline
        eval`` passes one that takes the vectors another store already computed)."""
        if embedder is None:
            embedder, embedders = self.embedder, self.embedder_for
        else:
            given = embedder

            def embedders(model: str) -> Embedder:
                return given if model == given.model_id else self.embedder_for(model)

        return Ingestor(
            self.engine,
            embedder,
            self.analyzer,
            self.vector_index,
            files_dir=self.files_dir,
            chunk_size=self.settings.chunk_size,
            chunk_overlap=self.settings.chunk_overlap,
            allow_private_urls=(
                self.settings.url_allow_private if allow_private_urls is None else allow_private_urls
            ),
            retry=RetryPolicy(self.settings.job_retries, self.settings.job_retry_delay),
            embedders=embedders,
        )

    # -- changing the embedding model -----------------------------------------------------------

    def migration(self, *, max_age: float = 2.0) -> MigrationStatus | None:
        """The model migration under way with its progress, or None. Read again when the last read is
        older than ``max_age`` seconds: searches report it and should not each count documents."""
        seen, status = self._migration_seen
        now = time.monotonic()
        if max_age <= 0 or now - seen > max_age:
            with self.engine.connect() as conn:
                status = model_migration.status(conn)
            self._migration_seen = (now, status)
        return status

    def start_migration(
        self, *, document_ids: Sequence[uuid.UUID] = (), access: Access = FULL_ACCESS
    ) -> tuple[MigrationInfo, list[DocumentInfo]]:
        """Start moving the namespace to the configured model (or resume the migration to it): queue a
        twin embedded by it for each active document that has none staged or being built (only
        ``document_ids``, if given). Searches go on with the served model meanwhile. Returns the
        migration and the twins queued."""
        _require_admin(access, "change the embedding model")
        target = self.settings.embedding_model
        self.embedder  # noqa: B018  (a model that cannot be loaded fails here, not in every job)
        with self.engine.begin() as conn:
            migration = model_migration.start(conn, target)
            docs = model_migration.without_twin(conn, target)
            if document_ids:
                docs = [d for d in docs if d.id in set(document_ids)]
            queued = model_migration.queue_twins(
                conn, migration, docs, chunking=(self.settings.chunk_size, self.settings.chunk_overlap)
            )
        self._migration_seen = (-1.0, None)
        self.jobs.notify([d.version_id for d in queued])
        return migration, queued

    def migration_plan(
        self, *, document_ids: Sequence[uuid.UUID] = (), access: Access = FULL_ACCESS
    ) -> list[DocumentInfo]:
        """What :meth:`start_migration` would queue now, changing nothing (a dry run): the active
        documents (only ``document_ids``, if given) with no version embedded by the configured model
        staged or being built. Raises as :meth:`start_migration` would."""
        _require_admin(access, "change the embedding model")
        target = self.settings.embedding_model
        with self.engine.connect() as conn:
            model_migration.refuse_start(conn, target)
            docs = model_migration.without_twin(conn, target)
        return [d for d in docs if not document_ids or d.id in set(document_ids)]

    def migration_failures(self, *, access: Access = FULL_ACCESS) -> list[DocumentInfo]:
        """The documents whose version embedded by the migration's model failed, with the reason."""
        _require_admin(access, "list the embedding-model migration's failures")
        with self.engine.connect() as conn:
            migration = model_migration.running(conn)
            return model_migration.failures(conn, migration) if migration else []

    def check_migration(self, gold: Path | None = None, *, access: Access = FULL_ACCESS) -> CheckResult:
        """Run the quality check of the migration under way (:mod:`citeline.eval.migration`): with
        ``gold`` (a BEIR folder or a JSONL file of questions), nDCG@10 of old and new; without, the
        overlap of their top-10 on the namespace's own chunks. The result is kept with the migration.

        Raises :class:`ConflictError` when no migration runs, when some document's twin is not built
        yet, or when another process switched or aborted the migration while the check ran.
        """
        _require_admin(access, "check the embedding-model migration")
        return self._check_migration(gold)[1]

    def _check_migration(self, gold: Path | None) -> tuple[MigrationInfo, CheckResult]:
        questions = load_gold(gold) if gold is not None else None
        with self.engine.connect() as conn:
            status = model_migration.status(conn)
            if status is None:
                raise ConflictError("no embedding-model migration is under way (see citeline migrate)")
            migration, progress = status.migration, status.progress
            if progress.done < progress.total:
                raise ConflictError(
                    f"{progress.done} of {progress.total} documents are built with {migration.target_model} "
                    f"({progress.building} queued or being built, {progress.failed} failed); "
                    "check once all are"
                )
            active = [d for d in catalog.list_documents(conn) if d.is_active]
            staged = model_migration.staged_versions(conn, migration)
        old = Space(migration.source_model, self.embedder_for(migration.source_model), active)
        new = Space(migration.target_model, self.embedder_for(migration.target_model), staged)
        try:
            if questions is not None:
                result = gold_check(
                    self.engine, self.vector_index, old, new, questions, self.settings, source=str(gold)
                )
            else:
                result = overlap_check(self.engine, self.vector_index, old, new, self.settings)
        except InvalidRequestError:
            # A switch elsewhere deletes the old space under the check ("no chunk to sample"): say that.
            with self.engine.connect() as conn:
                model_migration.still_running(conn, migration)
            raise
        with self.engine.begin() as conn:
            model_migration.record_check(conn, migration, result.as_dict())
        return migration, result

    def switch_model(
        self, *, gold: Path | None = None, force: bool = False, access: Access = FULL_ACCESS
    ) -> tuple[CheckResult, bool]:
        """Check the migration under way and, if the check passes or ``force``, switch the namespace to
        the new model atomically: every document's staged twin becomes its visible version, and
        queries are embedded by the new model from the commit on. Returns the check's result and
        whether the switch happened."""
        _require_admin(access, "switch the embedding model")
        # The migration the check measured is the one switched: another process may end it meanwhile.
        migration, result = self._check_migration(gold)
        if not result.passed and not force:
            return result, False
        with self.engine.begin() as conn:
            retired = model_migration.switch(conn, migration, forced=not result.passed)
        self.remove_vectors(retired)
        self.served_model(refresh=True)
        self._migration_seen = (-1.0, None)
        return result, True

    def abort_migration(self, *, access: Access = FULL_ACCESS) -> tuple[MigrationInfo, int]:
        """Stop the migration under way and discard its staged versions; the namespace keeps its
        model. Returns the migration and how many versions were discarded."""
        _require_admin(access, "abort the embedding-model migration")
        with self.engine.begin() as conn:
            migration = model_migration.running(conn)
            if migration is None:
                raise ConflictError("no embedding-model migration is under way")
            discarded = model_migration.abort(conn, migration)
        self._migration_seen = (-1.0, None)
        return migration, discarded

    # -- search ---------------------------------------------------------------------------------

    def search(
        self,
        request: SearchRequest | str,
        *,
        access: Access = FULL_ACCESS,
        timings: Timings | None = None,
        explain: Explain | None = None,
    ) -> list[Hit]:
        """Hybrid search within ``access``; see :class:`SearchRequest` for the knobs. ``timings`` and
        ``explain``, when given, are filled with how the search ran."""
        if isinstance(request, str):
            request = SearchRequest(query=request)
        request = replace(request, filters=access.restrict(request.filters))
        if not request.query.strip():
            raise InvalidRequestError("the search query is empty")
        resolve_top_k(request.top_k, self.settings)  # refused before the query is embedded
        with self._lock:
            self._open()
            self._searching += 1
        started = time.perf_counter()
        ok = False
        try:
            try:
                hits = self._search(request, access, timings, explain)
            except ModelMismatchError:
                # A migration switched the namespace's model since it was read: read it again, once.
                if self._served == self.served_model(refresh=True):
                    raise
                hits = self._search(request, access, timings, explain)
            ok = True
            return hits
        except Exception as exc:
            if self._closed and not isinstance(exc, CitelineError):
                # Closed under a search that outlasted close()'s wait: what failed is what it closed.
                raise ClosedError(f"this Citeline is closed: closed during the search ({exc})") from exc
            raise
        finally:
            metrics().search_ended(time.perf_counter() - started, ok=ok)
            with self._lock:
                self._searching -= 1
                self._searches_done.notify_all()

    def _search(
        self, request: SearchRequest, access: Access, timings: Timings | None, explain: Explain | None
    ) -> list[Hit]:
        embedder, vectors, query = self.query_embedder, self.query_vectors, request.query
        embed_ms = 0.0
        cached = vectors.cached(embedder, query)

        def embed_query() -> NDArray[np.float32]:
            nonlocal embed_ms
            t0 = time.perf_counter()
            vector = vectors.embed(embedder, query)
            embed_ms = (time.perf_counter() - t0) * 1e3
            return vector

        pending: Future[NDArray[np.float32]]
        if cached is not None:
            pending = Future()
            pending.set_result(cached)
        else:
            if self._query_pool is None:
                with self._lock:
                    if self._query_pool is None:
                        self._open()
                        # Several, so that concurrent searches do not queue behind one another's embeddings.
                        self._query_pool = ThreadPoolExecutor(
                            max_workers=4, thread_name_prefix="citeline-query"
                        )
            # The query embeds (onnxruntime lets go of the GIL) while the search reads the catalog and
            # runs the keyword stage, which need no vector.
            pending = self._query_pool.submit(embed_query)
        if self._keyword_pool is None:
            with self._lock:
                if self._keyword_pool is None:
                    self._open()
                    self._keyword_pool = ThreadPoolExecutor(
                        max_workers=1, thread_name_prefix="citeline-keyword"
                    )
        reranker = self.reranker(request.rerank)
        mmr_lambda = request.mmr_lambda if request.mmr_lambda is not None else self.settings.mmr_lambda
        top_k = resolve_top_k(request.top_k, self.settings)
        depth = self.settings.rerank_candidates
        second_stage = reranker is not None or mmr_lambda is not None
        if second_stage:
            # The second stage needs its candidates even when fewer hits are asked for.
            request = replace(request, top_k=max(top_k, depth))
        # One snapshot for the whole search: its statements all see the catalog before a version swap
        # or a model switch, or all after it, never the documents of one and the chunks of the other.
        with self.engine.connect() as conn, conn.execution_options(isolation_level="REPEATABLE READ").begin():
            hits = hybrid_search(
                conn,
                request,
                pending.result,
                model=embedder.model_id,
                analyzer=self.analyzer,
                keyword_index=self.keyword_index,
                vector_index=self.vector_index,
                settings=self.settings,
                timings=timings,
                explain=explain,
                cache=self._catalog_cache,
                pool=self._keyword_pool,
            )
            if timings is not None:
                timings.embed = embed_ms
            if explain is not None:
                explain.cache_hit = cached is not None
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
                vector_index=self.vector_index,
            )
        if timings is not None:
            timings.rerank = (time.perf_counter() - t1) * 1e3
        return hits

    def reranker(self, spec: str | None = None) -> Reranker | None:
        """The reranker named by ``spec`` (a request's), else by the ``reranker`` setting; None for none.

        Loaded once per spec and served model (a reranker that embeds must embed in the queries'
        space, which a model switch changes). An unknown spec is an :class:`InvalidRequestError` when
        a request gave it and a :class:`ConfigError` when the settings did.
        """
        name = spec if spec is not None else self.settings.reranker
        embedder = self.query_embedder
        key = (name, embedder.model_id)
        if key not in self._rerankers:
            with self._lock:
                if key not in self._rerankers:
                    try:
                        # Built for the served model, the one the queries are embedded by.
                        served = self.settings.model_copy(update={"embedding_model": embedder.model_id})
                        self._rerankers[key] = get_reranker(name, served)
                    except ConfigError as exc:
                        if spec is None:
                            raise
                        raise InvalidRequestError(f"rerank: {exc}") from exc
        return self._rerankers[key]

    def fetch(
        self, chunk_ids: Sequence[int], query: str | None = None, *, access: Access = FULL_ACCESS
    ) -> list[Hit]:
        """Chunks by id, in the order given (inactive, unknown or out-of-grant ids are skipped).

        With ``query``, each hit carries its cosine distance to the query.
        """
        vector = self.query_vector(query) if query else None
        with self.engine.connect() as conn:
            return fetch_hits(conn, chunk_ids, vector, vector_index=self.vector_index, access=access)

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

    def check_chat(
        self,
        question: str,
        conversation_id: str | uuid.UUID | None = None,
        *,
        access: Access = FULL_ACCESS,
        persona: str | None = None,
    ) -> None:
        """Refuse a chat turn that could never be answered (a blank question, an unknown persona, a
        conversation not ``access.user_id``'s) without starting or changing a conversation; see
        :meth:`ChatSession.check`."""
        ChatSession.check(self, question, conversation_id, access=access, persona=persona)

    # -- catalog --------------------------------------------------------------------------------

    def documents(self, *, access: Access = FULL_ACCESS) -> list[DocumentInfo]:
        """Every document version in the catalog that ``access`` sees."""
        with self.engine.connect() as conn:
            return catalog.list_documents(conn, access=access)

    def document(self, ref: str, *, access: Access = FULL_ACCESS, version: int | None = None) -> DocumentInfo:
        """A document by id or unambiguous id prefix: its current version, or ``version`` (a replaced
        version is kept while a conversation cites it). One outside ``access`` is not found."""
        refuse_nul(ref, "document id")
        if not ref.strip():
            # Every id starts with the empty string: `docs delete ''` must not mean "the only one".
            raise InvalidRequestError("a document id (or the start of one) is needed, got an empty one")
        with self.engine.connect() as conn:
            try:
                whole = uuid.UUID(ref)
            except ValueError:
                matches = [d for d in catalog.find_documents(conn, ref) if access.sees(d.scopes)]
            else:
                try:
                    doc = catalog.get_document(conn, whole)
                except NotFoundError:
                    matches = []
                else:
                    matches = [doc] if access.sees(doc.scopes) else []
            if not matches:
                # Unknown and out of reach alike, in the words of the id as given.
                raise catalog.no_document(ref)
            if len(matches) > 1:
                raise InvalidRequestError(
                    f"id prefix {ref!r} matches {len(matches)} documents; give more of it"
                )
            if version is None or version == matches[0].version:
                return matches[0]
            found = catalog.get_document_version(conn, matches[0].id, version)
            # Relabelling changes every version, but a replacement upload labels its own version only:
            # a grant that sees the current version may not see another.
            if not access.sees(found.scopes):
                raise catalog.no_version(found.id, version)
            return found

    def document_ids(
        self, refs: str | Iterable[str], *, access: Access = FULL_ACCESS
    ) -> tuple[uuid.UUID, ...]:
        """The documents a search filter names (``Filters.document_ids``), by id or unambiguous id prefix
        (one str is one id, not its letters).

        A prefix is resolved as :meth:`document` resolves one (to one document ``access`` sees, else
        :class:`NotFoundError` or :class:`InvalidRequestError`), as the paths and commands that take a
        document do. A whole id is taken as given, without a read of the catalog, so a search naming
        whole ids costs no round trip: one that names nothing ``access`` sees finds nothing, as any
        filter would.
        """
        ids: dict[uuid.UUID, None] = {}
        for ref in map(str, one_or_many(refs)):
            try:
                ids[uuid.UUID(ref)] = None
            except ValueError:
                ids[self.document(ref, access=access).id] = None
        return tuple(ids)

    def delete(self, ref: str, *, access: Access = FULL_ACCESS) -> list[DocumentInfo]:
        """Delete a document (every version of its source) with its chunks, vectors, postings and files."""
        doc = self.document(ref, access=access)
        _require_admin(access, f"delete document {ref}")
        with self.engine.begin() as conn:
            removed = catalog.delete_document(conn, doc.id)
        self.remove_vectors([d.version_id for d in removed])
        remove_unused_files(self.engine, {Path(d.file_path) for d in removed if d.file_path})
        return removed

    def chunks(self, document: DocumentInfo, *, access: Access = FULL_ACCESS) -> Sequence[dict[str, Any]]:
        """The chunks of one version, in order (for ``docs show``)."""
        if not access.sees(document.scopes):
            raise catalog.no_document(str(document.id))
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.text(f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE document_id = :id ORDER BY chunk_index"),
                {"id": document.version_id},
            )
            return [dict(r._mapping) for r in rows]

    def metrics(self) -> bytes:
        """This process's metrics (with ``citeline serve``: every server process's, added up) and the
        catalog's counts, in Prometheus text format; see :mod:`citeline.metrics`."""
        return exposition(self._catalog_metrics)

    def metric_counts(self) -> CatalogCounts:
        """The catalog's counts for ``GET /metrics`` (versions by status, documents, chunks): one cheap
        read, shared by every process of a server, so any of them may answer."""
        with self.engine.connect() as conn:
            return catalog.metric_counts(conn)

    def stats(self, *, access: Access = FULL_ACCESS) -> dict[str, Any]:
        """Counts over the namespace, as far as ``access`` sees it."""
        with self.engine.connect() as conn:
            out = catalog.stats(conn, access=access)
        out["namespace"] = self.settings.namespace
        out["embedding_model"] = self.served_model(refresh=True)
        if self.settings.embedding_model != out["embedding_model"]:
            out["configured_embedding_model"] = self.settings.embedding_model
        status = self.migration(max_age=0.0)
        if status is not None:
            out["migration"] = status.as_dict()
        out["mode"] = "external" if self.settings.database_url else "embedded"
        if self.settings.job_runner == "celery":
            from citeline.jobs.celery import queue_of  # Celery is loaded only by those who use it

            # To compare with the queues `citeline worker` prints at start (docs/deploying.md): the CLI,
            # GET /stats and the admin page show the queue this process sends builds to.
            out["job_queue"] = queue_of(self.settings)
        return out

    # -- for servers (the API and later shells) ---------------------------------------------------
    # Small, typed reads a server needs beyond the methods above; kept together so that what a shell
    # may ask of the library stays in one place.

    def list_documents(self, query: DocumentQuery, *, access: Access = FULL_ACCESS) -> DocumentPage:
        """One page of the documents ``access`` sees that match ``query``, with their total count."""
        with self.engine.connect() as conn:
            return catalog.query_documents(conn, query, access=access)

    def builds(
        self,
        *,
        failed_within: timedelta | None = None,
        limit: int | None = None,
        offset: int = 0,
        access: Access = FULL_ACCESS,
    ) -> BuildPage:
        """The versions queued or being built that ``access`` sees, whoever started them (this process,
        another server, the CLI, a worker), and with ``failed_within`` those that failed that recently:
        one read of the catalog (see :func:`citeline.store.catalog.builds`)."""
        if failed_within is not None and failed_within < timedelta(0):
            raise InvalidRequestError(f"failed_within must not be negative, got {failed_within}")
        if limit is not None and limit < 1:
            raise InvalidRequestError(f"a limit of builds is at least 1, got {limit}")
        if offset < 0:
            raise InvalidRequestError(f"an offset of builds is at least 0, got {offset}")
        seconds = failed_within.total_seconds() if failed_within is not None else None
        with self.engine.connect() as conn:
            return catalog.builds(conn, failed_within=seconds, limit=limit, offset=offset, access=access)

    def chunk_page(
        self, document: DocumentInfo, *, offset: int = 0, limit: int = 100, access: Access = FULL_ACCESS
    ) -> tuple[list[dict[str, Any]], int]:
        """Chunks ``offset`` to ``offset + limit`` of one version, in order, and how many it has."""
        if not access.sees(document.scopes):
            raise catalog.no_document(str(document.id))
        with self.engine.connect() as conn:
            total = conn.execute(
                sa.text("SELECT count(*) FROM chunks WHERE document_id = :id"), {"id": document.version_id}
            ).scalar_one()
            rows = conn.execute(
                sa.text(
                    f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE document_id = :id ORDER BY chunk_index "
                    "LIMIT :limit OFFSET :offset"
                ),
                {"id": document.version_id, "limit": limit, "offset": offset},
            )
            return [dict(r._mapping) for r in rows], int(total)

    def page_text(self, document: DocumentInfo, page: int, *, access: Access = FULL_ACCESS) -> str:
        """The text of one page of a version, rebuilt from its chunks' page offsets (for showing a
        citation in place: a citation's ``start``/``end`` index this text).

        Characters no chunk covers (whitespace the splitter dropped between chunks) come back as line
        breaks and blank lines, as :func:`~citeline.split.rebuild_page_text` reads them.
        """
        if not access.sees(document.scopes):
            raise catalog.no_document(str(document.id))
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT start_offset, end_offset, text FROM chunks "
                    "WHERE document_id = :id AND page = :page ORDER BY start_offset"
                ),
                {"id": document.version_id, "page": page},
            ).all()
        if not rows:
            raise NotFoundError(f"document {document.id} has no text on page {page}")
        return rebuild_page_text((row.start_offset, row.end_offset, row.text) for row in rows)

    def document_file(self, document: DocumentInfo, *, access: Access = FULL_ACCESS) -> Path:
        """The stored original of a version; :class:`NotFoundError` when it has none (a web page kept
        as text) or the file is gone."""
        if not access.sees(document.scopes):
            raise catalog.no_document(str(document.id))
        path = Path(document.file_path) if document.file_path else None
        if path is None or not path.is_file():
            raise NotFoundError(f"document {document.id} has no stored original file")
        return path

    def conversation(
        self, conversation_id: str | uuid.UUID, *, access: Access = FULL_ACCESS
    ) -> tuple[ConversationInfo, list[MessageInfo]]:
        """One of ``access.user_id``'s conversations with its messages, each answer's citations
        resolved within ``access`` (see :func:`citeline.chat.store.with_citations`); another user's
        conversation is not found."""
        with self.engine.connect() as conn:
            info = chat_store.get_conversation(conn, chat_store.parse_id(conversation_id), access.user_id)
            return info, chat_store.with_citations(conn, chat_store.messages(conn, info.id), access=access)

    def prune_superseded(self) -> list[DocumentInfo]:
        """Delete the replaced document versions that no live conversation cites any more, with the
        originals only they held; returns them."""
        with self.engine.begin() as conn:
            pruned = catalog.prune_superseded(conn)
        if pruned:
            self.remove_vectors([d.version_id for d in pruned])
            remove_unused_files(self.engine, {Path(d.file_path) for d in pruned if d.file_path})
        return pruned

    def scopes(self, *, access: Access = FULL_ACCESS) -> list[str]:
        """The scopes a caller may search in, sorted: a reader's own scopes, or for a grant of every
        scope, the scopes its visible documents carry."""
        if access.scopes is not None:
            return sorted(access.scopes)
        with self.engine.connect() as conn:
            return catalog.scopes_in_use(conn, access=access)

    def authenticate(self, key: str) -> KeyInfo:
        """The live API key ``key`` is; :class:`AuthenticationError` for an unknown or revoked one.

        A key checked less than ``api_key_cache_seconds`` ago is answered from memory, unless it was
        revoked since: any process's revocation reaches this one's memory when it commits (a
        PostgreSQL notification, see :class:`citeline.store.keys.KeyCache`).
        """
        info = self._key_cache.get(key)
        if info is None:
            # Before the first key is held: a revocation by another process drops it from then on.
            self._key_cache.listen(self.engine)
            with self.engine.begin() as conn:
                info = keys.authenticate(conn, key)
            self._key_cache.put(key, info)
        return info

    def cached_key(self, key: str) -> KeyInfo | None:
        """The record of ``key`` if this instance checked it less than ``api_key_cache_seconds`` ago,
        without I/O (the API's authentication reads it on the event loop); None otherwise."""
        return self._key_cache.get(key)

    def has_keys(self) -> bool:
        """Whether any live API key exists."""
        with self.engine.connect() as conn:
            return keys.has_keys(conn)

    def create_key(
        self,
        role: Role,
        scopes: Iterable[str] | None = None,
        *,
        all_scopes: bool = False,
        name: str = "",
        access: Access = FULL_ACCESS,
    ) -> tuple[KeyInfo, str]:
        """A new API key (admins only): its record, and the key itself, shown this once. A reader key is
        bound to ``scopes`` (at least one) or, with ``all_scopes``, to every scope; an admin key takes
        neither (:func:`keys.reach`)."""
        _require_admin(access, "create an API key")
        bound = keys.reach(role, scopes, all_scopes)
        with self.engine.begin() as conn:
            return keys.create_key(conn, role=role, scopes=bound, name=name)

    def api_keys(self, *, include_revoked: bool = False, access: Access = FULL_ACCESS) -> list[KeyInfo]:
        """The API keys (admins only), oldest first."""
        _require_admin(access, "list API keys")
        with self.engine.connect() as conn:
            return keys.list_keys(conn, include_revoked=include_revoked)

    def revoke_key(self, key_id: str | uuid.UUID, *, access: Access = FULL_ACCESS) -> KeyInfo:
        """Revoke an API key (admins only); it is refused from the next request on."""
        _require_admin(access, "revoke an API key")
        with self.engine.begin() as conn:
            info = keys.revoke_key(conn, key_id)
        self._key_cache.forget(info.id)
        return info

    def readiness(self) -> Readiness:
        """Whether this instance can serve: the database answers, the embedder is loaded and, once
        started, the job runner is alive; for each check that fails, why (a bare false does not tell a
        dead thread from an unreachable broker)."""
        problems: dict[str, str] = {}
        try:
            with self.engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except (CitelineError, sa.exc.SQLAlchemyError) as exc:
            first_line = str(getattr(exc, "orig", None) or exc).strip().splitlines()[:1]
            problems["database"] = (
                f"the database does not answer: {' '.join(first_line) or type(exc).__name__}"
            )
        if self._embedder is None:
            problems["embedder"] = "the embedding model is not loaded yet"
        checks = ["database", "embedder"]
        if self._settings.vector_backend == "chroma":
            checks.append("vector_index")
            problem = self.vector_index.problem()
            if problem is None and self._repair_pending:
                problem = self._repair_when_back()
            if problem is not None:
                problems["vector_index"] = problem
        if self._jobs is not None:
            checks.append("job_runner")
            problem = self._jobs.problem
            if problem is not None:
                problems["job_runner"] = problem
        return Readiness({name: name not in problems for name in checks}, problems)

    def _repair_when_back(self) -> str | None:
        """Run the start-up repair :meth:`warm_up` could not (once); why it failed, if it did."""
        with self._lock:
            if self._repair_pending:
                try:
                    self.repair_vectors()
                except StoreError as exc:
                    return f"the vector index answers but could not be repaired: {exc}"
                self._repair_pending = False
        return None


@dataclass(frozen=True)
class Readiness:
    """What :meth:`Citeline.readiness` found: each check passed or not, and why each failed one did."""

    checks: dict[str, bool]
    problems: dict[str, str]

    @property
    def ready(self) -> bool:
        return all(self.checks.values())


#: The fields of a chunk as listed (``docs show --chunks``, ``GET /documents/{id}/chunks``).
_CHUNK_COLUMNS = (
    "id, chunk_index, page, start_offset, end_offset, section, section_type, model_numbers, context, rows, "
    "text"
)


def namespaces(settings: Settings) -> list[str]:
    """The namespaces the database of ``settings`` holds, sorted; creates none."""
    url = server_url(settings)
    # A connection of its own: the store's engine creates the namespace as it connects.
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return namespaces_in(conn)
    except sa.exc.OperationalError as exc:
        # psycopg's message spans lines (one per address tried); an error is one line.
        reason = " ".join(str(exc.orig).split())
        where = sa.make_url(url).render_as_string(hide_password=True)
        raise StoreError(f"cannot reach PostgreSQL at {where}: {reason}") from exc
    finally:
        engine.dispose()


def _require_store(settings: Settings) -> None:
    """Raise :class:`NotFoundError` when ``settings`` name an embedded store that does not exist: a
    mistyped ``--data-dir`` would otherwise start a new, empty database there and answer from it."""
    if settings.database_url is None and not embedded_exists(settings.data_dir):
        raise NotFoundError(
            f"no namespace {settings.namespace!r}: there is no citeline store in {settings.data_dir} yet. "
            "Check the folder given (--data-dir, CITELINE_DATA_DIR); ingesting documents creates the store"
        )


def _require_namespace(settings: Settings) -> None:
    """Raise :class:`NotFoundError` unless the database of ``settings`` holds its namespace."""
    found = namespaces(settings)
    if settings.namespace in found:
        return
    where = (
        f"the embedded database in {settings.data_dir}"
        if settings.database_url is None
        else sa.make_url(settings.database_url).render_as_string(hide_password=True)
    )
    held = f"namespaces: {', '.join(found)}" if found else "it holds no namespace yet"
    raise NotFoundError(
        f"no namespace {settings.namespace!r} in {where}; {held}. Check the name given "
        "(--namespace, CITELINE_NAMESPACE); ingesting documents into a namespace creates it"
    )


def _uploaded_by(options: IngestOptions | None, access: Access) -> IngestOptions:
    """``options`` recording who sent the document (``uploaded_by``): the caller's user id (an API key's
    ``key:<id>``) unless the options name someone."""
    options = options or IngestOptions()
    return options if options.uploaded_by is not None else replace(options, uploaded_by=access.user_id)


#: What :meth:`Citeline.index_all` takes: pending documents are queued, completed and failed ones re-ingested.
_INDEXABLE = (Status.PENDING.value, Status.COMPLETED.value, Status.FAILED.value)


def _require_admin(access: Access, action: str) -> None:
    # Said without API keys: a program's Access.reader has none. The API refuses a reader key before
    # the engine is asked (api/deps.py require_admin), in words about keys.
    if not access.is_admin:
        raise AccessDeniedError(f"{action}: needs admin access (this access is a {access.role.value}'s)")
