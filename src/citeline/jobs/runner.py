"""Runners: what claims queued document versions and builds them.

:class:`ThreadRunner` is the embedded default: worker threads inside the serving process. Each worker
claims a batch of queued versions (oldest first, retry delays respected) and builds them through the
ingestion pipeline. A sweeper thread of its own looks for jobs whose run died (requeued, or failed
after their retries) and for jobs over their hard time limit (failed; their work is discarded when it
ends). New jobs wake an idle worker at once; others are found within ``job_poll_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import sqlalchemy as sa

from citeline.ingest import Ingestor, IngestResult, RetryPolicy, remove_unused_files, settle_abandoned
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.catalog import DocumentInfo

log = logging.getLogger(__name__)

#: How often (seconds) a worker asks the catalog whether the versions it builds were cancelled.
_CANCEL_CHECK_EVERY = 1.0


class JobRunner(Protocol):
    """Something that processes queued document versions."""

    def start(self) -> None:
        """Start processing (idempotent)."""
        ...

    def notify(self, version_ids: Sequence[uuid.UUID] = ()) -> None:
        """Versions were queued (``version_ids``): have them built now rather than at the next poll."""
        ...

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking jobs; jobs being built are left to the queue's crash recovery."""
        ...

    @property
    def problem(self) -> str | None:
        """Why the runner is not processing, in words an operator can act on; None when it is (the
        readiness check)."""
        ...


class ThreadRunner:
    """Worker threads that claim queued versions from the catalog and build them."""

    def __init__(
        self,
        engine: sa.Engine,
        ingestor: Callable[[], Ingestor],
        settings: Settings,
        *,
        on_result: Callable[[IngestResult], None] | None = None,
    ) -> None:
        self._engine = engine
        self._ingestor = ingestor
        self._settings = settings
        self._on_result = on_result
        self._retry = RetryPolicy(settings.job_retries, settings.job_retry_delay)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._limits = JobLimits(engine, settings)

    def start(self) -> None:
        with self._lock:
            if self._threads:
                return
            self._stopping.clear()
            # The sweeper has a thread of its own: workers may be stuck in a job it has to fail.
            targets = [("citeline-job-sweep", self._sweeping)] + [
                (f"citeline-job-{i}", self._work) for i in range(self._settings.job_workers)
            ]
            for name, target in targets:
                thread = threading.Thread(target=target, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)

    def notify(self, version_ids: Sequence[uuid.UUID] = ()) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopping.set()
            self._wake.set()
            threads, self._threads = self._threads, []
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def problem(self) -> str | None:
        if not self._threads:
            return "the job runner's threads are not started"
        dead = sum(1 for t in self._threads if not t.is_alive())
        return f"{dead} of the job runner's {len(self._threads)} threads stopped" if dead else None

    def _sweeping(self) -> None:
        while not self._stopping.wait(self._settings.job_poll_seconds):
            try:
                self._sweep()
            except Exception:
                log.exception("sweeping the job queue failed; trying again at the next poll")

    def _work(self) -> None:
        while not self._stopping.is_set():
            found = False
            try:
                results = self._ingestor().run_jobs(
                    limit=self._settings.job_batch,
                    retry=self._retry,
                    should_stop=self._limits,
                    progress=self._on_result,
                )
                found = bool(results)
            except Exception:
                # The database went away, say: the versions claimed stay processing with a dead run
                # lock, and the next sweep puts them back in the queue.
                log.exception("a job run failed; its documents are retried by the next sweep")
            if not found:
                self._wake.wait(self._settings.job_poll_seconds)
                self._wake.clear()

    def _sweep(self) -> None:
        sweep(self._engine, self._settings)


def sweep(engine: sa.Engine, settings: Settings) -> None:
    """Requeue (or fail) jobs whose run died; fail jobs over their hard time limit."""
    with engine.begin() as conn:
        # Overdue first: a job whose worker was ended for its hard time limit fails, never requeued.
        overdue = catalog.fail_overdue(conn, settings.job_hard_time_limit)
        abandoned = catalog.fail_abandoned(
            conn, retries=settings.job_retries, retry_delay=settings.job_retry_delay
        )
    settle_abandoned(engine, abandoned)
    for doc, _ in overdue:
        log.warning("%s (version %d): %s", doc.name, doc.version, doc.error)
    # A version failed for its time limit keeps no original: those only they held go (a run still at
    # work has read it).
    remove_unused_files(engine, {Path(f) for _, f in overdue if f})


class JobLimits:
    """The :data:`~citeline.ingest.StopCheck` of every runner: page limit, soft time limit, cancel."""

    def __init__(self, engine: sa.Engine, settings: Settings) -> None:
        self._engine = engine
        self._settings = settings
        self._checked: dict[uuid.UUID, float] = {}

    def __call__(self, doc: DocumentInfo, elapsed: float, pages: int) -> str | None:
        limits = self._settings
        if pages >= limits.upload_max_pages:
            return (
                f"has more than {limits.upload_max_pages} pages (CITELINE_UPLOAD_MAX_PAGES); "
                "split it or raise the limit"
            )
        if elapsed > limits.job_soft_time_limit:
            return f"took longer than {limits.job_soft_time_limit:g} s (CITELINE_JOB_SOFT_TIME_LIMIT)"
        now = time.monotonic()
        if now - self._checked.get(doc.version_id, 0.0) >= _CANCEL_CHECK_EVERY:
            self._checked[doc.version_id] = now
            with self._engine.connect() as conn:
                if catalog.cancel_requested(conn, [doc.version_id]):
                    return catalog.CANCELLED
        return None
