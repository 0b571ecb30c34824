"""What a running citeline has done, as Prometheus metrics: searches, answers, ingest jobs and (the API
adds them) HTTP requests and answer slots, plus counts read from the catalog when scraped.

Each process counts its own work. ``citeline serve --workers N`` runs N processes, and a scrape reaches
any one of them, so the counts are kept in prometheus_client's multiprocess mode: every process writes
its values to memory-mapped files in one folder per serve (:func:`use_folder`, called before anything
is counted), and a scrape (:func:`exposition`) adds up the files of every process. Without a folder
(the CLI, a test's app) the counts are this process's.

prometheus_client decides between the two when it is imported, from ``PROMETHEUS_MULTIPROC_DIR``: it
is imported here only when the first metric is made, never when citeline is, so ``citeline serve`` can
set the folder after the CLI has loaded.

The catalog's counts (versions by status, documents, chunks) are the same from every process, since
all share the catalog: they are read by the process scraped, at most every
:data:`CATALOG_MAX_AGE` seconds, and never added up.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

#: The variable prometheus_client reads its multiprocess folder from.
FOLDER_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
#: Seconds a scrape may answer with catalog counts read by an earlier one.
CATALOG_MAX_AGE = 5.0
#: What ``GET /metrics`` answers in (Prometheus text exposition format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

E = TypeVar("E")

_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_SEARCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_FIRST_TOKEN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_ANSWER_BUCKETS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def use_folder(folder: Path) -> None:
    """Keep this process's counts, and those of the processes it starts, in ``folder`` (emptied first:
    files a crashed serve left would be added to the new one's). Must run before the first metric is
    made: prometheus_client reads the folder once, when it is imported."""
    if "prometheus_client" in sys.modules:
        raise RuntimeError(
            "prometheus_client was imported before the metrics folder was set: its values would stay "
            "in this process's memory"
        )
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ[FOLDER_VARIABLE] = str(folder)


def forget_process(pid: int | None) -> None:
    """A server process has ended: its gauges (answer slots in use and queued) no longer count. Its
    counters do: what it served was served."""
    folder = os.environ.get(FOLDER_VARIABLE)
    if folder and pid is not None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, folder)  # type: ignore[no-untyped-call]  # untyped upstream


class Metrics:
    """This process's metrics. Made once (:func:`metrics`); each method is a few microseconds."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        #: Where this process's metrics are read from without a multiprocess folder.
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.http_requests = Counter(
            "citeline_http_requests",
            "HTTP requests answered, by route template (not the raw path), method and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.http_seconds = Histogram(
            "citeline_http_request_duration_seconds",
            "Seconds from a request's arrival to the end of its response (a streamed answer's too).",
            ["route", "method"],
            buckets=_HTTP_BUCKETS,
            registry=r,
        )
        self.searches = Counter(
            "citeline_searches", "Searches run, by outcome (ok or error).", ["outcome"], registry=r
        )
        self.search_seconds = Histogram(
            "citeline_search_duration_seconds",
            "Seconds a search took (embedding the query, ranking, reading the passages).",
            buckets=_SEARCH_BUCKETS,
            registry=r,
        )
        self.answers_started = Counter("citeline_answers_started", "Answers begun.", registry=r)
        self.answers_ended = Counter(
            "citeline_answers_ended",
            "Answers ended, by outcome: finished, stopped_early (the client went away) or failed.",
            ["outcome"],
            registry=r,
        )
        self.answers_fell_back = Counter(
            "citeline_answers_fell_back",
            "Finished answers given by the extractive answerer because the model failed or cited nothing.",
            registry=r,
        )
        self.first_token_seconds = Histogram(
            "citeline_answer_first_token_seconds",
            "Seconds from an answer's start to its first token.",
            buckets=_FIRST_TOKEN_BUCKETS,
            registry=r,
        )
        self.answer_seconds = Histogram(
            "citeline_answer_duration_seconds",
            "Seconds from an answer's start to its end (finished answers).",
            buckets=_ANSWER_BUCKETS,
            registry=r,
        )
        # livesum: the slots of the processes running now, added up; a process that ended is dropped.
        self.slots = Gauge(
            "citeline_answer_slots", "Answer slots (all processes).", multiprocess_mode="livesum", registry=r
        )
        self.slots_in_use = Gauge(
            "citeline_answer_slots_in_use",
            "Answers being generated now.",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.slots_queued = Gauge(
            "citeline_answer_slots_queued",
            "Answers waiting for a slot now.",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.jobs = Counter(
            "citeline_ingest_jobs",
            "Ingest jobs this server's runner ended, by outcome: done, failed or retrying (queued again).",
            ["outcome"],
            registry=r,
        )

        # Every outcome exported from the start, as 0: a rate over a series that appears only at its
        # first count misses that count, and an alert on failures needs the series to exist.
        for counter, outcomes in (
            (self.searches, ("ok", "error")),
            (self.answers_ended, ("finished", "stopped_early", "failed")),
            (self.jobs, ("done", "failed", "retrying")),
        ):
            for outcome in outcomes:
                counter.labels(outcome)

    def search_ended(self, seconds: float, *, ok: bool) -> None:
        self.searches.labels("ok" if ok else "error").inc()
        if ok:
            self.search_seconds.observe(seconds)

    def request_ended(self, route: str, method: str, status: int, seconds: float) -> None:
        self.http_requests.labels(route, method, str(status)).inc()
        self.http_seconds.labels(route, method).observe(seconds)

    def job_ended(self, outcome: str) -> None:
        kind = {"failed": "failed", "retrying": "retrying"}.get(outcome, "done")
        self.jobs.labels(kind).inc()


@cache
def metrics() -> Metrics:
    """This process's metrics, made at first use."""
    return Metrics()


@dataclass(frozen=True)
class CatalogCounts:
    """What the catalog holds, as every process sees it."""

    #: Versions by status (queued, processing, completed, failed, staged, superseded, pending).
    versions: dict[str, int] = field(default_factory=dict)
    #: Versions searched now (one per document that has a completed version).
    active: int = 0
    documents: int = 0
    chunks: int = 0


#: Every status a version may have, so each is exported (as 0 when none has it).
VERSION_STATUSES = ("pending", "queued", "processing", "completed", "failed", "staged", "superseded")


class CatalogCollector:
    """Exports :class:`CatalogCounts` read by ``read`` at scrape time, at most every ``max_age`` s."""

    def __init__(self, read: Callable[[], CatalogCounts], max_age: float = CATALOG_MAX_AGE) -> None:
        self._read = read
        self._max_age = max_age
        self._kept: tuple[float, CatalogCounts] | None = None

    def counts(self) -> CatalogCounts:
        now = time.monotonic()
        if self._kept is None or now - self._kept[0] >= self._max_age:
            self._kept = (now, self._read())
        return self._kept[1]

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        c = self.counts()
        versions = GaugeMetricFamily(
            "citeline_document_versions",
            "Document versions by status, from the catalog (shared by every process).",
            labels=["status"],
        )
        for status in sorted({*VERSION_STATUSES, *c.versions}):
            versions.add_metric([status], c.versions.get(status, 0))
        yield versions
        yield GaugeMetricFamily("citeline_document_versions_active", "Versions searched now.", value=c.active)
        yield GaugeMetricFamily("citeline_documents", "Documents in the catalog.", value=c.documents)
        yield GaugeMetricFamily("citeline_chunks", "Chunks searched now.", value=c.chunks)


def exposition(catalog: CatalogCollector | None = None) -> bytes:
    """Every metric in Prometheus text format: every server process's counts added up (in
    multiprocess mode, else this process's), then the catalog's."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    folder = os.environ.get(FOLDER_VARIABLE)
    registry: CollectorRegistry
    if folder:
        metrics()  # so a process that has served nothing yet still names every metric
        registry = CollectorRegistry()
        MultiProcessCollector(registry, folder)  # type: ignore[no-untyped-call]  # untyped upstream
    else:
        registry = metrics().registry
    text = generate_latest(registry)
    if catalog is not None:
        extra = CollectorRegistry()
        extra.register(catalog)
        text += generate_latest(extra)
    return text


async def counted_answer(events: AsyncGenerator[E, None]) -> AsyncGenerator[E, None]:
    """``events``, an answer's event stream (:meth:`citeline.chat.session.ChatSession.ask`), passed on
    as it is while it is counted: begun at its first event (a question refused before it is no
    answer), its first token, and how it ended (finished, fell back, failed, or stopped early when the
    reader closes the stream before its end)."""
    from citeline.answer import Complete, Error, Token

    m = metrics()
    started = time.perf_counter()
    begun = tokened = False
    outcome = "stopped_early"
    try:
        async for event in events:
            if not begun:
                begun = True
                m.answers_started.inc()
            if isinstance(event, Token) and not tokened:
                tokened = True
                m.first_token_seconds.observe(time.perf_counter() - started)
            elif isinstance(event, Complete):
                outcome = "finished"
                if event.fell_back:
                    m.answers_fell_back.inc()
            elif isinstance(event, Error):
                outcome = "failed"
            yield event
        if outcome == "stopped_early":
            outcome = "failed"  # it ended with neither an answer nor an error
    except (GeneratorExit, asyncio.CancelledError):
        # The reader closed the stream, or stopped waiting for it: the answer stopped early.
        raise
    except BaseException:
        outcome = "failed"
        raise
    finally:
        await events.aclose()
        if begun:
            m.answers_ended.labels(outcome).inc()
            if outcome == "finished":
                m.answer_seconds.observe(time.perf_counter() - started)
