"""The ingestion pipeline: source -> pages -> chunks -> vectors -> one atomic version in the store.

Sources stream through one shared buffer of chunks, so many small documents are embedded in full
batches and a long one never sits in memory whole. A version's chunks are written while it is
inactive (invisible to search) and it becomes visible in a single commit (:func:`catalog.activate`):
readers see all of a version or none of it. Chunk texts already embedded by the same model are
reused, never embedded twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.annotate import annotate
from citeline.checks import check_mapping, check_names, check_number, check_text, refuse_nul
from citeline.embed.base import Embedder, Interrupt, InterruptibleEmbedder, get_embedder
from citeline.errors import (
    CitelineError,
    EmbeddingError,
    GenerationError,
    InvalidRequestError,
    JobStoppedError,
    LoadError,
    NotFoundError,
    StoreError,
    UnsupportedTypeError,
)
from citeline.load import SUPPORTED_SUFFIXES, load, page_count
from citeline.load.clean import storable
from citeline.metrics import metrics
from citeline.retrieve.filters import check_labels, normalise_category
from citeline.split import CHUNK_OVERLAP_MAX, CHUNK_SIZE_MAX, CHUNK_SIZE_MIN, split
from citeline.store import catalog
from citeline.store.analyzer import Analyzer, DocumentTerms
from citeline.store.catalog import ChunkRow, DocumentInfo, Labels, VersionSpec, VersionStart
from citeline.store.index import VectorIndex, VersionVectors
from citeline.store.models import Status
from citeline.types import ChunkDraft, LoadedSource, Page, Section, SourceMetadata, counted, embedding_text

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger(__name__)

#: Chunks per embed call. Small enough that embedding one batch overlaps writing the previous one,
#: large enough for the embedder to group texts by length. Measured (bench.run, 1,000 chunks):
#: ingest / bare embedder 0.65 at 512, 0.73-0.77 at 256, 0.80 at 128 and at 64.
EMBED_BATCH = 128

#: Sources whose versions are started in one transaction: one round of statements for many small
#: documents instead of one each.
BEGIN_GROUP = 64


class Outcome(StrEnum):
    ADDED = "added"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    RELABELLED = "relabelled"
    FAILED = "failed"
    #: A job failed for a passing reason and went back to the queue.
    RETRYING = "retrying"
    #: Built with the target of a model migration: complete, invisible until the switch.
    STAGED = "staged"


@dataclass(frozen=True)
class IngestOptions:
    """How to ingest: labels for the documents, and chunking (``None`` means the settings' default).

    A label left ``None`` keeps the value the source's current version has (none, for a new source).
    An empty one removes it: ``category=""``, ``tags=()``, ``metadata={}``, ``scopes=()`` (universal).
    """

    scopes: tuple[str, ...] | None = None
    category: str | None = None
    tags: tuple[str, ...] | None = None
    metadata: dict[str, Any] | None = None
    uploaded_by: str | None = None
    chunk_size: int | None = None
    chunk_overlap: int | None = None

    def __post_init__(self) -> None:
        # Checked here, so every shell (CLI, API, workers) refuses the same labels the same way.
        check_names(self.scopes, "scopes", "scopes")
        check_names(self.tags, "tags", "tags")
        check_mapping(self.metadata, "metadata")
        check_text(self.category, "category")
        check_text(self.uploaded_by, "uploaded_by")
        check_number(self.chunk_size, "chunk_size", whole=True)
        check_number(self.chunk_overlap, "chunk_overlap", whole=True)
        refuse_nul(self, "")
        check_labels(self.scopes, self.tags, self.metadata)
        if self.category and not normalise_category(self.category):
            # "/" is more likely a slip than a wish to remove the category, which "" says plainly.
            raise InvalidRequestError(
                f"category: {self.category!r} names no category (only slashes and spaces); "
                'give a path such as Clinical/Cardiology, or "" to remove the category'
            )

    def labels(self) -> Labels:
        # Duplicates dropped here, as the catalog stores them, so "--tag a --tag a" on a document
        # tagged "a" is unchanged rather than relabelled.
        return Labels(
            scopes=None if self.scopes is None else tuple(dict.fromkeys(self.scopes)),
            category=None if self.category is None else normalise_category(self.category),
            tags=None if self.tags is None else tuple(dict.fromkeys(self.tags)),
            metadata=self.metadata,
            uploaded_by=self.uploaded_by,
        )


#: Outcomes after which the document holds the source's bytes.
_STORED = frozenset({Outcome.ADDED, Outcome.UPDATED, Outcome.UNCHANGED, Outcome.RELABELLED})


@dataclass(frozen=True)
class IngestResult:
    """What happened to one source."""

    source: str
    outcome: Outcome
    document: DocumentInfo | None = None
    chunks: int = 0
    embedded: int = 0
    seconds: float = 0.0
    error: str | None = None
    #: The other active documents holding the same bytes (the same file under another name).
    same_content: tuple[catalog.SameContent, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "outcome": self.outcome.value,
            "document_id": str(self.document.id) if self.document else None,
            "version": self.document.version if self.document else None,
            "chunks": self.chunks,
            "embedded": self.embedded,
            "seconds": round(self.seconds, 3),
            "error": self.error,
            "same_content_as": [same.as_dict() for same in self.same_content],
        }


@dataclass(frozen=True)
class Source:
    """Something to ingest: its identity, its content hash and how to load it.

    Files and URLs become sources through :func:`file_source`; other callers (the evaluation, later
    the API) can build one from text in memory.
    """

    label: str
    uri: str
    name: str
    content_hash: str
    open: Callable[[], LoadedSource]
    stored_file: Path | None = None
    #: When the source was read at its origin (None for a stored original or text in memory).
    fetched_at: datetime | None = None


ProgressCallback = Callable[[IngestResult], None]
"""Called with each source's result as soon as it is known."""


class IngestInterrupted(KeyboardInterrupt):
    """Ctrl-C (a :class:`KeyboardInterrupt`) that stopped an ingest, with what it had done: the results
    reported before the stop, and how many versions it was building. Those stay ``processing``, out of
    searches, until the next run or citeline process marks them failed as interrupted (a new ingest of
    their sources builds them again). Still a KeyboardInterrupt, so whatever stops on one stops."""

    def __init__(self, results: Sequence[IngestResult], building: int) -> None:
        super().__init__(f"interrupted: {len(results)} results before the stop, {building} versions building")
        self.results = list(results)
        self.building = building


def discover(paths: str | Path | Iterable[str | Path]) -> list[str]:
    """Expand folders (recursively, supported types only, hidden files skipped) and keep files and URLs.

    One ``str`` or ``Path`` is one source, not an iterable of one-letter ones.
    """
    found: list[str] = []
    for item in one_or_many(paths):
        text = str(item)
        path = Path(text)
        if not _is_url(text) and path.is_dir():
            found += _supported_files(path)
        else:
            found.append(text)
    return found


def one_or_many(given: str | Path | Iterable[str | Path]) -> list[str | Path]:
    """``given`` as a list of sources: one ``str`` or ``Path`` is one. A str is itself an iterable of
    str, so ``ingest("docs")`` would otherwise be the sources d, o, c and s, and an absolute path's
    leading "/" a walk of the whole file system."""
    return [given] if isinstance(given, str | Path) else list(given)


def _supported_files(root: Path) -> list[str]:
    """The regular files of a supported type below ``root``, hidden ones skipped, in path order.

    Symbolic links to folders are not followed (``/proc/self``, a link to a parent, would loop), and
    a folder or file that cannot be read or vanishes while it is walked (``/proc/<pid>`` of a process
    that ended) is skipped, not the whole walk failed. A FIFO, socket or device is no document: reading
    one would block or never end.
    """
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):  # os.walk skips a folder it cannot list
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            child = Path(folder, name)
            if name.startswith(".") or child.suffix.lower() not in SUPPORTED_SUFFIXES:
                continue
            try:
                regular = stat.S_ISREG(child.stat().st_mode)
            except OSError:
                continue  # gone since the folder was listed, or a link to nothing
            if regular:
                found.append(child)
    return [str(child) for child in sorted(found)]


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def url_name(url: str) -> str:
    """A web page's name: the last part of its path, else the URL."""
    return url.rstrip("/").rsplit("/", 1)[-1] or url


def text_hash(pages: Sequence[Page]) -> str:
    """The hash of a source's extracted text, page by page: what identifies a web page's content (its
    markup, scripts and advertising may change on every fetch)."""
    digest = hashlib.sha256()
    for page in pages:
        digest.update(page.text.encode())
        digest.update(b"\f")
    return digest.hexdigest()


def url_source(url: str, *, name: str | None = None, allow_private_urls: bool = False) -> Source:
    """A web page fetched now, identified by the hash of its extracted text (:func:`text_hash`).

    Raises :class:`LoadError` when the page cannot be fetched or has no text.
    """
    fetched_at = datetime.now(UTC)
    loaded = load(url, allow_private=allow_private_urls)
    pages = list(loaded.pages)  # a page is at most the fetch limit (10 MB); its text is hashed whole

    def reopen() -> LoadedSource:
        return LoadedSource(loaded.content_type, loaded.title, iter(pages), dict(loaded.metadata))

    return Source(url, url, name or url_name(url), text_hash(pages), reopen, fetched_at=fetched_at)


def file_source(text: str, files_dir: Path, *, allow_private_urls: bool = False) -> Source:
    """A file or URL as a source. Raises :class:`LoadError` for a missing or unsupported file, or a
    page that cannot be fetched.

    A file's original is kept under ``files_dir``, named by its content hash. A URL is fetched now
    (:func:`url_source`).
    """
    if _is_url(text):
        return url_source(text, allow_private_urls=allow_private_urls)
    path = Path(text).expanduser()
    if not path.exists():
        raise LoadError(text, "file not found")
    if path.is_dir():
        raise LoadError(text, "is a directory, not a file")
    if not path.is_file():
        # A FIFO, socket or device (/dev/stdin, /dev/zero) would block or never end the hashing below.
        raise LoadError(text, "not a regular file")
    if path.suffix and path.suffix.lower() not in SUPPORTED_SUFFIXES:
        raise UnsupportedTypeError(
            text, f"unsupported file type {path.suffix!r}; supported: {', '.join(SUPPORTED_SUFFIXES)}"
        )
    fetched_at = datetime.now(UTC)
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    content = digest.hexdigest()
    stored = files_dir / content[:2] / f"{content}{path.suffix.lower()}"
    if not stored.exists():
        stored.parent.mkdir(parents=True, exist_ok=True)
        partial = stored.with_name(stored.name + ".part")
        shutil.copyfile(path, partial)
        partial.replace(stored)
    resolved = path.resolve()
    name = file_name(resolved)
    return Source(text, resolved.as_uri(), name, content, lambda: load(path), stored, fetched_at)


def file_name(path: Path) -> str:
    """``path``'s name as text: a byte the file system holds that is not UTF-8 (a name written in
    Latin-1, say) becomes U+FFFD rather than a lone surrogate, which PostgreSQL cannot store. The URI
    (percent-encoded from the bytes) still tells such files apart."""
    return os.fsencode(path.name).decode("utf-8", errors="replace")


@dataclass
class _Job:
    """A version being built, with its own chunking (labels and chunking belong to each document)."""

    source: Source
    doc: DocumentInfo
    started: float
    size: int
    overlap: int
    #: A web page the job fetches first, to learn its text hash (and whether it changed).
    fetch: bool = False
    loaded: LoadedSource | None = None
    pages: int = 0
    chunks: int = 0
    embedded: int = 0
    pending: int = 0
    exhausted: bool = False
    failed: bool = False
    #: The whole version's keyword terms, gathered as its chunks are cut.
    terms: DocumentTerms | None = None


@dataclass
class _Batch:
    """Chunks sent to the embedder: ``todo`` indexes the ones not found in ``known``."""

    items: list[tuple[_Job, ChunkRow]]
    known: dict[str, NDArray[np.float32]]
    todo: list[int]
    vectors: Future[NDArray[np.float32]]


StopCheck = Callable[[DocumentInfo, float, int], str | None]
"""Asked before each page, and after each chunk while a page is split, with a version, the seconds its
build has taken and the pages read before the one being split: a reason to stop, or None."""


@dataclass(frozen=True)
class RetryPolicy:
    """How a job that failed for a passing reason (database, remote provider) is tried again."""

    retries: int = 3
    delay: float = 2.0

    def delay_after(self, attempts: int) -> float:
        """Exponential backoff: ``delay``, then twice that, and so on."""
        return float(self.delay * 2 ** max(attempts - 1, 0))


#: Failures worth trying again: the database or a remote model was unavailable, not the input bad.
TRANSIENT = (StoreError, EmbeddingError, GenerationError)


@dataclass
class _Run:
    """The state of one :meth:`Ingestor.ingest` or :meth:`Ingestor.run_jobs` call."""

    labels: Labels
    report: Callable[[IngestResult], None]
    #: Jobs claimed from the queue (``run_jobs``): transient failures go back to it.
    retry: RetryPolicy | None = None
    should_stop: StopCheck | None = None
    buffer: list[tuple[_Job, ChunkRow]] = field(default_factory=list)
    open_jobs: list[_Job] = field(default_factory=list)
    in_flight: _Batch | None = None
    embedding: ThreadPoolExecutor | None = None
    #: One connection for the run's own statements: no pool checkout (and ping) per transaction.
    conn: sa.Connection | None = None
    #: The run's key (catalog.hold_run), held on ``conn`` while the run lasts.
    key: int | None = None
    #: What embeds the versions being built: each run (or group of claimed jobs) has one model.
    embedder: Embedder | None = None
    #: Set when the run ends early (Ctrl-C, an error): the batch in the embedder is not waited for.
    interrupt: Interrupt = field(default_factory=Interrupt)
    #: The versions begun or claimed and not yet reported: those a stop leaves processing.
    building: set[uuid.UUID] = field(default_factory=set)


class Ingestor:
    """Ingests sources into one store.

    New versions are embedded by the model the namespace serves (``embedder``'s, for a namespace that
    serves none yet); a claimed job by the model its version names. ``embedders`` resolves a model to
    its embedder (default: ``embedder`` for its own model, the provider registry for any other).
    """

    def __init__(
        self,
        engine: sa.Engine,
        embedder: Embedder,
        analyzer: Analyzer,
        index: VectorIndex,
        *,
        files_dir: Path,
        chunk_size: int,
        chunk_overlap: int,
        allow_private_urls: bool = False,
        retry: RetryPolicy | None = None,
        embedders: Callable[[str], Embedder] | None = None,
    ) -> None:
        self.engine = engine
        self.embedder = embedder
        self.embedders = embedders or (
            lambda model: embedder if model == embedder.model_id else get_embedder(model)
        )
        self.analyzer = analyzer
        self.index = index
        self.files_dir = files_dir
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.allow_private_urls = allow_private_urls
        #: How jobs left by a dead run are retried when this ingestor sweeps them up.
        self.retry = retry or RetryPolicy()
        self._indexed: set[str] = set()

    def ingest_paths(
        self, paths: Iterable[str], options: IngestOptions, progress: ProgressCallback | None = None
    ) -> list[IngestResult]:
        """Ingest files and URLs. Never raises for bad input: each failure is a result.

        A source named more than once (``a.txt ./a.txt``, a file and a symlink to it, a folder and a
        file in it) is ingested once, under the first of its names.
        """
        results: list[IngestResult] = []
        sources: list[Source] = []
        seen: set[tuple[str, str]] = set()
        for text in paths:
            try:
                source = file_source(text, self.files_dir, allow_private_urls=self.allow_private_urls)
                if (source.uri, source.content_hash) not in seen:
                    seen.add((source.uri, source.content_hash))
                    sources.append(source)
            except CitelineError as exc:
                uri = text if _is_url(text) else Path(text).expanduser().resolve().as_uri()
                result = self._record_failure(
                    text, uri, file_name(Path(text)), options.labels(), None, str(exc), time.perf_counter()
                )
                results.append(result)
                if progress:
                    progress(result)
        results.extend(self.ingest(sources, options, progress))
        return results

    def ingest(
        self,
        sources: Iterable[Source],
        options: IngestOptions,
        progress: ProgressCallback | None = None,
        *,
        model: str | None = None,
    ) -> list[IngestResult]:
        """Ingest sources, batching the chunks of consecutive sources through the embedder together.

        ``model`` embeds them by that model rather than the one the namespace serves: the versions a
        running migration to it stages, for sources that are not stored originals (in memory).
        """
        size = options.chunk_size if options.chunk_size is not None else self.chunk_size
        overlap = options.chunk_overlap if options.chunk_overlap is not None else self.chunk_overlap
        check_chunking(size, overlap)
        run = _Run(options.labels(), lambda result: None)

        def build() -> None:
            with self._tx(run) as conn:
                run.embedder = self.embedders(model or catalog.ingest_model(conn, self.embedder.model_id))
            self._build(run, self._begun(run, sources, size, overlap))

        return self._running(run, progress, build)

    def run_jobs(
        self,
        *,
        limit: int,
        version_ids: Sequence[uuid.UUID] | None = None,
        retry: RetryPolicy | None = None,
        should_stop: StopCheck | None = None,
        progress: ProgressCallback | None = None,
    ) -> list[IngestResult]:
        """Claim up to ``limit`` queued versions (``version_ids`` only, if given) and build them.

        Each version is built from its stored original with its own labels and chunking. A failure
        that may pass (database, remote model) puts the version back in the queue until ``retry``'s
        retries are spent; bad input fails it at once. ``should_stop`` is asked between pages.
        Returns nothing when the queue held nothing ready.
        """
        run = _Run(Labels(), lambda result: None, retry or RetryPolicy(), should_stop)

        def claim_and_build() -> None:
            assert run.key is not None
            with self._tx(run) as conn:
                claimed = catalog.claim_jobs(conn, run=run.key, limit=limit, version_ids=version_ids)
            run.building.update(doc.version_id for doc in claimed)
            by_model: dict[str, list[DocumentInfo]] = {}
            for doc in claimed:
                by_model.setdefault(doc.embedding_model or self.embedder.model_id, []).append(doc)
            # One model per build: a batch of chunks goes through one embedder.
            for model, versions in by_model.items():
                try:
                    run.embedder = self.embedders(model)
                except CitelineError as exc:
                    for doc in versions:
                        job = _Job(stored_source(doc), doc, time.perf_counter(), 0, 0)
                        self._drop(job, run, f"{doc.name}: {exc}", transient=isinstance(exc, TRANSIENT))
                    continue
                self._build(run, self._claimed(run, versions))

        def count(result: IngestResult) -> None:
            metrics().job_ended(result.outcome.value)
            if progress:
                progress(result)

        return self._running(run, count, claim_and_build)

    def _running(
        self, run: _Run, progress: ProgressCallback | None, work: Callable[[], None]
    ) -> list[IngestResult]:
        """Run ``work`` as an ingest run: its own connection, run lock and embedding thread."""
        results: list[IngestResult] = []

        def report(result: IngestResult) -> None:
            doc = result.document
            if doc is not None and doc.content_hash and result.outcome in _STORED:
                # Said as each result comes, in a statement of its own beside the run's transaction (an
                # index makes it a lookup: migration 0021).
                with self.engine.connect() as other:
                    same = catalog.same_content(other, doc.content_hash, doc.id)
                result = replace(result, same_content=same)
            if result.document is not None:
                run.building.discard(result.document.version_id)
            results.append(result)
            if progress:
                progress(result)

        run.report = report
        with (
            ThreadPoolExecutor(1, thread_name_prefix="citeline-embed") as embedding,
            self.engine.connect() as conn,
        ):
            run.embedding, run.conn = embedding, conn
            run.key = catalog.hold_run(conn)
            conn.commit()  # the lock is the session's: it outlives this transaction
            try:
                if run.retry is None:
                    self._fail_abandoned(run)
                work()
            except BaseException as exc:
                # Ctrl-C (KeyboardInterrupt) or an error ends the run: the batch in the embedder would be
                # written by no one, and leaving the executor waited for it (3 to 11 s on two cores).
                # Its versions are left processing, as by any interruption, for the next run to settle.
                run.interrupt.set()
                embedding.shutdown(wait=False, cancel_futures=True)
                if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, IngestInterrupted):
                    # Said by whoever stopped it (citeline ingest's last line): what was done, what not.
                    raise IngestInterrupted(results, len(run.building)) from exc
                raise
            finally:
                try:
                    catalog.release_run(conn, run.key)
                    conn.commit()
                except sa.exc.DBAPIError:
                    # The pool must not hand out a session that may still hold the run's lock.
                    conn.invalidate()
        return results

    def _begun(self, run: _Run, sources: Iterable[Source], size: int, overlap: int) -> Iterator[_Job]:
        """New versions of ``sources`` (unchanged and relabelled ones are reported at once)."""
        for group in _groups((_storable_source(s) for s in sources), BEGIN_GROUP):
            yield from self._begin(run, group, size, overlap)

    def _claimed(self, run: _Run, versions: Sequence[DocumentInfo]) -> Iterator[_Job]:
        """Jobs for claimed versions, each read from its stored original (or its URL)."""
        started = time.perf_counter()
        try:
            self._ensure_index(run)
        except TRANSIENT as exc:
            # The store out of reach before anything was written (a worker's first build, Chroma down)
            # is as passing as a failed write: the versions go back to the queue, and the run goes on.
            for doc in versions:
                job = _Job(stored_source(doc, allow_private_urls=self.allow_private_urls), doc, started, 0, 0)
                self._drop(job, run, str(exc), transient=True)
            return
        for doc in versions:
            source = stored_source(doc, allow_private_urls=self.allow_private_urls)
            size = doc.chunk_size or self.chunk_size
            overlap = doc.chunk_overlap if doc.chunk_overlap is not None else self.chunk_overlap
            fetch = doc.file_path is None and _is_url(doc.source_uri)
            yield _Job(source, doc, started, size, overlap, fetch)

    def _build(self, run: _Run, jobs: Iterable[_Job]) -> None:
        for job in jobs:
            # Each document's clock starts when its own build does, not when its group was begun or
            # claimed: its reported seconds and its soft time limit are its own, not its predecessors'.
            job.started = time.perf_counter()
            with self.engine.begin() as conn:
                catalog.mark_started(conn, job.doc.version_id)
            run.open_jobs.append(job)
            try:
                if job.fetch and not self._fetch(job, run):
                    continue
                job.terms = DocumentTerms(self.analyzer)
                for draft in self._drafts(job, run):
                    # Asked between chunks too, not only between pages: a text or Markdown file is one
                    # page, whose splitting, keyword analysis and embedding the limit did not bound.
                    self._stop_if_asked(job, run, job.pages - 1)
                    job.terms.add(draft.page, draft.start, draft.end, draft.text)
                    run.buffer.append((job, self._row(draft)))
                    job.pending += 1
                    if len(run.buffer) >= EMBED_BATCH:
                        self._flush(run)
                        if job.failed:  # its chunks were refused: the rest would be embedded for nothing
                            break
                job.exhausted = True
            except Exception as exc:
                if (stop := _ctrl_c(exc)) is not None:
                    raise stop from exc
                if isinstance(exc, CitelineError):
                    self._drop(job, run, str(exc), transient=isinstance(exc, TRANSIENT))
                else:  # a bug or I/O fault in one source must not stop the batch
                    log.exception("ingesting %s failed", job.source.label)
                    self._drop(job, run, f"{job.source.label}: {type(exc).__name__}: {exc}")
            self._finish_ready(run)
        self._flush(run)
        self._flush(run)  # the second call writes what the first one sent to the embedder

    def _fail_abandoned(self, run: _Run) -> None:
        """Fail the versions earlier runs left processing when they stopped (killed, or an error)."""
        with self._tx(run) as conn:
            abandoned = catalog.fail_abandoned(conn, retries=self.retry.retries, retry_delay=self.retry.delay)
        settle_abandoned(self.engine, abandoned)

    def _begin(self, run: _Run, sources: list[Source], size: int, overlap: int) -> list[_Job]:
        """Start versions for a group of sources; report the unchanged and relabelled ones at once."""
        started = time.perf_counter()
        model = self._embedder(run).model_id
        requests = [
            catalog.VersionRequest(
                source.uri,
                source.name,
                VersionSpec(source.content_hash, model, size, overlap, self.index.name),
                run.labels,
                str(source.stored_file) if source.stored_file else None,
                fetched_at=source.fetched_at,
            )
            for source in sources
        ]
        begun: Sequence[tuple[DocumentInfo, VersionStart] | str]
        try:
            begun = self._begin_versions(run, requests)
        except Exception as exc:
            if catalog.refused_data(exc) is None:
                raise
            # A value of one source was refused: the others begin, and it fails alone.
            begun = [
                done if isinstance(done, str) else done[0]
                for _, done in _each_alone(requests, lambda one: self._begin_versions(run, one))
            ]
        try:
            self._ensure_index(run)
        except TRANSIENT as exc:
            # The store out of reach before anything was written (Chroma down as a run starts): the
            # versions just begun fail now, keeping their originals for a re-run once it is back,
            # rather than staying processing until the next run calls them interrupted. The run stops:
            # every later source would fail alike.
            for source, begun_or_refused in zip(sources, begun, strict=True):
                if not isinstance(begun_or_refused, str) and begun_or_refused[1] is VersionStart.CREATED:
                    job = _Job(source, begun_or_refused[0], started, size, overlap)
                    self._drop(job, run, str(exc), transient=True)
            raise
        jobs: list[_Job] = []
        for source, begun_or_refused in zip(sources, begun, strict=True):
            if isinstance(begun_or_refused, str):
                reason = f"{source.label}: cannot be stored ({begun_or_refused})"
                run.report(
                    self._record_failure(
                        source.label,
                        source.uri,
                        source.name,
                        run.labels,
                        None,
                        reason,
                        started,
                        stored_file=source.stored_file,
                    )
                )
                continue
            doc, start = begun_or_refused
            if start is VersionStart.CREATED:
                run.building.add(doc.version_id)
                jobs.append(_Job(source, doc, started, size, overlap))
                continue
            outcome = Outcome.RELABELLED if start is VersionStart.RELABELLED else Outcome.UNCHANGED
            if start is VersionStart.RELABELLED:
                with self._tx(run) as conn:
                    self.index.relabelled(conn, [doc.version_id])
            run.report(
                IngestResult(source.label, outcome, doc, doc.vector_count, 0, time.perf_counter() - started)
            )
        return jobs

    def _begin_versions(
        self, run: _Run, requests: Sequence[catalog.VersionRequest]
    ) -> list[tuple[DocumentInfo, VersionStart]]:
        with self._tx(run) as conn:
            return list(catalog.begin_versions(conn, requests, run=run.key))

    def _ensure_index(self, run: _Run) -> None:
        embedder = self._embedder(run)
        if embedder.model_id not in self._indexed:
            with self._tx(run) as conn:
                self.index.prepare(conn, embedder.model_id, embedder.dimension)
            self._indexed.add(embedder.model_id)

    @staticmethod
    def _embedder(run: _Run) -> Embedder:
        assert run.embedder is not None, "a run's embedder is chosen before it builds anything"
        return run.embedder

    def _fetch(self, job: _Job, run: _Run) -> bool:
        """Fetch a job's web page and record its text hash; False (and reported) when the page proved
        unchanged and the job has nothing to build (see :func:`catalog.record_fetch`)."""
        uri, private = job.doc.source_uri, self.allow_private_urls
        fetched = url_source(uri, name=job.doc.name, allow_private_urls=private)
        assert fetched.fetched_at is not None
        spec = VersionSpec(
            fetched.content_hash, self._embedder(run).model_id, job.size, job.overlap, self.index.name
        )
        with self._tx(run) as conn:
            settled = catalog.record_fetch(
                conn, job.doc, spec, fetched.fetched_at, compare=job.doc.content_hash is None
            )
        job.source = fetched
        if settled is None:
            return True
        doc, start = settled
        run.open_jobs.remove(job)
        outcome = Outcome.RELABELLED if start is VersionStart.RELABELLED else Outcome.UNCHANGED
        run.report(
            IngestResult(fetched.label, outcome, doc, doc.vector_count, 0, time.perf_counter() - job.started)
        )
        return False

    def _drafts(self, job: _Job, run: _Run) -> Iterator[ChunkDraft]:
        stored = job.source.stored_file
        if run.should_stop is not None and stored is not None and (last := page_count(stored)) is not None:
            # A PDF's loader reads its pages for text before it gives out any (a 5,000-page blank one
            # failed as a scan): its page count, from its page tree, meets the page limit first, asked as
            # before its last page.
            self._stop_if_asked(job, run, last - 1)
        job.loaded = _storable_loaded(job.source.open())

        def counted(pages: Iterator[Page]) -> Iterator[Page]:
            for page in pages:
                self._stop_if_asked(job, run, job.pages)
                job.pages += 1
                yield page

        yield from split(counted(job.loaded.pages), chunk_size=job.size, chunk_overlap=job.overlap)

    @staticmethod
    def _stop_if_asked(job: _Job, run: _Run, pages: int) -> None:
        """Raise :class:`JobStoppedError` if the run's :data:`StopCheck` gives a reason to stop."""
        if run.should_stop is not None:
            reason = run.should_stop(job.doc, time.perf_counter() - job.started, pages)
            if reason is not None:
                raise JobStoppedError(f"{job.source.label}: {reason}")

    def _row(self, draft: ChunkDraft) -> ChunkRow:
        # The chunk's context (a table's header row) names its cells to BM25 as to the embedder.
        counts = self.analyzer.term_counts(embedding_text(draft.text, draft.context))
        found = annotate(draft.section, draft.text)
        return ChunkRow(
            chunk_index=draft.index,
            text=draft.text,
            page=draft.page,
            start=draft.start,
            end=draft.end,
            section=draft.section,
            terms=dict(counts),
            token_count=sum(counts.values()),
            model_numbers=found.model_numbers,
            section_type=found.section_type,
            context=draft.context,
            rows=draft.rows,
        )

    def _flush(self, run: _Run) -> None:
        """Send the buffered chunks to the embedder, then write the batch sent before this one.

        Embedding one batch while the previous one is written (and the next one loaded and split)
        keeps the embedder busy; it is the slowest stage by far.
        """
        sent = self._send(run) if run.buffer else None
        if run.in_flight is not None:
            self._write(run, run.in_flight)
        run.in_flight = sent
        self._finish_ready(run)

    def _send(self, run: _Run) -> _Batch:
        items, run.buffer = run.buffer, []
        rows = [row for _, row in items]
        embedder = self._embedder(run)
        with self._tx(run) as conn:
            known = catalog.cached_vectors(conn, embedder.model_id, [r.text_hash for r in rows], self.index)
        todo = [i for i, r in enumerate(rows) if r.text_hash not in known]
        assert run.embedding is not None
        texts = [rows[i].embedded for i in todo]
        future = (
            run.embedding.submit(embedder.embed_interruptible, texts, run.interrupt)
            if isinstance(embedder, InterruptibleEmbedder)
            else run.embedding.submit(embedder.embed, texts)
        )
        return _Batch(items, known, todo, future)

    def _write(self, run: _Run, batch: _Batch) -> None:
        """Store an embedded batch; a failure fails the versions it belongs to, not the whole run."""
        embedder = self._embedder(run)
        model = embedder.model_id
        items = [(i, job, row) for i, (job, row) in enumerate(batch.items) if not job.failed]
        try:
            vectors = np.empty((len(batch.items), embedder.dimension), dtype=np.float32)
            if batch.todo:
                vectors[batch.todo] = batch.vectors.result()
            for i, (_, row) in enumerate(batch.items):
                if row.text_hash in batch.known:
                    vectors[i] = batch.known[row.text_hash]
            by_job: dict[int, list[int]] = {}
            for i, job, _ in items:
                by_job.setdefault(id(job), []).append(i)
            groups = [
                (
                    batch.items[idxs[0]][0],
                    catalog.ChunkGroup(
                        batch.items[idxs[0]][0].doc, [batch.items[i][1] for i in idxs], vectors[idxs]
                    ),
                )
                for idxs in by_job.values()
            ]
            try:
                with self._tx(run) as conn:
                    stored = catalog.insert_chunks(
                        conn, model, [g for _, g in groups], inline_vectors=self.index.in_rows
                    )
            except Exception as exc:
                if catalog.missing_version(exc):
                    # A document deleted while it was built: its chunks have no row to belong to.
                    groups = self._without_deleted(run, groups)
                    stored = self._insert_each(run, model, groups)
                elif catalog.refused_data(exc) is None:
                    raise
                # One document's chunks were refused, and with them the batch: each document's chunks
                # are written again on their own, so only the one refused fails. The common path
                # stays one COPY.
                stored = self._insert_each(run, model, groups)
            if not self.index.in_rows:
                # After the rows commit, so a vector never exists without its chunk (a repair running
                # meanwhile in another process removes exactly those), and before the swap-in
                # (_finish_ready), so an active chunk always has its vector.
                with self._tx(run) as conn:
                    self.index.add(conn, model, stored)
        except CitelineError as exc:
            for job in {id(job): job for _, job, _ in items if not job.failed}.values():
                self._drop(job, run, str(exc), transient=isinstance(exc, TRANSIENT))
            return
        fresh = set(batch.todo)
        for i, job, _ in items:
            if job.failed:
                continue
            job.chunks += 1
            job.embedded += i in fresh
            job.pending -= 1

    def _without_deleted(
        self, run: _Run, groups: Sequence[tuple[_Job, catalog.ChunkGroup]]
    ) -> list[tuple[_Job, catalog.ChunkGroup]]:
        """Stop the jobs of ``groups`` whose version no longer exists (its document was deleted while
        it was built: what was asked for is done, so nothing is recorded as failed); the others."""
        with self.engine.connect() as conn:
            alive = {
                v.version_id for v in catalog.versions_by_id(conn, [j.doc.version_id for j, _ in groups])
            }
        kept = []
        for job, group in groups:
            if job.doc.version_id in alive:
                kept.append((job, group))
            else:
                self._stop_deleted(job, run)
        return kept

    def _stop_deleted(self, job: _Job, run: _Run) -> None:
        """Stop a job whose version no longer exists: its document was deleted while it was built. What
        was asked for is done, so nothing is recorded as failed (there is no row to record it on)."""
        job.failed = True
        run.buffer[:] = [(j, r) for j, r in run.buffer if j is not job]
        if job in run.open_jobs:
            run.open_jobs.remove(job)
        self._forget(run, [job.doc.version_id])
        reason = f"{job.source.label}: deleted while it was built; the build stopped"
        log.info("%s", reason)
        run.report(IngestResult(job.source.label, Outcome.FAILED, job.doc, error=reason))

    def _insert_each(
        self, run: _Run, model: str, groups: Sequence[tuple[_Job, catalog.ChunkGroup]]
    ) -> list[VersionVectors]:
        """Store each version's chunks in a transaction of its own, failing those refused."""

        def insert(one: Sequence[tuple[_Job, catalog.ChunkGroup]]) -> list[VersionVectors]:
            with self._tx(run) as conn:
                return catalog.insert_chunks(
                    conn, model, [g for _, g in one], inline_vectors=self.index.in_rows
                )

        stored: list[VersionVectors] = []
        for (job, _), done in _each_alone(groups, insert):
            if isinstance(done, str):
                self._drop(job, run, f"{job.source.label}: its text cannot be stored ({done})")
            else:
                stored += done
        return stored

    def _finish_ready(self, run: _Run) -> None:
        """Swap in every version whose chunks are all stored, in one transaction."""
        ready = sorted(
            (j for j in run.open_jobs if j.exhausted and j.pending == 0), key=lambda j: j.source.uri
        )
        for job in [j for j in ready if j.chunks == 0]:
            self._drop(job, run, f"{job.source.label}: no text to index")
        if run.retry is not None and ready:
            # A job cancelled while its last batch was embedded stops here, before it is swapped in.
            with self._tx(run) as conn:
                cancelled = catalog.cancel_requested(conn, [j.doc.version_id for j in ready])
            for job in [j for j in ready if j.doc.version_id in cancelled]:
                self._drop(job, run, f"{job.source.label}: {catalog.CANCELLED}")
                ready.remove(job)
        for job in ready:
            if job in run.open_jobs:
                run.open_jobs.remove(job)
        ready = [j for j in ready if j.chunks]
        if not ready:
            return
        try:
            previous, versions, docs, kept, served = self._activate(run, ready)
        except Exception as exc:
            if catalog.refused_data(exc) is None:
                raise
            # A value of one version was refused, and with it the swap of all: each is swapped in on its
            # own, so only the one refused fails.
            previous, versions, docs, kept, served = [], [], [], set(), set()
            for job, done in _each_alone(list(ready), lambda one: self._activate(run, one)):
                if isinstance(done, str):
                    ready.remove(job)
                    self._drop(job, run, f"{job.source.label}: cannot be stored ({done})")
                    continue
                files, ids, swapped_in, still, serving = done
                previous += files
                versions += ids
                docs += swapped_in
                kept |= still
                served |= serving
        # The versions this swap retired leave the index after the commit.
        self._forget(run, [v for v in versions if v not in kept])
        remove_unused_files(self.engine, {Path(f) for f in previous})
        self._report_swapped(run, ready, docs, served)

    def _activate(
        self, run: _Run, ready: Sequence[_Job]
    ) -> tuple[list[str], list[uuid.UUID], list[DocumentInfo], set[uuid.UUID], set[str]]:
        """Swap in the versions of ``ready`` in one transaction: the files their sources' versions held
        before, those versions, the versions swapped in, which of the earlier ones stay indexed, and the
        sources that had an active version before."""
        with self._tx(run) as conn:
            previous = catalog.version_files(conn, [job.source.uri for job in ready])
            versions = catalog.version_ids(conn, [job.source.uri for job in ready])
            served = catalog.served_sources(conn, [job.source.uri for job in ready])
            docs = catalog.activate(
                conn,
                [
                    catalog.Activation(
                        job.doc,
                        title=storable((job.loaded.title if job.loaded else None) or job.source.name),
                        content_type=storable(job.loaded.content_type) if job.loaded else "",
                        file_path=str(job.source.stored_file) if job.source.stored_file else None,
                        page_count=job.pages,
                        duration_ms=(time.perf_counter() - job.started) * 1e3,
                        source_metadata=_storable_metadata(job.loaded.metadata) if job.loaded else {},
                        terms=job.terms.counts() if job.terms else {},
                    )
                    for job in ready
                ],
                vector_index=self.index.name,
            )
            # A version staged for a model migration leaves its source's active version in place; a
            # superseded one stays in the catalog for its citations, but not in the vector index.
            kept = {
                doc.version_id
                for doc in catalog.versions_by_id(conn, versions)
                if doc.status != Status.SUPERSEDED
            }
        return previous, versions, docs, kept, served

    def _report_swapped(
        self, run: _Run, ready: Sequence[_Job], docs: Sequence[DocumentInfo], served: set[str]
    ) -> None:
        """Report each job of ``ready`` by what became of its version (``docs``: those swapped in;
        ``served``: the sources that had an active version before, so were updated, not added)."""
        # Swapped in or failed, and committed: no longer left processing by a stop, reported yet or not.
        run.building.difference_update(job.doc.version_id for job in ready)
        swapped = {doc.version_id: doc for doc in docs}
        for job in ready:
            elapsed = time.perf_counter() - job.started
            doc = swapped.get(job.doc.version_id)
            refused = gone = False
            if doc is None:
                with self.engine.connect() as conn:
                    now = catalog.versions_by_id(conn, [job.doc.version_id])
                refused = bool(now) and now[0].status == Status.FAILED
                # Retired by a newer version of its source swapped in with it (two replacements of a
                # document claimed in one batch): nothing of it is left to fail or discard.
                gone = not now
            if doc is None and not gone and (run.retry is not None or refused):
                # Failed while it was built (cancelled, over its hard time limit, or embedded by a model
                # the namespace no longer serves): not swapped in, and what it wrote goes.
                with self.engine.begin() as conn:
                    catalog.discard_chunks(conn, job.doc.version_id)
                    stopped = catalog.get_version(conn, job.doc.version_id)
                self._forget(run, [job.doc.version_id])
                run.report(
                    IngestResult(
                        job.source.label, Outcome.FAILED, stopped, seconds=elapsed, error=stopped.error
                    )
                )
                continue
            if doc is None:  # the same source twice in one run (or batch of jobs): its newest copy won
                run.report(
                    IngestResult(
                        job.source.label,
                        Outcome.UNCHANGED,
                        job.doc,
                        seconds=elapsed,
                        error="superseded by a later copy of the same source in this run",
                    )
                )
                continue
            # Added: the source had no active version (its first, or its earlier ones all failed).
            outcome = Outcome.UPDATED if job.source.uri in served else Outcome.ADDED
            if doc.status == Status.STAGED:
                outcome = Outcome.STAGED
            run.report(IngestResult(job.source.label, outcome, doc, job.chunks, job.embedded, elapsed))

    @contextmanager
    def _tx(self, run: _Run) -> Iterator[sa.Connection]:
        """A transaction on the run's connection that does not wait for its commit to reach disk.

        Atomicity is unchanged; a crash can lose only the last few commits (under a second), which a
        re-ingest restores. Per-document commits would otherwise each wait for an fsync.
        """
        assert run.conn is not None
        with run.conn.begin():
            run.conn.execute(sa.text("SET LOCAL synchronous_commit = off"))
            yield run.conn

    def _forget(self, run: _Run, version_ids: Sequence[uuid.UUID]) -> None:
        """Remove vectors of versions whose chunks the catalog no longer keeps (or will not keep)."""
        if version_ids and not self.index.in_rows:
            with self._tx(run) as conn:
                self.index.remove(conn, version_ids)

    def _drop(self, job: _Job, run: _Run, reason: str, *, transient: bool = False) -> None:
        """Fail one version: forget its buffered chunks, record the reason, release its original.

        A claimed job whose failure may pass goes back to the queue instead, until its retries are spent.
        One that failed for a passing reason keeps its original even then: the file was not at fault,
        and a re-ingest builds it again once the store or model is back.
        """
        job.failed = True
        run.buffer[:] = [(j, r) for j, r in run.buffer if j is not job]
        if job in run.open_jobs:
            run.open_jobs.remove(job)
        src = job.source
        try:
            if transient and run.retry is not None and job.doc.attempts <= run.retry.retries:
                delay = run.retry.delay_after(job.doc.attempts)
                with self.engine.begin() as conn:
                    retrying = f"{reason} (retrying in {delay:g} s)"
                    catalog.requeue(conn, job.doc.version_id, retrying, delay=delay)
                    queued = catalog.get_version(conn, job.doc.version_id)
                self._forget_failed(run, job)
                run.report(IngestResult(src.label, Outcome.RETRYING, queued, error=reason))
                return
            if transient and run.retry is not None:
                reason = f"{reason} (gave up after {counted(job.doc.attempts, 'attempt')})"
            failed = self._record_failure(
                src.label,
                src.uri,
                src.name,
                run.labels,
                job.doc,
                reason,
                job.started,
                stored_file=src.stored_file,
                keep_original=transient,
            )
        except NotFoundError:
            # Deleted while it was built, and its build then failed (the delete took its stored original,
            # or anything else went wrong meanwhile): there is no version to record the failure on.
            self._stop_deleted(job, run)
            return
        run.report(failed)
        self._forget_failed(run, job)

    def _forget_failed(self, run: _Run, job: _Job) -> None:
        """Remove the vectors a failed version wrote, if the vector index can be reached. A store out of
        reach (often why the version failed) must not stop the run: its other jobs are built, and what
        the version wrote is a vector without a chunk, which the next repair removes (at start-up)."""
        if not (job.pending or job.chunks):
            # No chunk was ever cut, so no vector written: nothing to ask a store that may be down for.
            return
        try:
            self._forget(run, [job.doc.version_id])
        except StoreError as exc:
            log.warning(
                "the vectors of failed version %s stay until the next repair: %s", job.doc.version_id, exc
            )

    def _record_failure(
        self,
        label: str,
        uri: str,
        name: str,
        labels: Labels,
        doc: DocumentInfo | None,
        reason: str,
        started: float,
        *,
        stored_file: Path | None = None,
        keep_original: bool = False,
    ) -> IngestResult:
        """Record a failure (see :func:`catalog.record_failure`), then remove the originals no version
        holds any more: ``stored_file``, the failed version's unless ``keep_original``, and those of the
        earlier failure of its source it replaces (which may have kept one)."""
        # A file name or a path in the reason may hold what PostgreSQL cannot store; the failure must be.
        uri, name, reason = storable(uri), storable(name), storable(reason)
        with self.engine.begin() as conn:
            held = catalog.version_files(conn, [uri])
            failed = catalog.record_failure(
                conn,
                source_uri=uri,
                name=name,
                reason=reason,
                labels=labels,
                doc_id=doc.version_id if doc else None,
                keep_original=keep_original,
            )
        remove_unused_files(self.engine, {Path(f) for f in held} | ({stored_file} if stored_file else set()))
        return IngestResult(
            label, Outcome.FAILED, failed, seconds=time.perf_counter() - started, error=reason
        )


def check_chunking(size: int, overlap: int) -> None:
    """Refuse the chunking a document is to be ingested with when it is out of the bounds the settings
    hold ``CITELINE_CHUNK_SIZE`` and ``CITELINE_CHUNK_OVERLAP`` to, or cannot work (an overlap as large
    as the chunk would never advance). The size is checked first: a bad size is not the overlap's fault.
    """
    if not CHUNK_SIZE_MIN <= size <= CHUNK_SIZE_MAX:
        raise InvalidRequestError(
            f"chunk_size (--chunk-size) must be {CHUNK_SIZE_MIN} to {CHUNK_SIZE_MAX} characters, as for "
            f"CITELINE_CHUNK_SIZE, got {size}"
        )
    if not 0 <= overlap < min(size, CHUNK_OVERLAP_MAX + 1):
        raise InvalidRequestError(
            f"chunk_overlap (--chunk-overlap) must be at least 0 and below the chunk size ({size}), "
            f"at most {CHUNK_OVERLAP_MAX} as for CITELINE_CHUNK_OVERLAP, got {overlap}"
        )


def _ctrl_c(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C an error stands for, if it stands for one. A KeyboardInterrupt that lands in
    psycopg's wait (a pool's ping as a connection is checked out, say) comes out as the driver's error
    ("can't change 'autocommit' now: connection in transaction status ACTIVE"), raised while handling
    it: taken as one source's failure, the ingest went on after Ctrl-C."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def stored_source(doc: DocumentInfo, *, allow_private_urls: bool = False) -> Source:
    """A version to build as a :class:`Source`: its stored original, or its URL for a web page."""
    if doc.file_path:
        path = Path(doc.file_path)

        def open_stored() -> LoadedSource:
            if not path.exists():
                raise LoadError(doc.name, f"its stored original {path} is missing")
            try:
                loaded = load(path)
            except LoadError as exc:
                raise type(exc)(doc.name, exc.reason) from exc
            # Stored originals are named by their hash: a title taken from the file name is the upload's.
            if loaded.title == path.stem:
                loaded.title = Path(doc.name).stem
            loaded.pages = _named_errors(loaded.pages, doc.name)
            return loaded

        return Source(doc.name, doc.source_uri, doc.name, doc.content_hash or "", open_stored, path)
    if _is_url(doc.source_uri):
        uri = doc.source_uri
        return Source(
            uri, uri, doc.name, doc.content_hash or "", lambda: load(uri, allow_private=allow_private_urls)
        )
    return Source(doc.name, doc.source_uri, doc.name, "", _missing(doc))


def _named_errors(pages: Iterator[Page], name: str) -> Iterator[Page]:
    """``pages``, with load errors naming the document as its user knows it, not its stored copy."""
    try:
        yield from pages
    except LoadError as exc:
        raise type(exc)(name, exc.reason) from exc


def _missing(doc: DocumentInfo) -> Callable[[], LoadedSource]:
    def fail() -> LoadedSource:
        raise LoadError(doc.name, "no stored original to build this version from; ingest the source again")

    return fail


_NAMED_ABANDONED = 5


def settle_abandoned(engine: sa.Engine, abandoned: Sequence[tuple[DocumentInfo, str | None]]) -> None:
    """After :func:`catalog.fail_abandoned` has committed: log each version it failed and remove the
    originals they alone held."""
    # An eval stopped while ingesting a corpus leaves hundreds: a line each buried the next command's
    # output, so the first few are named and the rest counted.
    for doc, _ in abandoned[:_NAMED_ABANDONED]:
        log.warning("%s (version %d): %s", doc.name, doc.version, catalog.INTERRUPTED)
    if len(abandoned) > _NAMED_ABANDONED:
        log.warning("and %d more versions: %s", len(abandoned) - _NAMED_ABANDONED, catalog.INTERRUPTED)
    remove_unused_files(engine, {Path(f) for _, f in abandoned if f})


def remove_unused_files(engine: sa.Engine, paths: Iterable[Path]) -> None:
    """Delete stored originals that no version refers to any more.

    Originals are stored by their hash, so an upload of the same bytes may be registering a version
    that refers to one while it is removed. It is set aside first, then looked up again: a version
    registered meanwhile gets it back, and one registered after that puts its own copy in place
    (:func:`citeline.jobs.submit.settle_spare`). Removed at once, the upload's version was left
    referring to nothing.
    """
    paths = list(paths)
    if not paths:
        return
    with engine.connect() as conn:
        for path in paths:
            if catalog.file_in_use(conn, str(path)):
                continue
            aside = path.with_name(path.name + ".removing")
            try:
                path.replace(aside)
            except FileNotFoundError:
                continue
            conn.rollback()  # the next statement reads what has been committed since
            if catalog.file_in_use(conn, str(path)):
                aside.replace(path)
            else:
                aside.unlink(missing_ok=True)


def _groups(sources: Iterable[Source], size: int) -> Iterator[list[Source]]:
    """Consecutive sources in groups of at most ``size``, a source never twice in one group."""
    group: list[Source] = []
    uris: set[str] = set()
    for source in sources:
        if len(group) == size or source.uri in uris:
            yield group
            group, uris = [], set()
        group.append(source)
        uris.add(source.uri)
    if group:
        yield group


def _storable_source(source: Source) -> Source:
    """``source`` with a name and URI PostgreSQL can store (see :func:`storable`): a caller may build one
    in memory from any text."""
    uri, name = storable(source.uri), storable(source.name)
    if uri is source.uri and name is source.name:
        return source
    return dataclasses.replace(source, uri=uri, name=name)


def _storable_loaded(loaded: LoadedSource) -> LoadedSource:
    """``loaded`` with pages holding nothing PostgreSQL cannot store (its title and metadata are made
    storable when the version is swapped in: a loader may add to the metadata until its last page).

    The loaders clean what they read (load/clean.py); a source a caller builds in memory may still hold
    a NUL or a lone surrogate, which failed the write of every document batched with it. Each becomes
    U+FFFD, one character for one, so the chunks' offsets into the page still hold.
    """
    loaded.pages = (_storable_page(page) for page in loaded.pages)
    return loaded


def _storable_metadata(metadata: SourceMetadata) -> SourceMetadata:
    return {
        storable(k): storable(v) if isinstance(v, str) else [storable(item) for item in v]
        for k, v in metadata.items()
    }


def _storable_page(page: Page) -> Page:
    text = storable(page.text)
    headings = [storable(s.heading) for s in page.sections]
    if text is page.text and all(h is s.heading for h, s in zip(headings, page.sections, strict=True)):
        return page
    sections = tuple(Section(s.start, h) for s, h in zip(page.sections, headings, strict=True))
    return dataclasses.replace(page, text=text, sections=sections)


def _each_alone(items: Sequence[T], write: Callable[[Sequence[T]], R]) -> list[tuple[T, R | str]]:
    """``write`` each item in a call of its own (a transaction): its result, or why the database refused
    one of its values. For a batch the database refused: the others are written, the refused fail
    alone. Any other error propagates."""
    out: list[tuple[T, R | str]] = []
    for item in items:
        try:
            out.append((item, write([item])))
        except Exception as exc:
            reason = catalog.refused_data(exc)
            if reason is None:
                raise
            out.append((item, reason))
    return out
